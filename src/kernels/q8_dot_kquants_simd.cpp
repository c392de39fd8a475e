// Integer dot products of K-quant weight rows (Q4_K, Q5_K, Q6_K) with Q8_K activations
// (q8_dot.h), compiled once per ISA level (q8_dot_simd.h): a scalar reference per weight type
// (the scalar level's copy is the one tests call) and one AVX2 kernel (maddubs/madd) or NEON
// kernel (sdot at neon_dot) that computes the same integers and then runs the same float
// operations.
//
// Integer ranges (why nothing overflows or saturates): activation codes are in [-127, 127];
//  - Q4_K / Q5_K: unsigned 4/5-bit codes, pairs <= 2 * 31 * 127 = 7874; times a 6-bit scale in
//    madd: |lane| <= 2 * 7874 * 63; the super-block sum <= 256 * 31 * 127 * 63 < 2^31.
//  - Q6_K: codes 0..63 (the -32 offset is applied through the activation block sums), pairs <=
//    16002; times an int8 scale: |super-block sum| <= 256 * 63 * 127 * 128 + 32 * 128 * 256 * 127
//    < 2^31.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/q8_dot_simd.h"

namespace snapkv::SNAPKV_ISA {

using ops_internal::BlockQ8_K;

namespace {

// Q4_K / Q5_K: 6-bit scales sc[8] and mins m[8] from the 12 packed bytes (quant_blocks.h).
void unpack_k4(const uint8_t* q, int sc[8], int m[8]) {
  for (size_t s = 0; s < 4; ++s) {
    sc[s] = q[s] & 63;
    m[s] = q[s + 4] & 63;
  }
  for (size_t s = 4; s < 8; ++s) {
    sc[s] = (q[s + 4] & 0x0F) | ((q[s - 4] >> 6) << 4);
    m[s] = (q[s + 4] >> 4) | ((q[s] >> 6) << 4);
  }
}

// sum_s m[s] * (sum of the 32 activation codes of sub-block s)
int32_t mins_dot(const int m[8], const BlockQ8_K& a) {
  int32_t summ = 0;
  for (size_t s = 0; s < 8; ++s) summ += m[s] * (a.bsums[2 * s] + a.bsums[2 * s + 1]);
  return summ;
}

// The float part of the asymmetric K-quants, shared by reference and fast kernels.
float accumulate_min(float sum, fp16_t dw, fp16_t dminw, float da, int32_t sumi, int32_t summ) {
  const float d = half(dw) * da;
  const float dmin = half(dminw) * da;
  sum = std::fma(d, static_cast<float>(sumi), sum);
  return std::fma(-dmin, static_cast<float>(summ), sum);
}

int q4_K_code(const BlockQ4_K& b, size_t e) {  // sub-block e / 32, value 0..15
  const size_t g = e / 64, k = (e % 64) / 32, l = e % 32;
  const uint8_t byte = b.qs[32 * g + l];
  return k == 0 ? (byte & 0x0F) : (byte >> 4);
}

int q5_K_code(const BlockQ5_K& b, size_t e) {  // sub-block e / 32, value 0..31
  const size_t g = e / 64, k = (e % 64) / 32, l = e % 32;
  const uint8_t byte = b.qs[32 * g + l];
  const int low = k == 0 ? (byte & 0x0F) : (byte >> 4);
  return low | (((b.qh[l] >> (2 * g + k)) & 1) << 4);
}

int q6_K_code(const BlockQ6_K& b, size_t e) {  // sub-block e / 16, value -32..31
  const size_t h = e / 128, k = (e % 128) / 32, l = e % 32;
  const uint8_t low_byte = b.ql[64 * h + 32 * (k % 2) + l];
  const int low = k < 2 ? (low_byte & 0x0F) : (low_byte >> 4);
  const int high = (b.qh[32 * h + l] >> (2 * k)) & 3;
  return (low | (high << 4)) - 32;
}

// sum_s sc[s] * sum_{e in sub-block s} code(e) * a.qs[e], sub-blocks of 32 (Q4_K, Q5_K).
template <class Block>
int32_t scaled_sum_ref(const Block& w, const BlockQ8_K& a, const int sc[8],
                       int (*code_of)(const Block&, size_t)) {
  int32_t sumi = 0;
  for (size_t s = 0; s < 8; ++s) {
    int32_t dot = 0;
    for (size_t e = 32 * s; e < 32 * s + 32; ++e) dot += code_of(w, e) * a.qs[e];
    sumi += sc[s] * dot;
  }
  return sumi;
}

#if SNAPKV_Q8_AVX2
int32_t hsum_i32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
  return _mm_cvtsi128_si32(s);
}

// unpack_k4's 8 scales and 8 mins of a Q4_K / Q5_K super-block, one byte each (s in byte s), from
// three 32-bit words of the 12 packed bytes: bytes 0..3 hold the low 6 bits of sc[0..3], bytes
// 4..7 those of m[0..3]; bytes 8..11 the low nibbles of sc[4..7] and m[4..7], whose top 2 bits are
// bits 6..7 of bytes 0..3 (sc) and 4..7 (m).
struct K4Scales {
  uint64_t sc, m;
};
K4Scales unpack_k4_words(const uint8_t* q) {
  uint32_t w0, w1, w2;
  std::memcpy(&w0, q, 4);
  std::memcpy(&w1, q + 4, 4);
  std::memcpy(&w2, q + 8, 4);
  const uint32_t sc_hi = (w2 & 0x0F0F0F0Fu) | (((w0 >> 6) & 0x03030303u) << 4);
  const uint32_t m_hi = ((w2 >> 4) & 0x0F0F0F0Fu) | (((w1 >> 6) & 0x03030303u) << 4);
  return {(w0 & 0x3F3F3F3Fu) | (uint64_t{sc_hi} << 32),
          (w1 & 0x3F3F3F3Fu) | (uint64_t{m_hi} << 32)};
}

// mins_dot with the mins packed as K4Scales::m: sum_s m[s] * (bsums[2s] + bsums[2s + 1]) as one
// madd of the 16 block sums (|bsum| <= 16 * 127) with each min repeated twice.
int32_t mins_dot_packed(uint64_t m, const BlockQ8_K& a) {
  const __m128i m16 = _mm_cvtepu8_epi16(_mm_cvtsi64_si128(static_cast<long long>(m)));
  const __m256i pairs =
      _mm256_set_m128i(_mm_unpackhi_epi16(m16, m16), _mm_unpacklo_epi16(m16, m16));
  return hsum_i32(_mm256_madd_epi16(load256(a.bsums), pairs));
}

// Scale byte s of a K4Scales word, broadcast to 16 int16 lanes.
__m256i scale_at(uint64_t sc, size_t s) {
  return _mm256_set1_epi16(static_cast<int16_t>((sc >> (8 * s)) & 0xFF));
}
#endif

#if SNAPKV_Q8_NEON
// sum_s sc[s] * (codes . activations of sub-block s) for the 8 sub-blocks of 32 of a Q4_K / Q5_K
// super-block; codes(g, k, j) gives the 16 codes j of sub-block 2g + k (values 0..31, as int8).
// Every partial sum is a part of the reference's exact integer sum (bounds above).
template <class Codes>
int32_t scaled_sum_neon(const BlockQ8_K& a, const int sc[8], Codes codes) {
  const int32x4_t zero = vdupq_n_s32(0);
  int32x4_t acc = zero;
  for (size_t g = 0; g < 4; ++g) {
    for (size_t k = 0; k < 2; ++k) {
      const int8_t* act = a.qs + 64 * g + 32 * k;
      int32x4_t d = dot4_i8(zero, codes(g, k, 0), vld1q_s8(act));
      d = dot4_i8(d, codes(g, k, 1), vld1q_s8(act + 16));
      acc = vmlaq_n_s32(acc, d, sc[2 * g + k]);
    }
  }
  return vaddvq_s32(acc);
}
#endif

}  // namespace

