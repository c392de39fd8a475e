// Integer dot products of Q8_0 and Q4_0 weight rows with Q8_0 activations (q8_dot.h), compiled
// once per ISA level (q8_dot_simd.h): a scalar reference (the scalar level's copy is the one tests
// call), the one-row fast dot and the multi-row kernel (AVX2 maddubs/madd, or AVX-512 VNNI
// dpbusd), which compute the same integers and then run the same float operations. The K-quant
// weights are in q8_dot_kquants_simd.cpp, the activation quantizer in q8_act_simd.cpp
// (docs/KERNELS.md).
//
// Integer range (why nothing overflows or saturates): activation codes are in [-127, 127];
// maddubs(|w|, a * sign(w)) pairs <= 2 * 128 * 127 = 32512 < 2^15; the other bounds are at the
// multi-row kernel.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/q8_dot_simd.h"

// Full unrolling of the loops over a tile's rows and tokens, early enough that the arrays of
// vectors become registers (GCC otherwise keeps them on the stack).
#define SNAPKV_UNROLL _Pragma("GCC unroll 8")

namespace snapkv::SNAPKV_ISA {
namespace {

// Codes of 32-element blocks, element e < 32.
int code(const BlockQ8_0& b, size_t e) {
  return b.qs[e];
}
int code(const BlockQ4_0& b, size_t e) {
  const uint8_t byte = b.qs[e % 16];
  return (e < 16 ? (byte & 0x0F) : (byte >> 4)) - 8;
}

// The reference shared by Q8_0 and Q4_0 weights: per block the exact integer dot of the 32 codes,
// then one fma into a single running sum, block after block.
template <class Block>
float blocks_dot_ref(const Block* w, const BlockQ8_0* a, size_t n) {
  float sum = 0.0f;
  for (size_t b = 0; b < n / kQ8BlockSize; ++b) {
    int32_t s = 0;
    for (size_t k = 0; k < kQ8BlockSize; ++k) s += code(w[b], k) * a[b].qs[k];
    const float d = half(w[b].d) * half(a[b].d);
    sum = std::fma(d, static_cast<float>(s), sum);
  }
  return sum;
}

template <class Block>
void gemm_blocks_ref(float* out, size_t ldo, const Block* w, size_t n_rows, const BlockQ8_0* a,
                     size_t n_tokens, size_t n) {
  const size_t nb = n / kQ8BlockSize;
  for (size_t t = 0; t < n_tokens; ++t) {
    for (size_t r = 0; r < n_rows; ++r) {
      out[t * ldo + r] = blocks_dot_ref(w + r * nb, a + t * nb, n);
    }
  }
}

#if SNAPKV_Q8_AVX2
// 8 int32 lanes, lane l = sum_{k < 4} u[4l + k] * s[4l + k] (u unsigned, s signed bytes).
__m256i mul_sum_us8(__m256i u, __m256i s) {
#if SNAPKV_Q8_VNNI
  return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s);
#else
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
#endif
}

// The same for two signed operands: |x| times y with x's sign moved onto y.
__m256i mul_sum_i8(__m256i x, __m256i y) {
  return mul_sum_us8(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
}

int32_t hsum_i32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
  return _mm_cvtsi128_si32(s);
}

// 32 Q4_0 nibbles (0..15, the code plus 8) in element order: low nibbles then high nibbles.
__m256i q4_0_nibbles(const BlockQ4_0& b) {
  const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.qs));
  const __m256i both = _mm256_set_m128i(_mm_srli_epi16(bytes, 4), bytes);
  return _mm256_and_si256(both, _mm256_set1_epi8(0x0F));
}

__m256i codes(const BlockQ8_0& b) {
  return load256(b.qs);
}
__m256i codes(const BlockQ4_0& b) {
  return _mm256_sub_epi8(q4_0_nibbles(b), _mm256_set1_epi8(8));
}

