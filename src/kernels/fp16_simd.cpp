// Bulk binary16 conversions, compiled once per ISA level (kernels/isa.h): F16C when the level
// targets it, NEON's fcvtl / fcvtn at the arm64 levels (both round to nearest even, as the scalar
// conversions in fp16.cpp), else those conversions.
#include <cstdint>
#include <cstring>

#include "kernels/fp16_kernels.h"
#include "kernels/isa.h"

// GCC 12's AVX-512 intrinsics start from _mm512_undefined_*(), a self-initialised variable that
// -W(maybe-)uninitialized reports wherever they inline; silenced for the header's lines only.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#if defined(__F16C__)
#include <immintrin.h>
#endif
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#if defined(SNAPKV_NEON_KERNELS)
#include <arm_neon.h>
#endif

namespace snapkv::SNAPKV_ISA {

#if defined(SNAPKV_NEON_KERNELS)
namespace {
// 8 binary16 values (bits) to 8 floats, exact.
inline float32x4x2_t widen8(const fp16_t* in) {
  const float16x8_t h = vreinterpretq_f16_u16(vld1q_u16(in));
  return {{vcvt_f32_f16(vget_low_f16(h)), vcvt_high_f32_f16(h)}};
}
// 8 floats to binary16 bits, round to nearest even (the FPCR's default mode).
inline uint16x8_t narrow8(float32x4_t lo, float32x4_t hi) {
  return vreinterpretq_u16_f16(vcvt_high_f16_f32(vcvt_f16_f32(lo), hi));
}
}  // namespace
#endif

void fp16_to_fp32_n(float* out, const fp16_t* in, size_t n) {
  size_t i = 0;
#if defined(SNAPKV_NEON_KERNELS)
  for (; i + 8 <= n; i += 8) {
    const float32x4x2_t f = widen8(in + i);
    vst1q_f32(out + i, f.val[0]);
    vst1q_f32(out + i + 4, f.val[1]);
  }
#endif
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(h));
  }
#endif
  for (; i < n; ++i) out[i] = fp16_to_fp32(in[i]);
}

void fp32_to_fp16_n(fp16_t* out, const float* in, size_t n) {
  size_t i = 0;
#if defined(SNAPKV_NEON_KERNELS)
  for (; i + 8 <= n; i += 8) vst1q_u16(out + i, narrow8(vld1q_f32(in + i), vld1q_f32(in + i + 4)));
#endif
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8) {
    const __m256 f = _mm256_loadu_ps(in + i);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                     _mm256_cvtps_ph(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
#endif
  for (; i < n; ++i) out[i] = fp32_to_fp16(in[i]);
}

// |x| <= kFp16Max compared on the bits: with the sign cleared, a float's bits order like its
// magnitude as an unsigned integer, and Inf and NaN sit above every finite value. The largest
// cleared-sign bits seen are kept (an unsigned max per lane), compared once at the end.
bool fp16_round_trip_n(float* out, const float* in, size_t n) {
  uint32_t limit_bits = 0;
  std::memcpy(&limit_bits, &kFp16Max, sizeof limit_bits);
  uint32_t max_bits = 0;
  size_t i = 0;
#if defined(SNAPKV_NEON_KERNELS)
  const uint32x4_t abs_mask4 = vdupq_n_u32(0x7fffffffu);
  uint32x4_t max4 = vdupq_n_u32(0);
  for (; i + 8 <= n; i += 8) {
    const float32x4_t lo = vld1q_f32(in + i), hi = vld1q_f32(in + i + 4);
    max4 = vmaxq_u32(max4, vandq_u32(vreinterpretq_u32_f32(lo), abs_mask4));
    max4 = vmaxq_u32(max4, vandq_u32(vreinterpretq_u32_f32(hi), abs_mask4));
    const float16x8_t h = vreinterpretq_f16_u16(narrow8(lo, hi));
    vst1q_f32(out + i, vcvt_f32_f16(vget_low_f16(h)));
    vst1q_f32(out + i + 4, vcvt_high_f32_f16(h));
  }
  max_bits = vmaxvq_u32(max4);
#endif
#if defined(__AVX512F__)
  const __m512i abs_mask16 = _mm512_set1_epi32(0x7fffffff);
  __m512i max16 = _mm512_setzero_si512();
  for (; i + 16 <= n; i += 16) {
    const __m512 f = _mm512_loadu_ps(in + i);
    max16 = _mm512_max_epu32(max16, _mm512_and_si512(_mm512_castps_si512(f), abs_mask16));
    const __m256i h = _mm512_cvtps_ph(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm512_storeu_ps(out + i, _mm512_cvtph_ps(h));
  }
  max_bits = _mm512_reduce_max_epu32(max16);
#endif
#if defined(__F16C__)
  const __m256i abs_mask8 = _mm256_set1_epi32(0x7fffffff);
  __m256i max8 = _mm256_setzero_si256();
  for (; i + 8 <= n; i += 8) {
    const __m256 f = _mm256_loadu_ps(in + i);
    max8 = _mm256_max_epu32(max8, _mm256_and_si256(_mm256_castps_si256(f), abs_mask8));
    const __m128i h = _mm256_cvtps_ph(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(h));
  }
  alignas(32) uint32_t lanes[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), max8);
  for (const uint32_t b : lanes) max_bits = b > max_bits ? b : max_bits;
#endif
  for (; i < n; ++i) {
    uint32_t bits = 0;
    std::memcpy(&bits, in + i, sizeof bits);
    bits &= 0x7fffffffu;
    max_bits = bits > max_bits ? bits : max_bits;
    out[i] = fp16_to_fp32(fp32_to_fp16(in[i]));
  }
  return max_bits <= limit_bits;
}

}  // namespace snapkv::SNAPKV_ISA
