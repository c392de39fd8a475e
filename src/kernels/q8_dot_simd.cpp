// Integer dot products of Q8_0 and Q4_0 weight rows with Q8_0 activations (q8_dot.h), compiled
// once per ISA level (q8_dot_simd.h): a scalar reference (the scalar level's copy is the one tests
// call) and one fast kernel (AVX2 maddubs/madd, or AVX-512 VNNI dpbusd) that computes the same
// integers and then runs the same float operations. The K-quant weights are in
// q8_dot_kquants_simd.cpp, the activation quantizer in q8_act_simd.cpp (docs/KERNELS.md).
//
// Integer range (why nothing overflows or saturates): activation codes are in [-127, 127];
// maddubs(|w|, a * sign(w)) pairs <= 2 * 128 * 127 = 32512 < 2^15.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <new>

#include "kernels/q8_dot_simd.h"

namespace snapkv::SNAPKV_ISA {
namespace {

// The lane order of kernels/vec.h (hsum): ((l0 + l4) + (l1 + l5)) + ((l2 + l6) + (l3 + l7)).
float hsum8(const float lanes[8]) {
  return ((lanes[0] + lanes[4]) + (lanes[1] + lanes[5])) +
         ((lanes[2] + lanes[6]) + (lanes[3] + lanes[7]));
}

// Codes of 32-element blocks, element e < 32.
int code(const BlockQ8_0& b, size_t e) {
  return b.qs[e];
}
int code(const BlockQ4_0& b, size_t e) {
  const uint8_t byte = b.qs[e % 16];
  return (e < 16 ? (byte & 0x0F) : (byte >> 4)) - 8;
}

// The 8-lane reference shared by Q8_0 and Q4_0 weights.
template <class Block>
float lanes_dot_ref(const Block* w, const BlockQ8_0* a, size_t n) {
  float lanes[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
  for (size_t b = 0; b < n / kQ8BlockSize; ++b) {
    const float d = half(w[b].d) * half(a[b].d);
    for (size_t l = 0; l < 8; ++l) {
      int32_t s = 0;
      for (size_t k = 4 * l; k < 4 * l + 4; ++k) s += code(w[b], k) * a[b].qs[k];
      lanes[l] = std::fma(d, static_cast<float>(s), lanes[l]);
    }
  }
  return hsum8(lanes);
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

// 32 Q4_0 codes (-8..7) in element order: low nibbles then high nibbles.
__m256i q4_0_codes(const BlockQ4_0& b) {
  const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.qs));
  const __m256i both = _mm256_set_m128i(_mm_srli_epi16(bytes, 4), bytes);
  return _mm256_sub_epi8(_mm256_and_si256(both, _mm256_set1_epi8(0x0F)), _mm256_set1_epi8(8));
}

__m256i codes(const BlockQ8_0& b) {
  return load256(b.qs);
}
__m256i codes(const BlockQ4_0& b) {
  return q4_0_codes(b);
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
float lanes_dot(const Block* w, const BlockQ8_0* a, size_t n) {
#if SNAPKV_Q8_NEON
  // lanes 0..3 in lo, 4..7 in hi: the reference's fma(d, s, lane) per lane (vfmaq is fused)
  float32x4_t lo = vdupq_n_f32(0.0f), hi = vdupq_n_f32(0.0f);
  const int32x4_t zero = vdupq_n_s32(0);
  for (size_t b = 0; b < n / kQ8BlockSize; ++b) {
    const int8x16x2_t wc = codes_neon(w[b]);
    const int32x4_t s0 = dot4_i8(zero, wc.val[0], vld1q_s8(a[b].qs));
    const int32x4_t s1 = dot4_i8(zero, wc.val[1], vld1q_s8(a[b].qs + 16));
    const float32x4_t d = vdupq_n_f32(half(w[b].d) * half(a[b].d));
    lo = vfmaq_f32(lo, d, vcvtq_f32_s32(s0));
    hi = vfmaq_f32(hi, d, vcvtq_f32_s32(s1));
  }
  float lanes[8];
  vst1q_f32(lanes, lo);
  vst1q_f32(lanes + 4, hi);
  return hsum8(lanes);
#elif SNAPKV_Q8_AVX2
  __m256 acc = _mm256_setzero_ps();
  for (size_t b = 0; b < n / kQ8BlockSize; ++b) {
    const __m256i s = mul_sum_i8(codes(w[b]), load256(a[b].qs));
    const __m256 d = _mm256_set1_ps(half(w[b].d) * half(a[b].d));
    acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(s), acc);
  }
  return hsum(acc);
#else
  return lanes_dot_ref(w, a, n);
#endif
}

// ---- Tiles of weight rows x activation rows (prefill) -------------------------------------
//
// gemm_lanes: every (row, token) pair gets exactly the float operations of lanes_dot (8 fp32 lanes,
// fma(dw * da, s, lane) per block, hsum at the end); the tile only shares loads and the per-block
// weight work between kTileRows rows and kTileTokens tokens held in registers.
//   VNNI: the activation codes are made unsigned (a + 128, an xor of the sign bit) once per token
//     and block, and dpbusd starts from -128 * (sum of the 4 weight codes), computed with the
//     rows' fp32 scales once per row group and token chunk (RowPrep): (a + 128) w - 128 w = a w
//     exactly (|lane| <= 4 * 255 * 128, no saturation).
//   AVX2: |w| once per row and block, then maddubs(|w|, a * sign(w)) as in mul_sum_i8.

// Full unrolling of the loops over the tile's rows and tokens, early enough that the accumulator
// array becomes registers (GCC otherwise keeps it on the stack).
#define SNAPKV_UNROLL _Pragma("GCC unroll 8")

#if SNAPKV_Q8_VNNI
constexpr size_t kTileRows = 4, kTileTokens = 4;  // 16 accumulators of the 32 ymm registers
#else
constexpr size_t kTileRows = 2, kTileTokens = 4;  // 8 accumulators of the 16 ymm registers
#endif
constexpr size_t kTokenChunk = 64;  // activation rows that stay in L2 while a row group sweeps them

// Per-row work of a row group, done once per group and token chunk (VNNI): corr [kTileRows][nb],
// -128 * (the 4-code sums of each block), the starting value of dpbusd; dw [nb][4], the rows'
// scales as fp32 (zero beyond the group's rows).
struct RowPrep {
  const void* corr = nullptr;  // __m256i values
  const float* dw = nullptr;
};

// Scratch of one thread for RowPrep (grown, never shrunk; freed at thread exit).
struct PrepScratch {
  void* data = nullptr;
  size_t bytes = 0;
  PrepScratch() = default;
  PrepScratch(const PrepScratch&) = delete;
  PrepScratch& operator=(const PrepScratch&) = delete;
  ~PrepScratch() { std::free(data); }
  void* get(size_t n) {
    if (n > bytes) {
      std::free(data);
      bytes = (n + 63) / 64 * 64;
      data = std::aligned_alloc(64, bytes);
      if (data == nullptr) {
        bytes = 0;
        throw std::bad_alloc();
      }
    }
    return data;
  }
};

// out [RN][ldo]: out[t * ldo + r] = lanes_dot(w + r * nb, a + t * nb, 32 * nb), r < RM, t < RN.
template <size_t RM, size_t RN, class Block>
void tile_lanes(float* out, size_t ldo, const Block* w, const BlockQ8_0* a, size_t nb,
                [[maybe_unused]] const RowPrep& prep) {
#if SNAPKV_Q8_AVX2
  __m256 acc[RM][RN];
  SNAPKV_UNROLL for (size_t r = 0; r < RM; ++r) {
    SNAPKV_UNROLL for (size_t t = 0; t < RN; ++t) acc[r][t] = _mm256_setzero_ps();
  }
  for (size_t b = 0; b < nb; ++b) {
    __m256i wq[RM], wx[RM];  // the codes, and their -128 * sums (VNNI) or magnitudes (AVX2)
    alignas(16) float scale[RN][4];
#if SNAPKV_Q8_VNNI
    const auto* corr = static_cast<const __m256i*>(prep.corr);
    SNAPKV_UNROLL for (size_t r = 0; r < RM; ++r) {
      wq[r] = codes(w[r * nb + b]);
      wx[r] = _mm256_load_si256(corr + r * nb + b);
    }
    const __m128 dw4 = _mm_load_ps(prep.dw + 4 * b);
#else
    alignas(16) float dw[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    SNAPKV_UNROLL for (size_t r = 0; r < RM; ++r) {
      const Block& block = w[r * nb + b];
      wq[r] = codes(block);
      wx[r] = _mm256_sign_epi8(wq[r], wq[r]);
      dw[r] = half(block.d);
    }
    const __m128 dw4 = _mm_load_ps(dw);
#endif
    // dw * da of every pair, once per block (the same float products as lanes_dot's, four rows
    // per vector multiply), read back as broadcast operands of the fmas
    SNAPKV_UNROLL for (size_t t = 0; t < RN; ++t) {
      _mm_store_ps(scale[t], _mm_mul_ps(dw4, _mm_set1_ps(half(a[t * nb + b].d))));
    }
    // (through memory: 16 broadcast operands, not 16 more live registers)
    asm volatile("" : : "r"(&scale[0][0]) : "memory");
    SNAPKV_UNROLL for (size_t t = 0; t < RN; ++t) {
      const __m256i aq = load256(a[t * nb + b].qs);
#if SNAPKV_Q8_VNNI
      const __m256i au = _mm256_xor_si256(aq, _mm256_set1_epi8(static_cast<char>(0x80)));
#endif
      SNAPKV_UNROLL for (size_t r = 0; r < RM; ++r) {
#if SNAPKV_Q8_VNNI
        const __m256i s = _mm256_dpbusd_epi32(wx[r], au, wq[r]);
#else
        const __m256i s = _mm256_madd_epi16(
            _mm256_maddubs_epi16(wx[r], _mm256_sign_epi8(aq, wq[r])), _mm256_set1_epi16(1));
#endif
        acc[r][t] =
            _mm256_fmadd_ps(_mm256_broadcast_ss(&scale[t][r]), _mm256_cvtepi32_ps(s), acc[r][t]);
      }
    }
  }
  SNAPKV_UNROLL for (size_t r = 0; r < RM; ++r) {
    SNAPKV_UNROLL for (size_t t = 0; t < RN; ++t) out[t * ldo + r] = hsum(acc[r][t]);
  }
#else
  for (size_t r = 0; r < RM; ++r) {
    for (size_t t = 0; t < RN; ++t) {
      out[t * ldo + r] = lanes_dot_ref(w + r * nb, a + t * nb, kQ8BlockSize * nb);
    }
  }
#endif
}

template <size_t RM, class Block>
void tile_lanes_rows(size_t rn, float* out, size_t ldo, const Block* w, const BlockQ8_0* a,
                     size_t nb, const RowPrep& prep) {
  static_assert(kTileTokens == 4, "the switch below covers 1..4 tokens");
  switch (rn) {
    case 1:
      return tile_lanes<RM, 1>(out, ldo, w, a, nb, prep);
    case 2:
      return tile_lanes<RM, 2>(out, ldo, w, a, nb, prep);
    case 3:
      return tile_lanes<RM, 3>(out, ldo, w, a, nb, prep);
    default:
      return tile_lanes<RM, 4>(out, ldo, w, a, nb, prep);
  }
}

template <class Block>
void tile_lanes_any(size_t rm, size_t rn, float* out, size_t ldo, const Block* w,
                    const BlockQ8_0* a, size_t nb, const RowPrep& prep) {
  static_assert(kTileRows <= 4, "the switch below covers 1..4 rows");
  switch (rm) {
    case 1:
      return tile_lanes_rows<1>(rn, out, ldo, w, a, nb, prep);
    case 2:
      return tile_lanes_rows<2>(rn, out, ldo, w, a, nb, prep);
    case 3:
      return tile_lanes_rows<3>(rn, out, ldo, w, a, nb, prep);
    default:
      return tile_lanes_rows<4>(rn, out, ldo, w, a, nb, prep);
  }
}

// RowPrep of rows [0, rm) of w (VNNI only; a no-op elsewhere).
template <class Block>
RowPrep prepare_rows(PrepScratch& scratch, [[maybe_unused]] const Block* w,
                     [[maybe_unused]] size_t rm, size_t nb) {
  RowPrep prep;
#if SNAPKV_Q8_VNNI
  auto* base = static_cast<uint8_t*>(scratch.get(nb * (kTileRows * sizeof(__m256i) + 16)));
  auto* corr = reinterpret_cast<__m256i*>(base);
  auto* dw = reinterpret_cast<float*>(base + nb * kTileRows * sizeof(__m256i));
  for (size_t b = 0; b < nb; ++b) {
    for (size_t r = 0; r < kTileRows; ++r) {
      const bool live = r < rm;
      const __m256i wq = live ? codes(w[r * nb + b]) : _mm256_setzero_si256();
      corr[r * nb + b] =
          _mm256_sub_epi32(_mm256_setzero_si256(),
                           _mm256_dpbusd_epi32(_mm256_setzero_si256(),
                                               _mm256_set1_epi8(static_cast<char>(0x80)), wq));
      dw[4 * b + r] = live ? half(w[r * nb + b].d) : 0.0f;
    }
  }
  prep.corr = corr;
  prep.dw = dw;
#else
  (void)scratch;
  (void)nb;
#endif
  return prep;
}

template <class Block>
void gemm_lanes(float* out, size_t ldo, const Block* w, size_t n_rows, const BlockQ8_0* a,
                size_t n_tokens, size_t n) {
#if SNAPKV_Q8_NEON
  // NEON: the pair dots, a weight row meeting a chunk of token rows in turn (no register tiles)
  const size_t nb = n / kQ8BlockSize;
  for (size_t c0 = 0; c0 < n_tokens; c0 += kTokenChunk) {
    const size_t c1 = std::min(n_tokens, c0 + kTokenChunk);
    for (size_t r = 0; r < n_rows; ++r) {
      for (size_t t = c0; t < c1; ++t) out[t * ldo + r] = lanes_dot(w + r * nb, a + t * nb, n);
    }
  }
#else
  static thread_local PrepScratch scratch;
  const size_t nb = n / kQ8BlockSize;
  for (size_t c0 = 0; c0 < n_tokens; c0 += kTokenChunk) {
    const size_t c1 = std::min(n_tokens, c0 + kTokenChunk);
    for (size_t r0 = 0; r0 < n_rows; r0 += kTileRows) {
      const size_t rm = std::min(kTileRows, n_rows - r0);
      const RowPrep prep = prepare_rows(scratch, w + r0 * nb, rm, nb);
      for (size_t t0 = c0; t0 < c1; t0 += kTileTokens) {
        tile_lanes_any(rm, std::min(kTileTokens, c1 - t0), out + t0 * ldo + r0, ldo, w + r0 * nb,
                       a + t0 * nb, nb, prep);
      }
    }
  }
#endif
}

template <class Block>
void gemm_lanes_ref(float* out, size_t ldo, const Block* w, size_t n_rows, const BlockQ8_0* a,
                    size_t n_tokens, size_t n) {
  const size_t nb = n / kQ8BlockSize;
  for (size_t t = 0; t < n_tokens; ++t) {
    for (size_t r = 0; r < n_rows; ++r) out[t * ldo + r] = lanes_dot_ref(w + r * nb, a + t * nb, n);
  }
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
  return lanes_dot_ref(w, a, n);
}
float dot_q4_0_q8_0_ref(const BlockQ4_0* w, const BlockQ8_0* a, size_t n) {
  return lanes_dot_ref(w, a, n);
}
float dot_q8_0_q8_0(const BlockQ8_0* w, const BlockQ8_0* a, size_t n) {
  return lanes_dot(w, a, n);
}
float dot_q4_0_q8_0(const BlockQ4_0* w, const BlockQ8_0* a, size_t n) {
  return lanes_dot(w, a, n);
}

void gemm_q8_0_q8_0(float* out, size_t ldo, const BlockQ8_0* w, size_t n_rows, const BlockQ8_0* a,
                    size_t n_tokens, size_t n) {
  gemm_lanes(out, ldo, w, n_rows, a, n_tokens, n);
}
void gemm_q4_0_q8_0(float* out, size_t ldo, const BlockQ4_0* w, size_t n_rows, const BlockQ8_0* a,
                    size_t n_tokens, size_t n) {
  gemm_lanes(out, ldo, w, n_rows, a, n_tokens, n);
}
void gemm_q8_0_q8_0_ref(float* out, size_t ldo, const BlockQ8_0* w, size_t n_rows,
                        const BlockQ8_0* a, size_t n_tokens, size_t n) {
  gemm_lanes_ref(out, ldo, w, n_rows, a, n_tokens, n);
}
void gemm_q4_0_q8_0_ref(float* out, size_t ldo, const BlockQ4_0* w, size_t n_rows,
                        const BlockQ8_0* a, size_t n_tokens, size_t n) {
  gemm_lanes_ref(out, ldo, w, n_rows, a, n_tokens, n);
}

}  // namespace snapkv::SNAPKV_ISA