// The weight codes plus an offset, as unsigned bytes: Q8_0 w + 128 (the sign bit flipped),
// Q4_0 w + 8 (the nibbles as stored).
constexpr int32_t code_offset(const BlockQ8_0*) {
  return 128;
}
constexpr int32_t code_offset(const BlockQ4_0*) {
  return 8;
}
[[maybe_unused]] __m256i offset_codes(const BlockQ8_0& b) {
  return _mm256_xor_si256(load256(b.qs), _mm256_set1_epi8(static_cast<char>(0x80)));
}
__m256i offset_codes(const BlockQ4_0& b) {
  return q4_0_nibbles(b);
}

// The multi-row kernel reads the weight codes as unsigned bytes (offset_codes) except on AVX2
// without VNNI for Q8_0, where w + 128 times an activation code would saturate maddubs' int16
// pairs: there it keeps the signed codes and moves their signs onto the activations.
template <class Block>
constexpr bool kSignedCodes = false;
#if !SNAPKV_Q8_VNNI
template <>
constexpr bool kSignedCodes<BlockQ8_0> = true;
#endif

// v[r] = the 8 dwords of row r -> v[k] lane r = dword k of row r (an 8 x 8 transpose).
[[gnu::always_inline]] inline void transpose8x8(__m256i v[8]) {
  __m256i t[8], u[8];
  SNAPKV_UNROLL for (size_t i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_epi32(v[2 * i], v[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_epi32(v[2 * i], v[2 * i + 1]);
  }
  SNAPKV_UNROLL for (size_t h = 0; h < 2;
                     ++h) {  // rows 0..3, then rows 4..7: dwords k | k + 4 per 128 bits
    u[4 * h + 0] = _mm256_unpacklo_epi64(t[4 * h], t[4 * h + 2]);
    u[4 * h + 1] = _mm256_unpackhi_epi64(t[4 * h], t[4 * h + 2]);
    u[4 * h + 2] = _mm256_unpacklo_epi64(t[4 * h + 1], t[4 * h + 3]);
    u[4 * h + 3] = _mm256_unpackhi_epi64(t[4 * h + 1], t[4 * h + 3]);
  }
  SNAPKV_UNROLL for (size_t k = 0; k < 4; ++k) {
    v[k] = _mm256_permute2x128_si256(u[k], u[4 + k], 0x20);
    v[k + 4] = _mm256_permute2x128_si256(u[k], u[4 + k], 0x31);
  }
}
#endif

#if SNAPKV_Q8_NEON
// The 32 codes of a block as two vectors of 16 (elements 0..15, 16..31).
int8x16x2_t codes_neon(const BlockQ8_0& b) {
  return {{vld1q_s8(b.qs), vld1q_s8(b.qs + 16)}};
}
int8x16x2_t codes_neon(const BlockQ4_0& b) {
  const uint8x16_t bytes = vld1q_u8(b.qs);
  const int8x16_t eight = vdupq_n_s8(8);
  return {{vsubq_s8(vreinterpretq_s8_u8(vandq_u8(bytes, vdupq_n_u8(0x0F))), eight),
           vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(bytes, 4)), eight)}};
}
#endif

template <class Block>
float blocks_dot(const Block* w, const BlockQ8_0* a, size_t n) {
#if SNAPKV_Q8_NEON
  float sum = 0.0f;
  const int32x4_t zero = vdupq_n_s32(0);
  for (size_t b = 0; b < n / kQ8BlockSize; ++b) {
    const int8x16x2_t wc = codes_neon(w[b]);
    const int32x4_t s =
        dot4_i8(dot4_i8(zero, wc.val[0], vld1q_s8(a[b].qs)), wc.val[1], vld1q_s8(a[b].qs + 16));
    sum = std::fma(half(w[b].d) * half(a[b].d), static_cast<float>(vaddvq_s32(s)), sum);
  }
  return sum;
#elif SNAPKV_Q8_AVX2
  float sum = 0.0f;
  for (size_t b = 0; b < n / kQ8BlockSize; ++b) {
    const int32_t s = hsum_i32(mul_sum_i8(codes(w[b]), load256(a[b].qs)));
    sum = std::fma(half(w[b].d) * half(a[b].d), static_cast<float>(s), sum);
  }
  return sum;
#else
  return blocks_dot_ref(w, a, n);
#endif
}