// ---- Q4_K ------------------------------------------------------------------------------------

float dot_q4_K_q8_K_ref(const BlockQ4_K* w, const BlockQ8_K* a, size_t n) {
  float sum = 0.0f;
  for (size_t b = 0; b < n / kQK_K; ++b) {
    int sc[8], m[8];
    unpack_k4(w[b].scales, sc, m);
    const int32_t sumi = scaled_sum_ref(w[b], a[b], sc, q4_K_code);
    sum = accumulate_min(sum, w[b].d, w[b].dmin, a[b].d, sumi, mins_dot(m, a[b]));
  }
  return sum;
}

float dot_q4_K_q8_K(const BlockQ4_K* w, const BlockQ8_K* a, size_t n) {
#if SNAPKV_Q8_NEON
  float sum = 0.0f;
  for (size_t b = 0; b < n / kQK_K; ++b) {
    int sc[8], m[8];
    unpack_k4(w[b].scales, sc, m);
    const uint8_t* qs = w[b].qs;
    const int32_t sumi = scaled_sum_neon(a[b], sc, [qs](size_t g, size_t k, size_t j) {
      const uint8x16_t bytes = vld1q_u8(qs + 32 * g + 16 * j);
      return vreinterpretq_s8_u8(k == 0 ? vandq_u8(bytes, vdupq_n_u8(0x0F)) : vshrq_n_u8(bytes, 4));
    });
    sum = accumulate_min(sum, w[b].d, w[b].dmin, a[b].d, sumi, mins_dot(m, a[b]));
  }
  return sum;
#elif SNAPKV_Q8_AVX2
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  float sum = 0.0f;
  for (size_t b = 0; b < n / kQK_K; ++b) {
    const K4Scales k4 = unpack_k4_words(w[b].scales);
    __m256i acc = _mm256_setzero_si256();
    for (size_t g = 0; g < 4; ++g) {
      const __m256i bytes = load256(w[b].qs + 32 * g);
      const __m256i lo = _mm256_and_si256(bytes, low4);
      const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(bytes, 4), low4);
      const __m256i p0 = _mm256_maddubs_epi16(lo, load256(a[b].qs + 64 * g));
      const __m256i p1 = _mm256_maddubs_epi16(hi, load256(a[b].qs + 64 * g + 32));
      acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p0, scale_at(k4.sc, 2 * g)));
      acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p1, scale_at(k4.sc, 2 * g + 1)));
    }
    sum =
        accumulate_min(sum, w[b].d, w[b].dmin, a[b].d, hsum_i32(acc), mins_dot_packed(k4.m, a[b]));
  }
  return sum;
