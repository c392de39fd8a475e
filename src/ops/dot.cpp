// Dot products and axpy: the double-precision reference, and the public entry points, which run
// the active ISA level's kernels (kernels/dot_simd.cpp, dispatched through kernels/registry.h;
// their scalar references are kernels/dot_ref.cpp).
#include "snapkv/ops/dot.h"

#include "kernels/registry.h"

namespace snapkv {

double dot_ref(const float* a, const float* b, size_t n) {
  double sum = 0.0;
  for (size_t i = 0; i < n; ++i) sum += static_cast<double>(a[i]) * static_cast<double>(b[i]);
  return sum;
}

float dot(const float* a, const float* b, size_t n) {
  return kernels::active().ops.dot(a, b, n);
}

float dot_f16(const float* a, const fp16_t* b, size_t n) {
  return kernels::active().ops.dot_f16(a, b, n);
}

void axpy(float* y, float alpha, const float* x, size_t n) {
  kernels::active().ops.axpy(y, alpha, x, n);
}

void axpy_f16(float* y, float alpha, const fp16_t* x, size_t n) {
  kernels::active().ops.axpy_f16(y, alpha, x, n);
}

}  // namespace snapkv
