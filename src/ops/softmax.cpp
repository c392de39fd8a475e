// Stable softmax and the polynomial exp behind it: exp_approx, the portable scalar definition, and
// softmax_scalar (std::exp) are here; the bulk functions run the active ISA level's kernels
// (softmax_simd.cpp, dispatched through ops/kernels.h), which match exp_approx bit for bit.
#include "snapkv/ops/softmax.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>

#include "ops/exp_constants.h"
#include "ops/kernels.h"

namespace snapkv {

using namespace ops_internal;  // the exp constants, ops_kernels

float exp_approx(float x) {
  const float xc = std::min(std::max(x, kLow), kHigh);
  const float n = std::floor(xc * kLog2e + 0.5f);
  const float r = (xc - n * kLn2Hi) - n * kLn2Lo;  // |r| <= ln2/2 (+ tiny)
  float p = kP0;
  p = p * r + kP1;
  p = p * r + kP2;
  p = p * r + kP3;
  p = p * r + kP4;
  p = p * r + kP5;
  p = p * r * r + r + 1.0f;
  // 2^n for n in [-126, 128]: built in two halves so n = 128 cannot overflow the exponent field.
  const int32_t ni = static_cast<int32_t>(n);
  const int32_t n1 = ni / 2;
  const int32_t n2 = ni - n1;
  const float s1 = std::bit_cast<float>(static_cast<uint32_t>(n1 + 127) << 23);
  const float s2 = std::bit_cast<float>(static_cast<uint32_t>(n2 + 127) << 23);
  const float y = p * s1 * s2;
  return x < kLow ? 0.0f : (x > kHigh ? HUGE_VALF : y);
}

float exp_fma(float x) {
  const float xc = std::min(std::max(x, kLow), kHigh);
  const float n = std::nearbyint(xc * kLog2e);  // rne (the default rounding mode)
  float r = std::fma(-n, kLn2Hi, xc);
  r = std::fma(-n, kLn2Lo, r);
  float p = kP0;
  p = std::fma(p, r, kP1);
  p = std::fma(p, r, kP2);
  p = std::fma(p, r, kP3);
  p = std::fma(p, r, kP4);
  p = std::fma(p, r, kP5);
  const float y = std::fma(p, r * r, r) + 1.0f;
  // n in [-126, 128]: y * 2^n is one rounding (exact unless the result leaves the normal range)
  const float e = std::ldexp(y, static_cast<int>(n));
  return x < kLow ? 0.0f : (x > kHigh ? HUGE_VALF : e);
}

void exp_n(float* y, const float* x, size_t n) {
  ops_kernels().exp_n(y, x, n);
}

float exp_scale_shift_sum(float* x, size_t n, float scale, float shift) {
  return ops_kernels().exp_scale_shift_sum(x, n, scale, shift);
}

float max_value(const float* x, size_t n) {
  return ops_kernels().max_value(x, n);
}

float exp_shift_sum(float* x, size_t n, float shift) {
  return ops_kernels().exp_shift_sum(x, n, shift);
}

void softmax(float* x, size_t n) {
  ops_kernels().softmax(x, n);
}

void softmax_scalar(float* x, size_t n) {
  if (n == 0) return;
  float m = x[0];
  for (size_t i = 1; i < n; ++i) m = std::max(m, x[i]);
  float sum = 0.0f;
  for (size_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - m);
    sum += x[i];
  }
  for (size_t i = 0; i < n; ++i) x[i] /= sum;
}

}  // namespace snapkv
