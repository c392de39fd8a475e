// The one-pass decoders of the Q4_0 and K-quant blocks (quant_blocks.h), compiled once per ISA
// level (kernels/isa.h): plain loops the compiler vectorizes, and for Q4_0, Q2_K, Q3_K, Q5_K and
// Q6_K AVX2 byte arithmetic when the level targets it. Every weight is the fp32 expression
// documented in util/quant_blocks.h, evaluated in the same order as the references there, so the
// two agree bit for bit.
#include <cstring>

#include "kernels/isa.h"
#include "kernels/ops_kernels.h"
#include "util/quant_scales.h"

#if defined(__AVX2__)
#include <immintrin.h>
#define SNAPKV_QUANT_AVX2 1
#endif

namespace snapkv::SNAPKV_ISA {
namespace {

using namespace quant_internal;  // the packed scales

#if SNAPKV_QUANT_AVX2
// y[0..32) = dl[l / 16] * q[l] - ml[l / 16] for 32 int8 quants q (two runs of 16 with their own
// step and offset); the same fp32 expression, multiply then subtract, as the scalar decoders.
void store_two_runs(float* y, __m256i q, const float dl[2], const float ml[2]) {
  alignas(32) int8_t qs[32];
  _mm256_store_si256(reinterpret_cast<__m256i*>(qs), q);
  for (size_t part = 0; part < 2; ++part) {
    const __m256 vd = _mm256_set1_ps(dl[part]), vm = _mm256_set1_ps(ml[part]);
    for (size_t j = 0; j < 16; j += 8) {
      int64_t bits;
      std::memcpy(&bits, qs + 16 * part + j, sizeof bits);
      const __m256 v = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_cvtsi64_si128(bits)));
      _mm256_storeu_ps(y + 16 * part + j, _mm256_sub_ps(_mm256_mul_ps(vd, v), vm));
    }
  }
}
#endif

}  // namespace

// ---- Q4_0 ------------------------------------------------------------------------------------

void decode_block(float* out, const BlockQ4_0& b) {
  const float d = fp16_to_fp32(b.d);
  constexpr size_t half = kQ4_0BlockSize / 2;
#if SNAPKV_QUANT_AVX2
  const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.qs));
  const __m128i mask = _mm_set1_epi8(0x0F), eight = _mm_set1_epi8(8);
  const __m128i lo = _mm_sub_epi8(_mm_and_si128(bytes, mask), eight);
  const __m128i hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(bytes, 4), mask), eight);
  const __m256 vd = _mm256_set1_ps(d);
  const auto store8 = [&](float* y, __m128i q8) {  // low 8 int8 lanes of q8 -> y[0..8)
    _mm256_storeu_ps(y, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q8)), vd));
  };
  store8(out, lo);
  store8(out + 8, _mm_srli_si128(lo, 8));
  store8(out + half, hi);
  store8(out + half + 8, _mm_srli_si128(hi, 8));
#else
  for (size_t j = 0; j < half; ++j) {
    out[j] = static_cast<float>((b.qs[j] & 0x0F) - 8) * d;
    out[j + half] = static_cast<float>((b.qs[j] >> 4) - 8) * d;
  }
#endif
}

// ---- Q2_K ------------------------------------------------------------------------------------

void decode_block(float* out, const BlockQ2_K& b) {
  const float d = fp16_to_fp32(b.d);
  const float dmin = fp16_to_fp32(b.dmin);
  for (size_t h = 0; h < 2; ++h) {
    const uint8_t* q = b.qs + 32 * h;
#if SNAPKV_QUANT_AVX2
    const __m256i bytes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q));
#endif
    for (size_t j = 0; j < 4; ++j) {
      const unsigned shift = static_cast<unsigned>(2 * j);
      float dl[2], ml[2];
      for (size_t part = 0; part < 2; ++part) {
        const uint8_t sm = b.scales[8 * h + 2 * j + part];
        dl[part] = d * static_cast<float>(sm & 0x0F);
        ml[part] = dmin * static_cast<float>(sm >> 4);
      }
      float* y = out + 128 * h + 32 * j;
#if SNAPKV_QUANT_AVX2
      const __m256i v =
          _mm256_and_si256(_mm256_srli_epi16(bytes, static_cast<int>(shift)), _mm256_set1_epi8(3));
      store_two_runs(y, v, dl, ml);
#else
      for (size_t l = 0; l < 32; ++l) {
        y[l] = dl[l / 16] * static_cast<float>((q[l] >> shift) & 3) - ml[l / 16];
      }
#endif
    }
  }
}

