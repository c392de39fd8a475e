// Text of numbers for messages: num(v) spells a count in decimal, the form the "got X, expected Y"
// parts of error messages (util/error.h) and the command-line tables use.
// Leaves out: floating-point formatting (std::snprintf where the format matters).
#pragma once

#include <cstddef>
#include <string>

namespace snapkv {

// The decimal text of v: num(42) == "42".
inline std::string num(size_t v) {
  return std::to_string(v);
}

}  // namespace snapkv