#if SNAPKV_Q8_AVX2
// ---- Several weight rows x several activation rows (decode batches, prefill) ----------------
//
// Every (row, token) output gets exactly the float operations of blocks_dot: one running sum,
// fma(dw * da, s, sum) per block. The integer sums s of a group of G weight rows (16 in 512-bit
// vectors at the VNNI level, 8 in 256-bit vectors) come out in the lanes of one vector, so the
// scale product, the conversion and the fma are one vector operation per G pairs and no lane sums
// are needed:
//   per block, the G rows' 32-byte codes are transposed (lane r of vector k = bytes 4k..4k+3 of
//   row r), once for all the tokens of the tile; per token, activation bytes 4k..4k+3 are
//   broadcast to every lane and dpbusd (VNNI) adds their products with vector k's unsigned codes
//   (w + offset). Each lane starts from corr = -offset * (sum of the activation block's codes),
//   computed once per token and block, so the lane ends at sum w * a exactly (|lane| <= 32 * 255
//   * 128 < 2^31). AVX2 without VNNI: Q4_0 the same through maddubs (the nibbles times a code:
//   8 vectors of int16 pairs add up to at most 8 * 2 * 15 * 128 = 30720, then one madd); Q8_0
//   maddubs(|w|, a * sign(w)) and a madd per vector.

#if SNAPKV_Q8_VNNI
// 16 rows in the lanes of a 512-bit vector; 8 sums + 8 weight vectors of the 32 registers
constexpr size_t kTileRows = 16, kTileTokens = 8;
#else
constexpr size_t kTileRows = 8, kTileTokens = 4;  // of 16 ymm registers
#endif
constexpr size_t kTokenChunk = 64;  // activation rows that stay in L2 while a row group sweeps them
// A single token (decode of one stream) takes groups of 8 rows at the VNNI level too: half the
// row streams in flight, for the same bytes read.
constexpr bool kSingleTokenRows8 = true;

// Per token and block, computed once per call: corr (see above) and the activation scale. And
// the next row group's bytes, prefetched front to back while this group runs (the G rows are G
// streams read side by side, which the hardware prefetchers alone leave waiting on DRAM; the
// prefetch reads the next group as one sequential stream).
struct ActPrep {
  const int32_t* corr;
  const float* da;
  const char* prefetch = nullptr;
  size_t prefetch_bytes = 0;
};

