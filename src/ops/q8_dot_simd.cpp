// Integer dot products of quantized weight rows with quantized activations (q8_dot.h), compiled
// once per ISA level (util/isa.h; the public entry points and their dispatch are in q8_dot.cpp):
// a scalar reference per weight type (the scalar level's copy is the one tests call) and one fast
// kernel (AVX2 maddubs/madd, or AVX-512 VNNI dpbusd for the
// Q8_0 / Q4_0 pairs) that computes the same integers and then runs the same float operations.
//
// Integer ranges (why nothing overflows or saturates): activation codes are in [-127, 127];
//  - Q8_0 x Q8_0: maddubs(|w|, a * sign(w)) pairs <= 2 * 128 * 127 = 32512 < 2^15.
//  - Q4_K / Q5_K: unsigned 4/5-bit codes, pairs <= 2 * 31 * 127 = 7874; times a 6-bit scale in
//    madd: |lane| <= 2 * 7874 * 63; the super-block sum <= 256 * 31 * 127 * 63 < 2^31.
//  - Q6_K: codes 0..63 (the -32 offset is applied through the activation block sums), pairs <=
//    16002; times an int8 scale: |super-block sum| <= 256 * 63 * 127 * 128 + 32 * 128 * 256 * 127
//    < 2^31.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>

#include "ops/q8_dot.h"
#include "util/isa.h"

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

#include "ops/hsum.h"
#define SNAPKV_Q8_AVX2 1
#endif
#if SNAPKV_Q8_AVX2 && defined(__AVX512VNNI__) && defined(__AVX512VL__)
#define SNAPKV_Q8_VNNI 1
#endif

namespace snapkv::SNAPKV_ISA {

using ops_internal::BlockQ8_K;

namespace {

inline float half(fp16_t h) {
#if defined(__F16C__)
  return _cvtsh_ss(h);  // exact, like fp16_to_fp32
#else
  return fp16_to_fp32(h);
#endif
}

// The lane order of ops/hsum.h: ((l0 + l4) + (l1 + l5)) + ((l2 + l6) + (l3 + l7)).
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

__m256i load256(const void* p) {
  return _mm256_loadu_si256(static_cast<const __m256i*>(p));
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

template <class Block>
float lanes_dot(const Block* w, const BlockQ8_0* a, size_t n) {
#if SNAPKV_Q8_AVX2
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
#if SNAPKV_Q8_AVX2
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
#if SNAPKV_Q8_AVX2
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
#if SNAPKV_Q8_AVX2
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

// ---- Activation quantizer (Q8_0) -----------------------------------------------------------
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
#else
  ops_internal::quantize_act_q8_0_ref(out, x, n);
#endif
}

}  // namespace snapkv::SNAPKV_ISA