#else
  return SNAPKV_ISA::dot_q4_K_q8_K_ref(w, a, n);
#endif
}

// ---- Q5_K ------------------------------------------------------------------------------------

float dot_q5_K_q8_K_ref(const BlockQ5_K* w, const BlockQ8_K* a, size_t n) {
  float sum = 0.0f;
  for (size_t b = 0; b < n / kQK_K; ++b) {
    int sc[8], m[8];
    unpack_k4(w[b].scales, sc, m);
    const int32_t sumi = scaled_sum_ref(w[b], a[b], sc, q5_K_code);
    sum = accumulate_min(sum, w[b].d, w[b].dmin, a[b].d, sumi, mins_dot(m, a[b]));
  }
  return sum;
}

float dot_q5_K_q8_K(const BlockQ5_K* w, const BlockQ8_K* a, size_t n) {
#if SNAPKV_Q8_NEON
  float sum = 0.0f;
  for (size_t b = 0; b < n / kQK_K; ++b) {
    int sc[8], m[8];
    unpack_k4(w[b].scales, sc, m);
    const uint8_t* qs = w[b].qs;
    const uint8x16_t qh[2] = {vld1q_u8(w[b].qh), vld1q_u8(w[b].qh + 16)};
    const int32_t sumi = scaled_sum_neon(a[b], sc, [qs, &qh](size_t g, size_t k, size_t j) {
      const uint8x16_t bytes = vld1q_u8(qs + 32 * g + 16 * j);
      const uint8x16_t low = k == 0 ? vandq_u8(bytes, vdupq_n_u8(0x0F)) : vshrq_n_u8(bytes, 4);
      // bit 2g + k of qh[l], moved to bit 4
      const uint8x16_t bit = vtstq_u8(qh[j], vdupq_n_u8(static_cast<uint8_t>(1u << (2 * g + k))));
      return vreinterpretq_s8_u8(vorrq_u8(low, vandq_u8(bit, vdupq_n_u8(16))));
    });
    sum = accumulate_min(sum, w[b].d, w[b].dmin, a[b].d, sumi, mins_dot(m, a[b]));
  }
  return sum;
#elif SNAPKV_Q8_AVX2
  const __m256i low4 = _mm256_set1_epi8(0x0F), one = _mm256_set1_epi8(1);
  float sum = 0.0f;
  for (size_t b = 0; b < n / kQK_K; ++b) {
    const K4Scales k4 = unpack_k4_words(w[b].scales);
    const __m256i qh = load256(w[b].qh);
    __m256i acc = _mm256_setzero_si256();
    for (size_t g = 0; g < 4; ++g) {
      const __m256i bytes = load256(w[b].qs + 32 * g);
      // bit 2g (low nibbles) and 2g + 1 (high nibbles) of qh, moved to bit 4 of each byte
      const __m256i h0 = _mm256_and_si256(_mm256_srli_epi16(qh, static_cast<int>(2 * g)), one);
      const __m256i h1 = _mm256_and_si256(_mm256_srli_epi16(qh, static_cast<int>(2 * g + 1)), one);
      const __m256i lo = _mm256_or_si256(_mm256_and_si256(bytes, low4), _mm256_slli_epi16(h0, 4));
      const __m256i hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(bytes, 4), low4),
                                         _mm256_slli_epi16(h1, 4));
      const __m256i p0 = _mm256_maddubs_epi16(lo, load256(a[b].qs + 64 * g));
      const __m256i p1 = _mm256_maddubs_epi16(hi, load256(a[b].qs + 64 * g + 32));
      acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p0, scale_at(k4.sc, 2 * g)));
      acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p1, scale_at(k4.sc, 2 * g + 1)));
    }
    sum =
        accumulate_min(sum, w[b].d, w[b].dmin, a[b].d, hsum_i32(acc), mins_dot_packed(k4.m, a[b]));
  }
  return sum;
