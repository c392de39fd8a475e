// For the kernel files compiled per ISA level (kernels/isa.h): the horizontal sum
// of 8 fp32 lanes that every AVX2 kernel of the ops family ends with (dot_simd.cpp, gemm_simd.cpp),
// in one lane order: ((l0 + l4) + (l1 + l5)) + ((l2 + l6) + (l3 + l7)). The NEON levels keep the
// AVX2 kernels' 8-lane accumulators as pairs of 4-lane registers (Acc16: AVX2's acc0 and acc1) and
// end with the same sum, so they give the AVX2 level's bits. The kernels hold each other bit for
// bit (e.g. the K-quant gemv equals the F32 gemv on the dequantized weights,
// tests/model/kquant_model_test.cpp) only because they share this order. It lives in the level's
// namespace so that no two levels share its symbol.
#pragma once

#include "kernels/isa.h"

#if defined(__AVX2__)
#include <immintrin.h>

namespace snapkv::SNAPKV_ISA {

inline float hsum(__m256 v) {
  __m128 lo = _mm256_castps256_ps128(v);
  const __m128 hi = _mm256_extractf128_ps(v, 1);
  lo = _mm_add_ps(lo, hi);             // s0..s3 = l0+l4 .. l3+l7
  __m128 shuf = _mm_movehdup_ps(lo);   // s1 s1 s3 s3
  __m128 sums = _mm_add_ps(lo, shuf);  // s0+s1 . s2+s3 .
  shuf = _mm_movehl_ps(shuf, sums);    // s2+s3 in lane 0
  sums = _mm_add_ss(sums, shuf);       // (s0+s1) + (s2+s3)
  return _mm_cvtss_f32(sums);
}

}  // namespace snapkv::SNAPKV_ISA
#endif

#if defined(SNAPKV_NEON_KERNELS)
#include <arm_neon.h>

#include "snapkv/util/fp16.h"

namespace snapkv::SNAPKV_ISA {

// Two AVX2 8-lane accumulators as four NEON registers: v[0], v[1] = acc0 lanes 0-3, 4-7;
// v[2], v[3] = acc1 lanes 0-3, 4-7.
struct Acc16 {
  float32x4_t v[4] = {vdupq_n_f32(0.0f), vdupq_n_f32(0.0f), vdupq_n_f32(0.0f), vdupq_n_f32(0.0f)};
};

// The sum of 8 lanes (lo = l0..l3, hi = l4..l7) in the lane order above.
inline float hsum(float32x4_t lo, float32x4_t hi) {
  const float32x4_t s = vaddq_f32(lo, hi);  // s0..s3 = l0+l4 .. l3+l7
  return (vgetq_lane_f32(s, 0) + vgetq_lane_f32(s, 1)) +
         (vgetq_lane_f32(s, 2) + vgetq_lane_f32(s, 3));
}

// hsum(acc0 + acc1).
inline float hsum(const Acc16& acc) {
  return hsum(vaddq_f32(acc.v[0], acc.v[2]), vaddq_f32(acc.v[1], acc.v[3]));
}

// 8 binary16 values to two registers of 4 floats (exact).
inline float32x4x2_t load_f16x8(const fp16_t* p) {
  const float16x8_t h = vreinterpretq_f16_u16(vld1q_u16(p));
  return {{vcvt_f32_f16(vget_low_f16(h)), vcvt_high_f32_f16(h)}};
}

}  // namespace snapkv::SNAPKV_ISA
#endif
