// Error formatting and the always-on invariant check.
#include "snapkv/util/error.h"

#include <cstdio>
#include <cstdlib>

namespace snapkv {

std::string format_error(std::string_view component, std::string_view what, std::string_view got,
                         std::string_view expected) {
  std::string msg;
  msg.reserve(component.size() + what.size() + got.size() + expected.size() + 24);
  msg += '[';
  msg += component;
  msg += "] ";
  msg += what;
  msg += ", got ";
  msg += got;
  msg += ", expected ";
  msg += expected;
  return msg;
}

void throw_invalid(std::string_view component, std::string_view what, std::string_view got,
                   std::string_view expected) {
  throw std::invalid_argument(format_error(component, what, got, expected));
}

void throw_runtime(std::string_view component, std::string_view what, std::string_view got,
                   std::string_view expected) {
  throw RuntimeError(format_error(component, what, got, expected));
}

void check_failed(const char* expr, const char* file, int line) {
  std::fprintf(stderr, "snapkv: internal check failed: %s at %s:%d\n", expr, file, line);
  std::abort();
}

}  // namespace snapkv