#else
  return SNAPKV_ISA::dot_q5_K_q8_K_ref(w, a, n);
#endif
}

// ---- Q6_K ------------------------------------------------------------------------------------

float dot_q6_K_q8_K_ref(const BlockQ6_K* w, const BlockQ8_K* a, size_t n) {
  float sum = 0.0f;
  for (size_t b = 0; b < n / kQK_K; ++b) {
    int32_t sumi = 0;
    for (size_t s = 0; s < 16; ++s) {
      int32_t dot = 0;
      for (size_t e = 16 * s; e < 16 * s + 16; ++e) dot += q6_K_code(w[b], e) * a[b].qs[e];
      sumi += w[b].scales[s] * dot;
    }
    sum = std::fma(half(w[b].d) * a[b].d, static_cast<float>(sumi), sum);
  }
  return sum;
}

#if SNAPKV_Q8_AVX2
// Byte shuffles that broadcast int16 lane 2k of a 128-bit lane to the low 128 bits and lane 2k + 1
// to the high 128 bits.
#define SNAPKV_Q6_PICK(k)                                                                         \
  _mm256_setr_epi8(4 * k, 4 * k + 1, 4 * k, 4 * k + 1, 4 * k, 4 * k + 1, 4 * k, 4 * k + 1, 4 * k, \
                   4 * k + 1, 4 * k, 4 * k + 1, 4 * k, 4 * k + 1, 4 * k, 4 * k + 1, 4 * k + 2,    \
                   4 * k + 3, 4 * k + 2, 4 * k + 3, 4 * k + 2, 4 * k + 3, 4 * k + 2, 4 * k + 3,   \
                   4 * k + 2, 4 * k + 3, 4 * k + 2, 4 * k + 3, 4 * k + 2, 4 * k + 3, 4 * k + 2,   \
                   4 * k + 3)
#endif

float dot_q6_K_q8_K(const BlockQ6_K* w, const BlockQ8_K* a, size_t n) {
#if SNAPKV_Q8_NEON
  // signed codes (low | high << 4) - 32 in -32..31 straight into sdot; sub-blocks of 16
  const int32x4_t zero = vdupq_n_s32(0);
  float sum = 0.0f;
  for (size_t b = 0; b < n / kQK_K; ++b) {
    int32x4_t acc = zero;
    for (size_t h = 0; h < 2; ++h) {
      for (size_t k = 0; k < 4; ++k) {
        for (size_t j = 0; j < 2; ++j) {
          const uint8x16_t ql = vld1q_u8(w[b].ql + 64 * h + 32 * (k % 2) + 16 * j);
          const uint8x16_t low = k < 2 ? vandq_u8(ql, vdupq_n_u8(0x0F)) : vshrq_n_u8(ql, 4);
          const uint8x16_t qh = vld1q_u8(w[b].qh + 32 * h + 16 * j);
          const uint8x16_t high =
              vandq_u8(vshlq_u8(qh, vdupq_n_s8(static_cast<int8_t>(-2 * static_cast<int>(k)))),
                       vdupq_n_u8(3));
          const int8x16_t q =
              vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(low, vshlq_n_u8(high, 4))), vdupq_n_s8(32));
          const int32x4_t d = dot4_i8(zero, q, vld1q_s8(a[b].qs + 128 * h + 32 * k + 16 * j));
          acc = vmlaq_n_s32(acc, d, w[b].scales[8 * h + 2 * k + j]);
        }
      }
    }
    const int32_t sumi = vaddvq_s32(acc);
    sum = std::fma(half(w[b].d) * a[b].d, static_cast<float>(sumi), sum);
  }
  return sum;