// ---- Q3_K ------------------------------------------------------------------------------------

void decode_block(float* out, const BlockQ3_K& b) {
  const float d = fp16_to_fp32(b.d);
  const float zero[2] = {0.0f, 0.0f};
#if SNAPKV_QUANT_AVX2
  const __m256i hmask = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.hmask));
#endif
  for (size_t h = 0; h < 2; ++h) {
    const uint8_t* q = b.qs + 32 * h;
#if SNAPKV_QUANT_AVX2
    const __m256i bytes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q));
#endif
    for (size_t j = 0; j < 4; ++j) {
      const unsigned shift = static_cast<unsigned>(2 * j);
      const unsigned hbit = static_cast<unsigned>(4 * h + j);
      const float dl[2] = {d * static_cast<float>(scale_q3_K(b.scales, 8 * h + 2 * j)),
                           d * static_cast<float>(scale_q3_K(b.scales, 8 * h + 2 * j + 1))};
      float* y = out + 128 * h + 32 * j;
#if SNAPKV_QUANT_AVX2
      const __m256i three = _mm256_set1_epi8(3), one = _mm256_set1_epi8(1);
      const __m256i low =
          _mm256_and_si256(_mm256_srli_epi16(bytes, static_cast<int>(shift)), three);
      const __m256i high = _mm256_and_si256(_mm256_srli_epi16(hmask, static_cast<int>(hbit)), one);
      // q = low - 4 when the high bit is clear: subtract 4 * (1 - high)
      const __m256i minus = _mm256_slli_epi16(_mm256_xor_si256(high, one), 2);
      store_two_runs(y, _mm256_sub_epi8(low, minus), dl, zero);
#else
      for (size_t l = 0; l < 32; ++l) {
        const int v = ((q[l] >> shift) & 3) - (((b.hmask[l] >> hbit) & 1) ? 0 : 4);
        y[l] = dl[l / 16] * static_cast<float>(v) - zero[l / 16];
      }
#endif
    }
  }
}

// ---- Q4_K ------------------------------------------------------------------------------------

void decode_block(float* out, const BlockQ4_K& b) {
  const float d = fp16_to_fp32(b.d);
  const float dmin = fp16_to_fp32(b.dmin);
  for (size_t g = 0; g < 4; ++g) {
    int sc0, m0, sc1, m1;
    scale_min_k4(b.scales, 2 * g, sc0, m0);
    scale_min_k4(b.scales, 2 * g + 1, sc1, m1);
    const float d0 = d * static_cast<float>(sc0), min0 = dmin * static_cast<float>(m0);
    const float d1 = d * static_cast<float>(sc1), min1 = dmin * static_cast<float>(m1);
    const uint8_t* q = b.qs + 32 * g;
    float* y = out + 64 * g;
    for (size_t l = 0; l < 32; ++l) y[l] = d0 * static_cast<float>(q[l] & 0x0F) - min0;
    for (size_t l = 0; l < 32; ++l) y[32 + l] = d1 * static_cast<float>(q[l] >> 4) - min1;
  }
}

// ---- Q5_K ------------------------------------------------------------------------------------

void decode_block(float* out, const BlockQ5_K& b) {
  const float d = fp16_to_fp32(b.d);
  const float dmin = fp16_to_fp32(b.dmin);
  for (size_t g = 0; g < 4; ++g) {
    int sc0, m0, sc1, m1;
    scale_min_k4(b.scales, 2 * g, sc0, m0);
    scale_min_k4(b.scales, 2 * g + 1, sc1, m1);
    const float d0 = d * static_cast<float>(sc0), min0 = dmin * static_cast<float>(m0);
    const float d1 = d * static_cast<float>(sc1), min1 = dmin * static_cast<float>(m1);
    const uint8_t* q = b.qs + 32 * g;
    const unsigned bit0 = static_cast<unsigned>(2 * g), bit1 = bit0 + 1;
    float* y = out + 64 * g;
#if SNAPKV_QUANT_AVX2
    const __m256i bytes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q));
    const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qh));
    const __m256i low4 = _mm256_set1_epi8(0x0F), one = _mm256_set1_epi8(1);
    const __m256i fifth0 = _mm256_and_si256(_mm256_srli_epi16(qh, static_cast<int>(bit0)), one);
    const __m256i fifth1 = _mm256_and_si256(_mm256_srli_epi16(qh, static_cast<int>(bit1)), one);
    const __m256i v0 = _mm256_or_si256(_mm256_and_si256(bytes, low4), _mm256_slli_epi16(fifth0, 4));
    const __m256i v1 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(bytes, 4), low4),
                                       _mm256_slli_epi16(fifth1, 4));
    const float dl0[2] = {d0, d0}, ml0[2] = {min0, min0};
    const float dl1[2] = {d1, d1}, ml1[2] = {min1, min1};
    store_two_runs(y, v0, dl0, ml0);
    store_two_runs(y + 32, v1, dl1, ml1);
