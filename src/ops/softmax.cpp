// Stable softmax over a row and the polynomial exp behind it. exp_approx is written branch-free
// (clamp, round, integer exponent build, select) so the loop in exp_n vectorises under -O2/-O3.
#include "snapkv/ops/softmax.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>

namespace snapkv {

float exp_approx(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693359375f;     // exact in 9 bits: n * kLn2Hi has no rounding
  constexpr float kLn2Lo = -2.12194440e-4f;  // ln 2 - kLn2Hi
  constexpr float kLow = -87.33654f;         // ln(2^-126)
  constexpr float kHigh = 88.72283f;         // ln(FLT_MAX)
  const float xc = std::min(std::max(x, kLow), kHigh);
  const float n = std::floor(xc * kLog2e + 0.5f);
  const float r = (xc - n * kLn2Hi) - n * kLn2Lo;  // |r| <= ln2/2 (+ tiny)
  // Taylor/minimax-like coefficients for e^r on [-ln2/2, ln2/2] (Cephes expf).
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  // 2^n for n in [-126, 128]: build the exponent in two halves so n = 128 cannot overflow.
  const int32_t ni = static_cast<int32_t>(n);
  const int32_t n1 = ni / 2;
  const int32_t n2 = ni - n1;
  const float s1 = std::bit_cast<float>(static_cast<uint32_t>(n1 + 127) << 23);
  const float s2 = std::bit_cast<float>(static_cast<uint32_t>(n2 + 127) << 23);
  const float y = p * s1 * s2;
  return x < kLow ? 0.0f : (x > kHigh ? HUGE_VALF : y);
}

void exp_n(float* y, const float* x, size_t n) {
  for (size_t i = 0; i < n; ++i) y[i] = exp_approx(x[i]);
}

void softmax(float* x, size_t n) {
  if (n == 0) return;
  float max_value = x[0];
  for (size_t i = 1; i < n; ++i) max_value = std::max(max_value, x[i]);
  // Eight partial sums: vectorisable without reassociation flags, and a tighter error bound.
  float partial[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (size_t j = 0; j < 8; ++j) {
      const float e = exp_approx(x[i + j] - max_value);
      x[i + j] = e;
      partial[j] += e;
    }
  }
  float sum = 0.0f;
  for (; i < n; ++i) {
    const float e = exp_approx(x[i] - max_value);
    x[i] = e;
    sum += e;
  }
  for (float p : partial) sum += p;
  const float inv = 1.0f / sum;  // sum >= 1: the maximum contributes exp(0) = 1
  for (size_t k = 0; k < n; ++k) x[k] *= inv;
}

void softmax_scalar(float* x, size_t n) {
  if (n == 0) return;
  float max_value = x[0];
  for (size_t i = 1; i < n; ++i) max_value = std::max(max_value, x[i]);
  float sum = 0.0f;
  for (size_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - max_value);
    sum += x[i];
  }
  for (size_t i = 0; i < n; ++i) x[i] /= sum;
}

}  // namespace snapkv