#elif SNAPKV_Q8_AVX2
  const __m256i kQ6ScalePick[4] = {SNAPKV_Q6_PICK(0), SNAPKV_Q6_PICK(1), SNAPKV_Q6_PICK(2),
                                   SNAPKV_Q6_PICK(3)};
  const __m256i low4 = _mm256_set1_epi8(0x0F), low2 = _mm256_set1_epi8(0x03);
  float sum = 0.0f;
  for (size_t b = 0; b < n / kQK_K; ++b) {
    // the 16 scales as int16; per half h, its 8 scales in both 128-bit lanes
    const __m256i sc16 =
        _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w[b].scales)));
    __m256i acc = _mm256_setzero_si256();
    for (size_t h = 0; h < 2; ++h) {
      const __m256i sc_h = h == 0 ? _mm256_permute2x128_si256(sc16, sc16, 0x00)
                                  : _mm256_permute2x128_si256(sc16, sc16, 0x11);
      const __m256i qh = load256(w[b].qh + 32 * h);
      const __m256i ql0 = load256(w[b].ql + 64 * h);
      const __m256i ql1 = load256(w[b].ql + 64 * h + 32);
      for (size_t k = 0; k < 4; ++k) {
        const __m256i ql = k % 2 == 0 ? ql0 : ql1;
        const __m256i lo = _mm256_and_si256(k < 2 ? ql : _mm256_srli_epi16(ql, 4), low4);
        const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(qh, static_cast<int>(2 * k)), low2);
        const __m256i q = _mm256_or_si256(lo, _mm256_slli_epi16(hi, 4));  // 0..63
        const __m256i p = _mm256_maddubs_epi16(q, load256(a[b].qs + 128 * h + 32 * k));
        // elements 0..15 of the 32 take scale 8h + 2k (low lane), 16..31 scale 8h + 2k + 1
        const __m256i scale = _mm256_shuffle_epi8(sc_h, kQ6ScalePick[k]);
        acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p, scale));
      }
    }
    // the -32 of every code: 32 * sum_s sc[s] * bsums[s] (|sc * bsum| <= 128 * 16 * 127)
    const int32_t offset = hsum_i32(_mm256_madd_epi16(sc16, load256(a[b].bsums)));
    const int32_t sumi = hsum_i32(acc) - 32 * offset;
    sum = std::fma(half(w[b].d) * a[b].d, static_cast<float>(sumi), sum);
  }
  return sum;
#else
  return SNAPKV_ISA::dot_q6_K_q8_K_ref(w, a, n);
#endif
}

// ---- Rows x tokens of the K-quants: the pair dots above in a loop ---------------------------

namespace {

constexpr size_t kPairTokens = 16;  // token rows that one weight row (in L1) meets in turn

template <class Block, class Dot>
void gemm_pairs(float* out, size_t ldo, const Block* w, size_t n_rows, const BlockQ8_K* a,
                size_t n_tokens, size_t n, Dot dot) {
  const size_t nb = n / kQK_K;
  for (size_t t0 = 0; t0 < n_tokens; t0 += kPairTokens) {
    const size_t t1 = std::min(n_tokens, t0 + kPairTokens);
    for (size_t r = 0; r < n_rows; ++r) {
      for (size_t t = t0; t < t1; ++t) out[t * ldo + r] = dot(w + r * nb, a + t * nb, n);
    }
  }
}

}  // namespace

void gemm_q4_K_q8_K(float* out, size_t ldo, const BlockQ4_K* w, size_t n_rows, const BlockQ8_K* a,
                    size_t n_tokens, size_t n) {
  gemm_pairs(out, ldo, w, n_rows, a, n_tokens, n,
             [](const BlockQ4_K* x, const BlockQ8_K* y, size_t m) {
               return SNAPKV_ISA::dot_q4_K_q8_K(x, y, m);
             });
}
void gemm_q5_K_q8_K(float* out, size_t ldo, const BlockQ5_K* w, size_t n_rows, const BlockQ8_K* a,
                    size_t n_tokens, size_t n) {
  gemm_pairs(out, ldo, w, n_rows, a, n_tokens, n,
             [](const BlockQ5_K* x, const BlockQ8_K* y, size_t m) {
               return SNAPKV_ISA::dot_q5_K_q8_K(x, y, m);
             });
}
void gemm_q6_K_q8_K(float* out, size_t ldo, const BlockQ6_K* w, size_t n_rows, const BlockQ8_K* a,
                    size_t n_tokens, size_t n) {
  gemm_pairs(out, ldo, w, n_rows, a, n_tokens, n,
             [](const BlockQ6_K* x, const BlockQ8_K* y, size_t m) {
               return SNAPKV_ISA::dot_q6_K_q8_K(x, y, m);
             });
}
}  // namespace snapkv::SNAPKV_ISA