#else
    for (size_t l = 0; l < 32; ++l) {
      const int v = (q[l] & 0x0F) | (((b.qh[l] >> bit0) & 1) << 4);
      y[l] = d0 * static_cast<float>(v) - min0;
    }
    for (size_t l = 0; l < 32; ++l) {
      const int v = (q[l] >> 4) | (((b.qh[l] >> bit1) & 1) << 4);
      y[32 + l] = d1 * static_cast<float>(v) - min1;
    }
#endif
  }
}

// ---- Q6_K ------------------------------------------------------------------------------------

void decode_block(float* out, const BlockQ6_K& b) {
  const float d = fp16_to_fp32(b.d);
#if SNAPKV_QUANT_AVX2
  // 32 six-bit values at a time as bytes, then 8 at a time to fp32 times their run's d * sc.
  const __m256i low4 = _mm256_set1_epi8(0x0F), low2 = _mm256_set1_epi8(0x03);
  const __m256i offset = _mm256_set1_epi8(32);
  for (size_t h = 0; h < 2; ++h) {
    const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qh + 32 * h));
    for (size_t k = 0; k < 4; ++k) {
      const __m256i ql =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.ql + 64 * h + 32 * (k % 2)));
      const __m256i lo = _mm256_and_si256(k < 2 ? ql : _mm256_srli_epi16(ql, 4), low4);
      const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(qh, static_cast<int>(2 * k)),
                                          low2);  // bits 2k..2k+1 of each byte
      const __m256i q = _mm256_sub_epi8(_mm256_or_si256(lo, _mm256_slli_epi16(hi, 4)), offset);
      alignas(32) int8_t qs[32];
      _mm256_store_si256(reinterpret_cast<__m256i*>(qs), q);
      float* y = out + 128 * h + 32 * k;
      for (size_t part = 0; part < 2; ++part) {
        const __m256 dl = _mm256_set1_ps(d * static_cast<float>(b.scales[8 * h + 2 * k + part]));
        for (size_t j = 0; j < 16; j += 8) {
          int64_t bits;
          std::memcpy(&bits, qs + 16 * part + j, sizeof bits);
          const __m256 v = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_cvtsi64_si128(bits)));
          _mm256_storeu_ps(y + 16 * part + j, _mm256_mul_ps(dl, v));
        }
      }
    }
  }
#else
  // Per 16-weight run the scale is fixed, so each inner loop is a plain vectorizable map.
  for (size_t h = 0; h < 2; ++h) {
    const uint8_t* ql = b.ql + 64 * h;
    const uint8_t* qh = b.qh + 32 * h;
    for (size_t k = 0; k < 4; ++k) {
      const uint8_t* lo = ql + 32 * (k % 2);
      const unsigned lo_shift = k < 2 ? 0u : 4u;
      const unsigned hi_shift = static_cast<unsigned>(2 * k);
      for (size_t part = 0; part < 2; ++part) {
        const float dl = d * static_cast<float>(b.scales[8 * h + 2 * k + part]);
        float* y = out + 128 * h + 32 * k + 16 * part;
        for (size_t l = 16 * part; l < 16 * part + 16; ++l) {
          const int q = (((lo[l] >> lo_shift) & 0x0F) | (((qh[l] >> hi_shift) & 3) << 4)) - 32;
          y[l - 16 * part] = dl * static_cast<float>(q);
        }
      }
    }
  }
#endif
}

}  // namespace snapkv::SNAPKV_ISA
