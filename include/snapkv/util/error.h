// Errors. Two kinds:
//  - bad input from a caller or a file: throw std::invalid_argument (API misuse) or
//    snapkv::RuntimeError (bad data read at run time) with a message of the form
//    "[component] what was wrong, got X, expected Y";
//  - broken internal invariants: SNAPKV_CHECK, always on, aborts with file and line.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

namespace snapkv {

// A failure caused by data (a malformed file, a bad token), not by API misuse.
class RuntimeError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// "[component] what, got GOT, expected EXPECTED"
std::string format_error(std::string_view component, std::string_view what, std::string_view got,
                         std::string_view expected);

[[noreturn]] void throw_invalid(std::string_view component, std::string_view what,
                                std::string_view got, std::string_view expected);
[[noreturn]] void throw_runtime(std::string_view component, std::string_view what,
                                std::string_view got, std::string_view expected);

[[noreturn]] void check_failed(const char* expr, const char* file, int line);

}  // namespace snapkv

// Always-on internal invariant check (never compiled out).
#define SNAPKV_CHECK(cond)                                          \
  do {                                                              \
    if (!(cond)) ::snapkv::check_failed(#cond, __FILE__, __LINE__); \
  } while (0)