int32_t broadcast_word(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// out [RN][ldo]: out[t * ldo + r] = blocks_dot(rows[r], a + t * nb, 32 * nb) for r < rm,
// t < RN (rows[r] for r >= rm repeat a live row; their lanes are not stored).
#if SNAPKV_Q8_VNNI
// GCC 12 warns (-Wmaybe-uninitialized) inside its own 512-bit intrinsics, whose pass-through
// operand is a deliberately undefined vector.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
// v[i] = rows lo(i) | hi(i) in its 256-bit halves (lo, hi: i, i + 4 for i < 4; i + 4, i + 8
// beyond) -> v[k] lane r = dword k of row r, r < 16 (two 8 x 8 transposes side by side; that
// assignment of rows to halves puts the lanes in row order).
[[gnu::always_inline]] inline void transpose16x8(__m512i v[8]) {
  __m512i t[8], u[8];
  SNAPKV_UNROLL for (size_t i = 0; i < 4; ++i) {
    t[2 * i] = _mm512_unpacklo_epi32(v[2 * i], v[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(v[2 * i], v[2 * i + 1]);
  }
  SNAPKV_UNROLL for (size_t h = 0; h < 2; ++h) {
    u[4 * h + 0] = _mm512_unpacklo_epi64(t[4 * h], t[4 * h + 2]);
    u[4 * h + 1] = _mm512_unpackhi_epi64(t[4 * h], t[4 * h + 2]);
    u[4 * h + 2] = _mm512_unpacklo_epi64(t[4 * h + 1], t[4 * h + 3]);
    u[4 * h + 3] = _mm512_unpackhi_epi64(t[4 * h + 1], t[4 * h + 3]);
  }
  SNAPKV_UNROLL for (size_t k = 0; k < 4; ++k) {
    v[k] = _mm512_shuffle_i64x2(u[k], u[4 + k], 0x88);
    v[k + 4] = _mm512_shuffle_i64x2(u[k], u[4 + k], 0xDD);
  }
}

template <size_t RN, class Block>
void tile_rows(float* out, size_t ldo, const Block* const* rows, size_t rm, const BlockQ8_0* a,
               const ActPrep& prep, size_t nb) {
  __m512 sum[RN];
  SNAPKV_UNROLL for (size_t t = 0; t < RN; ++t) sum[t] = _mm512_setzero_ps();
  constexpr size_t kStep = kTileRows * sizeof(Block);  // the group's bytes per block
  for (size_t b = 0; b < nb; ++b) {
    if (b * kStep < prep.prefetch_bytes) {
      SNAPKV_UNROLL for (size_t i = 0; i < (kStep + 63) / 64; ++i) {
        _mm_prefetch(prep.prefetch + b * kStep + 64 * i, _MM_HINT_T0);
      }
    }
    __m512i wt[8];
    SNAPKV_UNROLL for (size_t i = 0; i < 8; ++i) {
      const size_t lo = i < 4 ? i : i + 4, hi = i < 4 ? i + 4 : i + 8;
      wt[i] = _mm512_inserti64x4(_mm512_castsi256_si512(offset_codes(rows[lo][b])),
                                 offset_codes(rows[hi][b]), 1);
    }
    alignas(32) fp16_t dh[kTileRows];
    SNAPKV_UNROLL for (size_t r = 0; r < kTileRows; ++r) dh[r] = rows[r][b].d;
    const __m512 dw = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(dh)));
    transpose16x8(wt);
    SNAPKV_UNROLL for (size_t t = 0; t < RN; ++t) {
      const int8_t* aq = a[t * nb + b].qs;
      __m512i acc0 = _mm512_set1_epi32(prep.corr[t * nb + b]), acc1 = _mm512_setzero_si512();
      SNAPKV_UNROLL for (size_t k = 0; k < 8; k += 2) {
        acc0 = _mm512_dpbusd_epi32(acc0, wt[k], _mm512_set1_epi32(broadcast_word(aq + 4 * k)));
        acc1 =
            _mm512_dpbusd_epi32(acc1, wt[k + 1], _mm512_set1_epi32(broadcast_word(aq + 4 * k + 4)));
      }
      const __m512 d = _mm512_mul_ps(dw, _mm512_set1_ps(prep.da[t * nb + b]));
      sum[t] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(_mm512_add_epi32(acc0, acc1)), sum[t]);
    }
  }
  const __mmask16 live = static_cast<__mmask16>((1u << rm) - 1);
  SNAPKV_UNROLL for (size_t t = 0; t < RN; ++t) _mm512_mask_storeu_ps(out + t * ldo, live, sum[t]);
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif

// 8 rows x one token, without the transpose: per block each row's 32 codes meet the activation
// block in one vector of 8 int32 partial sums (mul_sum_i8), and a tree of horizontal adds turns the
// 8 rows' vectors into one vector whose lane r is row r's exact block sum (1.75 shuffles per row
// and block instead of the transpose's 3 plus the activation broadcasts); then the tile's vector
// scale product, conversion and fma, so each lane runs blocks_dot's float operations.
template <class Block>
void tile_one_token8(float* out, const Block* const* rows, size_t rm, const BlockQ8_0* a,
                     const ActPrep& prep, size_t nb) {
  __m256 sum = _mm256_setzero_ps();
  constexpr size_t kStep = 8 * sizeof(Block);  // the group's bytes per block
  for (size_t b = 0; b < nb; ++b) {
    if (b * kStep < prep.prefetch_bytes) {
      SNAPKV_UNROLL for (size_t i = 0; i < (kStep + 63) / 64; ++i) {
        _mm_prefetch(prep.prefetch + b * kStep + 64 * i, _MM_HINT_T0);
      }
    }
    const __m256i av = load256(a[b].qs);
    __m256i p[8];
#if SNAPKV_Q8_VNNI
    // the unsigned codes w + offset; the lanes' sum then starts from corr (see above)
    SNAPKV_UNROLL for (size_t r = 0; r < 8; ++r) {
      p[r] = _mm256_dpbusd_epi32(_mm256_setzero_si256(), offset_codes(rows[r][b]), av);
    }
#else
    SNAPKV_UNROLL for (size_t r = 0; r < 8; ++r) p[r] = mul_sum_i8(codes(rows[r][b]), av);
#endif
    // hadd(x, y) per 128 bits is x0+x1, x2+x3, y0+y1, y2+y3: two levels leave rows 0..3 (h0) and
    // 4..7 (h1) with the sums of their low 128 bits in the low half, of their high 128 bits in the
    // high half.
    const __m256i h0 =
        _mm256_hadd_epi32(_mm256_hadd_epi32(p[0], p[1]), _mm256_hadd_epi32(p[2], p[3]));
    const __m256i h1 =
        _mm256_hadd_epi32(_mm256_hadd_epi32(p[4], p[5]), _mm256_hadd_epi32(p[6], p[7]));
    __m256i s = _mm256_add_epi32(_mm256_permute2x128_si256(h0, h1, 0x20),
                                 _mm256_permute2x128_si256(h0, h1, 0x31));
#if SNAPKV_Q8_VNNI
    s = _mm256_add_epi32(s, _mm256_set1_epi32(prep.corr[b]));
#endif
    const __m256 dw = _mm256_cvtph_ps(
        _mm_setr_epi16(static_cast<int16_t>(rows[0][b].d), static_cast<int16_t>(rows[1][b].d),
                       static_cast<int16_t>(rows[2][b].d), static_cast<int16_t>(rows[3][b].d),
                       static_cast<int16_t>(rows[4][b].d), static_cast<int16_t>(rows[5][b].d),
                       static_cast<int16_t>(rows[6][b].d), static_cast<int16_t>(rows[7][b].d)));
    const __m256 d = _mm256_mul_ps(dw, _mm256_set1_ps(prep.da[b]));
    sum = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(s), sum);
  }
  if (rm == 8) {
    _mm256_storeu_ps(out, sum);
  } else {
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, sum);
    for (size_t r = 0; r < rm; ++r) out[r] = lanes[r];
  }
}

