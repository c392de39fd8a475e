// Stable softmax and the polynomial exp behind it: the bulk functions run the active ISA level's
// kernels (kernels/softmax_simd.cpp), which match the portable exp_approx and exp_fma
// (kernels/exp_approx.cpp) bit for bit; softmax_scalar (std::exp) is here.
#include "snapkv/ops/softmax.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/registry.h"

namespace snapkv {

void exp_n(float* y, const float* x, size_t n) {
  kernels::active().ops.exp_n(y, x, n);
}

float exp_scale_shift_sum(float* x, size_t n, float scale, float shift) {
  return kernels::active().ops.exp_scale_shift_sum(x, n, scale, shift);
}

float max_value(const float* x, size_t n) {
  return kernels::active().ops.max_value(x, n);
}

float exp_shift_sum(float* x, size_t n, float shift) {
  return kernels::active().ops.exp_shift_sum(x, n, shift);
}

void softmax(float* x, size_t n) {
  kernels::active().ops.softmax(x, n);
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
