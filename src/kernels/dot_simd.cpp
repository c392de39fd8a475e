// Dot products and axpy, compiled once per ISA level (kernels/isa.h): AVX2+FMA (and F16C for
// binary16 rows) when the level targets them, NEON at the arm64 levels in the AVX2 kernels' order
// (the same lanes, fused multiply-adds and final sum: the same bits), plain loops otherwise. The
// scalar references live in dot.cpp.
#include "kernels/isa.h"
#include "kernels/ops_kernels.h"
#include "kernels/vec.h"

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
#if defined(SNAPKV_NEON_KERNELS)
  Acc16 acc;
  for (; i + 16 <= n; i += 16) {
    for (size_t k = 0; k < 4; ++k) {
      acc.v[k] = vfmaq_f32(acc.v[k], vld1q_f32(a + i + 4 * k), vld1q_f32(b + i + 4 * k));
    }
  }
  for (; i + 8 <= n; i += 8) {
    acc.v[0] = vfmaq_f32(acc.v[0], vld1q_f32(a + i), vld1q_f32(b + i));
    acc.v[1] = vfmaq_f32(acc.v[1], vld1q_f32(a + i + 4), vld1q_f32(b + i + 4));
  }
  sum = hsum(acc);
#endif
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
#if defined(SNAPKV_NEON_KERNELS)
  Acc16 acc;
  for (; i + 16 <= n; i += 16) {
    const F8 b0 = load_h<F8>(b + i), b1 = load_h<F8>(b + i + 8);
    acc.v[0] = vfmaq_f32(acc.v[0], vld1q_f32(a + i), b0.val[0]);
    acc.v[1] = vfmaq_f32(acc.v[1], vld1q_f32(a + i + 4), b0.val[1]);
    acc.v[2] = vfmaq_f32(acc.v[2], vld1q_f32(a + i + 8), b1.val[0]);
    acc.v[3] = vfmaq_f32(acc.v[3], vld1q_f32(a + i + 12), b1.val[1]);
  }
  for (; i + 8 <= n; i += 8) {
    const F8 b0 = load_h<F8>(b + i);
    acc.v[0] = vfmaq_f32(acc.v[0], vld1q_f32(a + i), b0.val[0]);
    acc.v[1] = vfmaq_f32(acc.v[1], vld1q_f32(a + i + 4), b0.val[1]);
  }
  sum = hsum(acc);
#endif
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
#if defined(SNAPKV_NEON_KERNELS)
  const float32x4_t va = vdupq_n_f32(alpha);
  for (; i + 8 <= n; i += 8) {  // steps of 8, as AVX2: the same elements take the fused form
    vst1q_f32(y + i, vfmaq_f32(vld1q_f32(y + i), va, vld1q_f32(x + i)));
    vst1q_f32(y + i + 4, vfmaq_f32(vld1q_f32(y + i + 4), va, vld1q_f32(x + i + 4)));
  }
#endif
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
#if defined(SNAPKV_NEON_KERNELS)
  const float32x4_t va = vdupq_n_f32(alpha);
  for (; i + 8 <= n; i += 8) {
    const F8 xv = load_h<F8>(x + i);
    vst1q_f32(y + i, vfmaq_f32(vld1q_f32(y + i), va, xv.val[0]));
    vst1q_f32(y + i + 4, vfmaq_f32(vld1q_f32(y + i + 4), va, xv.val[1]));
  }
#endif
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