// 8 rows in the lanes of a 256-bit vector: the AVX2 level's tile, and the VNNI level's for a
// single token (fewer row streams in flight).
template <size_t RN, class Block>
void tile_rows8(float* out, size_t ldo, const Block* const* rows, size_t rm, const BlockQ8_0* a,
                const ActPrep& prep, size_t nb) {
  if constexpr (RN == 1) {
    tile_one_token8(out, rows, rm, a, prep, nb);
    return;
  }
  __m256 sum[RN];
  SNAPKV_UNROLL for (size_t t = 0; t < RN; ++t) sum[t] = _mm256_setzero_ps();
  const __m256i ones16 = _mm256_set1_epi16(1);
  (void)ones16;
  constexpr size_t kStep = 8 * sizeof(Block);  // the group's bytes per block
  for (size_t b = 0; b < nb; ++b) {
    if (b * kStep < prep.prefetch_bytes) {
      SNAPKV_UNROLL for (size_t i = 0; i < (kStep + 63) / 64; ++i) {
        _mm_prefetch(prep.prefetch + b * kStep + 64 * i, _MM_HINT_T0);
      }
    }
    __m256i wt[8];
    SNAPKV_UNROLL for (size_t r = 0; r < 8; ++r) {
      if constexpr (kSignedCodes<Block>) {
        wt[r] = codes(rows[r][b]);
      } else {
        wt[r] = offset_codes(rows[r][b]);
      }
    }
    const __m256 dw = _mm256_cvtph_ps(
        _mm_setr_epi16(static_cast<int16_t>(rows[0][b].d), static_cast<int16_t>(rows[1][b].d),
                       static_cast<int16_t>(rows[2][b].d), static_cast<int16_t>(rows[3][b].d),
                       static_cast<int16_t>(rows[4][b].d), static_cast<int16_t>(rows[5][b].d),
                       static_cast<int16_t>(rows[6][b].d), static_cast<int16_t>(rows[7][b].d)));
    transpose8x8(wt);
    SNAPKV_UNROLL for (size_t t = 0; t < RN; ++t) {
      const int8_t* aq = a[t * nb + b].qs;
      __m256i s;
#if SNAPKV_Q8_VNNI
      __m256i acc0 = _mm256_set1_epi32(prep.corr[t * nb + b]), acc1 = _mm256_setzero_si256();
      SNAPKV_UNROLL for (size_t k = 0; k < 8; k += 2) {
        acc0 = _mm256_dpbusd_epi32(acc0, wt[k], _mm256_set1_epi32(broadcast_word(aq + 4 * k)));
        acc1 =
            _mm256_dpbusd_epi32(acc1, wt[k + 1], _mm256_set1_epi32(broadcast_word(aq + 4 * k + 4)));
      }
      s = _mm256_add_epi32(acc0, acc1);
#else
      if constexpr (kSignedCodes<Block>) {
        __m256i acc0 = _mm256_setzero_si256(), acc1 = _mm256_setzero_si256();
        SNAPKV_UNROLL for (size_t k = 0; k < 8; k += 2) {
          const __m256i a0 = _mm256_set1_epi32(broadcast_word(aq + 4 * k));
          const __m256i a1 = _mm256_set1_epi32(broadcast_word(aq + 4 * k + 4));
          acc0 = _mm256_add_epi32(
              acc0, _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(wt[k], wt[k]),
                                                           _mm256_sign_epi8(a0, wt[k])),
                                      ones16));
          acc1 = _mm256_add_epi32(
              acc1, _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(wt[k + 1], wt[k + 1]),
                                                           _mm256_sign_epi8(a1, wt[k + 1])),
                                      ones16));
        }
        s = _mm256_add_epi32(acc0, acc1);
      } else {
        __m256i p = _mm256_maddubs_epi16(wt[0], _mm256_set1_epi32(broadcast_word(aq)));
        SNAPKV_UNROLL for (size_t k = 1; k < 8; ++k) {
          p = _mm256_add_epi16(
              p, _mm256_maddubs_epi16(wt[k], _mm256_set1_epi32(broadcast_word(aq + 4 * k))));
        }
        s = _mm256_add_epi32(_mm256_madd_epi16(p, ones16),
                             _mm256_set1_epi32(prep.corr[t * nb + b]));
      }
