// Dot products and axpy, compiled once per ISA level (util/isa.h): AVX2+FMA (and F16C for
// binary16 rows) when the level targets them, plain loops otherwise. The scalar references live
// in dot.cpp.
#include "ops/hsum.h"
#include "ops/kernels.h"
#include "util/isa.h"

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define SNAPKV_DOT_AVX2 1
#endif
#if defined(SNAPKV_DOT_AVX2) && defined(__F16C__)
#define SNAPKV_DOT_F16C 1
#endif

namespace snapkv::SNAPKV_ISA {

float dot(const float* a, const float* b, size_t n) {
  size_t i = 0;
  float sum = 0.0f;
#if defined(SNAPKV_DOT_AVX2)
  __m256 acc0 = _mm256_setzero_ps();
  __m256 acc1 = _mm256_setzero_ps();
  for (; i + 16 <= n; i += 16) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
  }
  for (; i + 8 <= n; i += 8) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
  }
  sum = hsum(_mm256_add_ps(acc0, acc1));
#endif
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

float dot_f16(const float* a, const fp16_t* b, size_t n) {
  size_t i = 0;
  float sum = 0.0f;
#if defined(SNAPKV_DOT_F16C)
  __m256 acc0 = _mm256_setzero_ps();
  __m256 acc1 = _mm256_setzero_ps();
  for (; i + 16 <= n; i += 16) {
    const __m256 b0 = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + i)));
    const __m256 b1 = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + i + 8)));
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), b0, acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), b1, acc1);
  }
  for (; i + 8 <= n; i += 8) {
    const __m256 b0 = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + i)));
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), b0, acc0);
  }
  sum = hsum(_mm256_add_ps(acc0, acc1));
#endif
  for (; i < n; ++i) sum += a[i] * fp16_to_fp32(b[i]);
  return sum;
}

void axpy(float* y, float alpha, const float* x, size_t n) {
  size_t i = 0;
#if defined(SNAPKV_DOT_AVX2)
  const __m256 va = _mm256_set1_ps(alpha);
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  }
#endif
  for (; i < n; ++i) y[i] += alpha * x[i];
}

void axpy_f16(float* y, float alpha, const fp16_t* x, size_t n) {
  size_t i = 0;
#if defined(SNAPKV_DOT_F16C)
  const __m256 va = _mm256_set1_ps(alpha);
  for (; i + 8 <= n; i += 8) {
    const __m256 xv = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i)));
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, xv, _mm256_loadu_ps(y + i)));
  }
#endif
  for (; i < n; ++i) y[i] += alpha * fp16_to_fp32(x[i]);
}

}  // namespace snapkv::SNAPKV_ISA
