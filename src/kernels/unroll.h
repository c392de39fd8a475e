// The one idiom of the kernels that work on a GQA group's queries at once (up to 4, the template
// parameter NQ): each query's accumulator is an element of a plain array `V acc[NQ]`, and every
// loop over the queries is `unroll<NQ>([&](auto j) { ... acc[j] ... })`, which runs its body for
// j = 0, 1, ..., NQ - 1 as std::integral_constant values, in that order. Every index into the
// array is then a compile-time constant, so the compiler keeps each element in a register of its
// own (an array indexed by a run-time loop variable may be kept in memory).
// Leaves out: the vector types and their operations (kernels/vec.h).
#pragma once

#include <type_traits>
#include <utility>

#include "kernels/isa.h"

namespace snapkv::SNAPKV_ISA {

namespace unroll_detail {
template <class F, int... J>
[[gnu::always_inline, gnu::flatten]] inline void each(F& f, std::integer_sequence<int, J...>) {
  (f(std::integral_constant<int, J>{}), ...);
}
}  // namespace unroll_detail

// always_inline and flatten: the loop and its body are inlined into the kernel whatever the
// inliner's size heuristics say, so the array elements never leave their registers.
template <int N, class F>
[[gnu::always_inline]] inline void unroll(F&& f) {
  unroll_detail::each(f, std::make_integer_sequence<int, N>{});
}

}  // namespace snapkv::SNAPKV_ISA