#endif
      const __m256 d = _mm256_mul_ps(dw, _mm256_set1_ps(prep.da[t * nb + b]));
      sum[t] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(s), sum[t]);
    }
  }
  SNAPKV_UNROLL for (size_t t = 0; t < RN; ++t) {
    if (rm == 8) {
      _mm256_storeu_ps(out + t * ldo, sum[t]);
    } else {
      alignas(32) float lanes[8];
      _mm256_store_ps(lanes, sum[t]);
      for (size_t r = 0; r < rm; ++r) out[t * ldo + r] = lanes[r];
    }
  }
}

// The tile for rn tokens (1..kTileTokens) of G rows (8, or 16 at the VNNI level).
template <size_t G, size_t RN, class Block>
void tile_g(float* out, size_t ldo, const Block* const* rows, size_t rm, const BlockQ8_0* a,
            const ActPrep& prep, size_t nb) {
#if SNAPKV_Q8_VNNI
  if constexpr (G == 16) {
    tile_rows<RN>(out, ldo, rows, rm, a, prep, nb);
    return;
  }
#endif
  static_assert(G == 8 || G == 16, "8 or 16 rows");
  if constexpr (G == 8) tile_rows8<RN>(out, ldo, rows, rm, a, prep, nb);
}

template <size_t G, class Block>
void tile_rows_any(size_t rn, float* out, size_t ldo, const Block* const* rows, size_t rm,
                   const BlockQ8_0* a, const ActPrep& prep, size_t nb) {
  static_assert(kTileTokens == 8 || kTileTokens == 4, "the switch below covers 1..8 tokens");
  switch (rn) {
    case 1:
      return tile_g<G, 1>(out, ldo, rows, rm, a, prep, nb);
    case 2:
      return tile_g<G, 2>(out, ldo, rows, rm, a, prep, nb);
    case 3:
      return tile_g<G, 3>(out, ldo, rows, rm, a, prep, nb);
#if SNAPKV_Q8_VNNI
    case 4:
      return tile_g<G, 4>(out, ldo, rows, rm, a, prep, nb);
    case 5:
      return tile_g<G, 5>(out, ldo, rows, rm, a, prep, nb);
    case 6:
      return tile_g<G, 6>(out, ldo, rows, rm, a, prep, nb);
    case 7:
      return tile_g<G, 7>(out, ldo, rows, rm, a, prep, nb);
    default:
      return tile_g<G, 8>(out, ldo, rows, rm, a, prep, nb);
#else
    default:
      return tile_g<G, 4>(out, ldo, rows, rm, a, prep, nb);
#endif
  }
}

