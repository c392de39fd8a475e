// The scalar references of dot_simd.cpp (contracts in snapkv/ops/dot.h, declared for the kernels
// in kernels/ops_kernels.h): products and sums in index order.
#include "kernels/ops_kernels.h"

namespace snapkv {

float dot_scalar(const float* a, const float* b, size_t n) {
  float sum = 0.0f;
  for (size_t i = 0; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

float dot_f16_scalar(const float* a, const fp16_t* b, size_t n) {
  float sum = 0.0f;
  for (size_t i = 0; i < n; ++i) sum += a[i] * fp16_to_fp32(b[i]);
  return sum;
}

void axpy_scalar(float* y, float alpha, const float* x, size_t n) {
  for (size_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

void axpy_f16_scalar(float* y, float alpha, const fp16_t* x, size_t n) {
  for (size_t i = 0; i < n; ++i) y[i] += alpha * fp16_to_fp32(x[i]);
}

}  // namespace snapkv
