// Numerically stable softmax and a vectorisable exp for it. softmax subtracts the maximum before
// exponentiating, so any finite input is safe (no overflow; the largest entry contributes 1).
// softmax_scalar (std::exp, one accumulator) is the reference the fast version is tested against.
#pragma once

#include <cstddef>

namespace snapkv {

// exp(x) by range reduction x = n*ln2 + r, |r| <= ln2/2, and a degree-6 polynomial for e^r.
// Relative error <= 4 * 2^-24 for x in [-87.3, 88.7]; returns 0 below -87.3 (e^x < 2^-126 there,
// beneath the normal range), +inf above 88.7. NaN in gives an unspecified value (callers reject
// non-finite data before calling).
float exp_approx(float x);

// y[i] = exp_approx(x[i]).  y, x: [n] (may alias)
void exp_n(float* y, const float* x, size_t n);

// In place x[i] = exp_approx(x[i] - shift); returns sum_i x[i] (eight interleaved partial sums,
// added in lane order, then the tail). The building block of softmax over several segments.
float exp_shift_sum(float* x, size_t n, float shift);

// exp(x) evaluated with fused multiply-adds: exp_approx's range reduction and polynomial, but
// n = rne(x * log2e), every multiply-add (the reduction's two, the polynomial's six) rounded once,
// and p * 2^n rounded once. About 40% fewer vector operations than exp_approx, with the same
// bound: relative error <= 4 * 2^-24 for x in [-87.3, 88.7], 0 below -87.3, +inf above 88.7.
// The bulk kernel below gives these bits at every ISA level.
float exp_fma(float x);

// In place x[i] = exp_fma(fma(x[i], scale, -shift)) (x * scale - shift rounded once: raw logits
// scaled and shifted in one step); returns sum_i x[i], accumulated in sixteen interleaved partial
// sums p[i % 16] in increasing i, then folded p[l] += p[l + w] for w = 8, 4, 2, 1 (p[0]). The same
// bits at every ISA level. The online-softmax step of fused decode attention
// (kv/core/span_attention.h), where it replaces a scaling pass, a subtraction and exp_approx.
float exp_scale_shift_sum(float* x, size_t n, float scale, float shift);

// max_i x[i]; x: [n], n >= 1, no NaN.
float max_value(const float* x, size_t n);

// In place: x[i] = exp(x[i] - max_j x[j]) / sum_j exp(x[j] - max).  x: [n], n >= 1, finite.
// The AVX2 path performs the same IEEE operations in the same order as the portable one, so the
// result does not depend on the instruction set.
void softmax(float* x, size_t n);
void softmax_scalar(float* x, size_t n);

}  // namespace snapkv