// The row groups of G rows over chunks of tokens (ActPrep filled for all n_tokens).
template <size_t G, class Block>
void run_groups(float* out, size_t ldo, const Block* w, size_t n_rows, const BlockQ8_0* a,
                size_t n_tokens, size_t nb, const int32_t* corr, const float* da) {
  for (size_t c0 = 0; c0 < n_tokens; c0 += kTokenChunk) {
    const size_t c1 = std::min(n_tokens, c0 + kTokenChunk);
    for (size_t r0 = 0; r0 < n_rows; r0 += G) {
      const size_t rm = std::min(G, n_rows - r0);
      const Block* rows[G];
      for (size_t r = 0; r < G; ++r) rows[r] = w + (r0 + std::min(r, rm - 1)) * nb;
      const size_t next_rows = r0 + G < n_rows ? n_rows - r0 - G : 0;
      for (size_t t0 = c0; t0 < c1; t0 += kTileTokens) {
        ActPrep prep{corr + t0 * nb, da + t0 * nb};
        if (t0 == c0) {
          prep.prefetch = reinterpret_cast<const char*>(w + (r0 + G) * nb);
          prep.prefetch_bytes = std::min(G, next_rows) * nb * sizeof(Block);
        }
        tile_rows_any<G>(std::min(kTileTokens, c1 - t0), out + t0 * ldo + r0, ldo, rows, rm,
                         a + t0 * nb, prep, nb);
      }
    }
  }
}

// Scratch of one thread for ActPrep (grown, never shrunk).
struct PrepScratch {
  std::vector<int32_t> corr;
  std::vector<float> da;
};
#endif  // SNAPKV_Q8_AVX2

