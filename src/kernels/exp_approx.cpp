// exp_approx and exp_fma (snapkv/ops/softmax.h, declared for the kernels in
// kernels/exp_constants.h): the portable definitions, the references of the vector exps of
// softmax_simd.cpp, which perform the same IEEE operations in the same order.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>

#include "kernels/exp_constants.h"

namespace snapkv {

using namespace ops_internal;  // the exp constants

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

}  // namespace snapkv
