// The Q8_0 activation quantizer (q8_dot.h, q8_act.cpp holds the reference), compiled once per
// ISA level (q8_dot_simd.h): AVX2 at the x86-64 levels, NEON at the arm64 ones, the reference
// elsewhere.
#include <cmath>
#include <limits>

#include "kernels/q8_dot_simd.h"

namespace snapkv::SNAPKV_ISA {

// quantize_act_q8_0_ref's operations, 8 lanes at a time: the block maximum of |x| (exact in any
// order), the same scalar d = amax / 127 and id = 1 / d, x * id rounded to nearest-even by
// round_ps, then narrowed to int8 (|q| <= 127: no saturation). A block with a NaN or an infinity,
// or whose id is not finite, is left to the reference.
void quantize_act_q8_0(BlockQ8_0* out, const float* x, size_t n) {
#if SNAPKV_Q8_AVX2
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  const __m256 big = _mm256_set1_ps(std::numeric_limits<float>::max());
  for (size_t b = 0; b < n / kQ8BlockSize; ++b) {
    const float* xb = x + b * kQ8BlockSize;
    __m256 v[4], amax = _mm256_setzero_ps();
    int bad = 0;
    for (size_t i = 0; i < 4; ++i) {
      v[i] = _mm256_loadu_ps(xb + 8 * i);
      const __m256 a = _mm256_and_ps(v[i], abs_mask);
      bad |= _mm256_movemask_ps(_mm256_cmp_ps(a, big, _CMP_NLE_UQ));  // NaN or infinity
      amax = _mm256_max_ps(amax, a);
    }
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    const float d = _mm_cvtss_f32(m) / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    if (bad != 0 || !std::isfinite(id)) {
      ops_internal::quantize_act_q8_0_ref(out + b, xb, kQ8BlockSize);
      continue;
    }
    out[b].d = fp32_to_fp16(d);
    __m256i q[4];
    for (size_t i = 0; i < 4; ++i) {
      q[i] = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v[i], _mm256_set1_ps(id)),
                                                _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
    // packs work per 128-bit lane: the bytes come out as (0 2 4 6 | 1 3 5 7) groups of 4
    const __m256i q16 = _mm256_packs_epi32(q[0], q[1]), r16 = _mm256_packs_epi32(q[2], q[3]);
    const __m256i bytes = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(q16, r16),
                                                      _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out[b].qs), bytes);
  }
#elif SNAPKV_Q8_NEON
  // The same steps 4 lanes at a time: vcvtnq rounds to nearest-even, the two narrowing moves
  // saturate but never act (|q| <= 127).
  const float32x4_t big = vdupq_n_f32(std::numeric_limits<float>::max());
  for (size_t b = 0; b < n / kQ8BlockSize; ++b) {
    const float* xb = x + b * kQ8BlockSize;
    float32x4_t v[8], amax = vdupq_n_f32(0.0f);
    uint32x4_t finite = vdupq_n_u32(0xFFFFFFFFu);
    for (size_t i = 0; i < 8; ++i) {
      v[i] = vld1q_f32(xb + 4 * i);
      const float32x4_t a = vabsq_f32(v[i]);
      finite = vandq_u32(finite, vcleq_f32(a, big));  // false for NaN or infinity
      amax = vmaxq_f32(amax, a);
    }
    const float d = vmaxvq_f32(amax) / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    if (vminvq_u32(finite) == 0 || !std::isfinite(id)) {
      ops_internal::quantize_act_q8_0_ref(out + b, xb, kQ8BlockSize);
      continue;
    }
    out[b].d = fp32_to_fp16(d);
    const float32x4_t vid = vdupq_n_f32(id);
    for (size_t i = 0; i < 8; i += 4) {
      int16x8_t h[2];
      for (size_t k = 0; k < 2; ++k) {
        const int32x4_t lo = vcvtnq_s32_f32(vmulq_f32(v[i + 2 * k], vid));
        const int32x4_t hi = vcvtnq_s32_f32(vmulq_f32(v[i + 2 * k + 1], vid));
        h[k] = vcombine_s16(vqmovn_s32(lo), vqmovn_s32(hi));
      }
      vst1q_s8(out[b].qs + 4 * i, vcombine_s8(vqmovn_s16(h[0]), vqmovn_s16(h[1])));
    }
  }
#else
  ops_internal::quantize_act_q8_0_ref(out, x, n);
#endif
}

}  // namespace snapkv::SNAPKV_ISA