template <class Block>
void gemm_blocks(float* out, size_t ldo, const Block* w, size_t n_rows, const BlockQ8_0* a,
                 size_t n_tokens, size_t n) {
#if SNAPKV_Q8_AVX2
  const size_t nb = n / kQ8BlockSize;
  static thread_local PrepScratch scratch;
  if (scratch.corr.size() < n_tokens * nb) {
    scratch.corr.resize(n_tokens * nb);
    scratch.da.resize(n_tokens * nb);
  }
  const __m256i ones8 = _mm256_set1_epi8(1);
  for (size_t i = 0; i < n_tokens * nb; ++i) {
    const __m256i s =
        _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, load256(a[i].qs)), _mm256_set1_epi16(1));
    scratch.corr[i] = -code_offset(w) * hsum_i32(s);
    scratch.da[i] = half(a[i].d);
  }
  if (n_tokens == 1 && kTileRows > 8 && kSingleTokenRows8) {
    run_groups<8>(out, ldo, w, n_rows, a, n_tokens, nb, scratch.corr.data(), scratch.da.data());
  } else {
    run_groups<kTileRows>(out, ldo, w, n_rows, a, n_tokens, nb, scratch.corr.data(),
                          scratch.da.data());
  }
#else
  // Scalar and NEON: the pair dots, a weight row meeting a chunk of token rows in turn
  const size_t nb = n / kQ8BlockSize;
  constexpr size_t kChunk = 64;
  for (size_t c0 = 0; c0 < n_tokens; c0 += kChunk) {
    const size_t c1 = std::min(n_tokens, c0 + kChunk);
    for (size_t r = 0; r < n_rows; ++r) {
      for (size_t t = c0; t < c1; ++t) out[t * ldo + r] = blocks_dot(w + r * nb, a + t * nb, n);
    }
  }
#endif
}

}  // namespace

const char* q8_dot_isa() {
#if SNAPKV_Q8_VNNI
  return "avx512vnni";
#elif SNAPKV_Q8_AVX2
  return "avx2";
#elif SNAPKV_Q8_NEON && defined(__ARM_FEATURE_DOTPROD)
  return "neon_dot";
#elif SNAPKV_Q8_NEON
  return "neon";
#else
  return "scalar";
#endif
}

// ---- Q8_0 and Q4_0 weights x Q8_0 activations ----------------------------------------------

float dot_q8_0_q8_0_ref(const BlockQ8_0* w, const BlockQ8_0* a, size_t n) {
  return blocks_dot_ref(w, a, n);
}
float dot_q4_0_q8_0_ref(const BlockQ4_0* w, const BlockQ8_0* a, size_t n) {
  return blocks_dot_ref(w, a, n);
}
float dot_q8_0_q8_0(const BlockQ8_0* w, const BlockQ8_0* a, size_t n) {
  return blocks_dot(w, a, n);
}
float dot_q4_0_q8_0(const BlockQ4_0* w, const BlockQ8_0* a, size_t n) {
  return blocks_dot(w, a, n);
}

void gemm_q8_0_q8_0(float* out, size_t ldo, const BlockQ8_0* w, size_t n_rows, const BlockQ8_0* a,
                    size_t n_tokens, size_t n) {
  gemm_blocks(out, ldo, w, n_rows, a, n_tokens, n);
}
void gemm_q4_0_q8_0(float* out, size_t ldo, const BlockQ4_0* w, size_t n_rows, const BlockQ8_0* a,
                    size_t n_tokens, size_t n) {
  gemm_blocks(out, ldo, w, n_rows, a, n_tokens, n);
}
void gemm_q8_0_q8_0_ref(float* out, size_t ldo, const BlockQ8_0* w, size_t n_rows,
                        const BlockQ8_0* a, size_t n_tokens, size_t n) {
  gemm_blocks_ref(out, ldo, w, n_rows, a, n_tokens, n);
}
void gemm_q4_0_q8_0_ref(float* out, size_t ldo, const BlockQ4_0* w, size_t n_rows,
                        const BlockQ8_0* a, size_t n_tokens, size_t n) {
  gemm_blocks_ref(out, ldo, w, n_rows, a, n_tokens, n);
}

}  // namespace snapkv::SNAPKV_ISA
