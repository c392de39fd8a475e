// Private pieces shared by the task generator's source files.
#pragma once

#include <string>

#include "snapkv/eval/tasks.h"

namespace snapkv::eval {

// An adjective-noun needle key ("quiet-river"), from the filler's word lists.
std::string needle_key(TaskRng& rng);

}  // namespace snapkv::eval
