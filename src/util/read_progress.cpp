// Whole-file read progress (include/snapkv/util/read_progress.h).
#include "snapkv/util/read_progress.h"

#include <utility>

namespace snapkv {
namespace {

thread_local const ReadProgressFn* current = nullptr;

}  // namespace

ReadProgressScope::ReadProgressScope(ReadProgressFn fn) : fn_(std::move(fn)), previous_(current) {
  current = &fn_;
}

ReadProgressScope::~ReadProgressScope() {
  current = previous_;
}

void report_read_progress(size_t done, size_t total) {
  if (current != nullptr && *current) (*current)(done, total);
}

}  // namespace snapkv
