// KIVI key scores with integer dot products on the packed codes (see kivi_kernels.h,
// kivi_key_block_dot_q8_scalar for the arithmetic), compiled once per ISA level (util/isa.h); the
// levels with AVX-512 VNNI run vpdpbusd (u8 codes x s8 query), the others report "not handled"
// and keep the float kernels of kivi_simd.cpp.
//
// Within a key block every channel c has one scale s_c and zero z_c, so
//   q . k_r = sum_c (q_c s_c) code(r, c) + sum_c q_c z_c.
// q' = q o s is quantized per query and block to a pair of int8 vectors, q' ~ step * hi +
// step2 * lo (step = max |q'| / 127, step2 = step / 254: about 15 bits, as a single int8 vector
// lost up to 5% of a logit on keys with outlier channels), and the first sum becomes
// step * sum_c hi_c code(r, c) + step2 * sum_c lo_c code(r, c), both sums exact in int32.
//
// Layout of a key block (include/snapkv/kv/kivi.h): per octet of 8 rows, one word per channel
// holding the 8 rows' codes, W = bits bytes per word, P = 8 / bits codes per byte (row
// h * P + i sits in byte h at bits bits * i). A 16-byte lane of an octet holds C = 16 / W
// channels; one byte shuffle makes dword d = h * Q + qd (Q = C / 4) of the lane hold byte h of the
// four channels 4 qd .. 4 qd + 3, so masking bits (bits * i) .. leaves, in every dword, one row's
// codes of 4 channels (times 2^(bits i)): vpdpbusd against the query bytes of those 4 channels
// sums them into a lane of that row. One accumulator per (i, operand set); after the octet the
// lanes of a row are summed, the 2^(bits i) removed by an exact shift, and the rows converted to
// float.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kv/kivi_kernels.h"
#include "util/isa.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#define SNAPKV_KIVI_VNNI 1
#endif

namespace snapkv::SNAPKV_ISA {

#if SNAPKV_KIVI_VNNI
namespace {

template <int Bits>
struct Q8Shape {
  static constexpr int kW = Bits;           // bytes per word
  static constexpr int kP = 8 / Bits;       // codes (rows) per byte
  static constexpr int kC = 16 / Bits;      // channels per 16-byte lane
  static constexpr int kQ = kC / 4;         // channel quads per lane
  static constexpr int kChannels = 4 * kC;  // channels per 64-byte vector
};

// The tables of one bit width: the byte shuffle (dword d = h Q + qd of a lane <- byte h of
// channels 4 qd ..), the query-operand spread (dword (L, d) <- query dword L Q + d % Q), and per
// pair of queries the source of each output (query jj, row r) among the summed accumulators.
template <int Bits>
struct Q8Tables {
  using S = Q8Shape<Bits>;
  alignas(64) int8_t shuffle[64];
  alignas(64) int32_t spread[16];
  alignas(64) int32_t pick[S::kQ][16];
  constexpr Q8Tables() : shuffle{}, spread{}, pick{} {
    for (int lane = 0; lane < 4; ++lane) {
      for (int d = 0; d < 4; ++d) {
        const int h = d / S::kQ, qd = d % S::kQ;
        for (int b = 0; b < 4; ++b) {
          shuffle[lane * 16 + d * 4 + b] = static_cast<int8_t>((4 * qd + b) * S::kW + h);
        }
        spread[lane * 4 + d] = lane * S::kQ + d % S::kQ;
      }
    }
    // accumulator f = jj * P + i (within the pair) holds row h * P + i in dwords h * Q + qd
    for (int qd = 0; qd < S::kQ; ++qd) {
      for (int jj = 0; jj < 2; ++jj) {
        for (int r = 0; r < 8; ++r) {
          const int f = jj * S::kP + r % S::kP;
          pick[qd][jj * 8 + r] = f * 4 + (r / S::kP) * S::kQ + qd;
        }
      }
    }
  }
};
constexpr Q8Tables<2> kTables2;
constexpr Q8Tables<4> kTables4;
template <int Bits>
constexpr const Q8Tables<Bits>& tables() {
  if constexpr (Bits == 2) {
    return kTables2;
  } else {
    return kTables4;
  }
}

// acc += vpdpbusd(u8 a, s8 b), in place: GCC 12 copies every accumulator of the intrinsic
// _mm512_dpbusd_epi32 into a fresh register and back around each instruction (two moves per
// multiply in the hot loop); the asm ties the accumulator to its register.
inline void dpbusd(__m512i& acc, __m512i a, const __m512i& b) {
#if defined(__GNUC__)
  __asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(a), "vm"(b));
#else
  acc = _mm512_dpbusd_epi32(acc, a, b);
#endif
}

// A vector whose lane k is the sum of the four 128-bit lanes of v[k].
inline __m512i sum_lanes4(__m512i v0, __m512i v1, __m512i v2, __m512i v3) {
  const __m512i s01 = _mm512_add_epi32(_mm512_shuffle_i32x4(v0, v1, 0x44),   // v0 l0 l1, v1 l0 l1
                                       _mm512_shuffle_i32x4(v0, v1, 0xEE));  // v0 l2 l3, v1 l2 l3
  const __m512i s23 =
      _mm512_add_epi32(_mm512_shuffle_i32x4(v2, v3, 0x44), _mm512_shuffle_i32x4(v2, v3, 0xEE));
  return _mm512_add_epi32(_mm512_shuffle_i32x4(s01, s23, 0x88),   // lanes 0, 2 of each
                          _mm512_shuffle_i32x4(s01, s23, 0xDD));  // lanes 1, 3 of each
}

// Spreads q8[0 .. head_dim) into the operand vectors ops[v] (v < head_dim / kChannels).
template <int Bits>
void spread_operands(__m512i* ops, const int8_t* q8, size_t head_dim) {
  using S = Q8Shape<Bits>;
  const __m512i spread = _mm512_load_si512(tables<Bits>().spread);
  for (size_t v = 0; v < head_dim / S::kChannels; ++v) {
    __m512i src;
    if constexpr (Bits == 2) {
      src = _mm512_zextsi256_si512(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q8 + v * S::kChannels)));
    } else {
      src = _mm512_zextsi128_si512(
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(q8 + v * S::kChannels)));
    }
    ops[v] = _mm512_permutexvar_epi32(spread, src);
  }
}

// One query's int8 pair (kivi_key_block_dot_q8_scalar): the operand vectors of hi (hi_ops) and
// lo (lo_ops), step, step2 and qz. q8: head_dim bytes of scratch.
template <int Bits>
void prepare_query(__m512i* hi_ops, __m512i* lo_ops, float& step, float& step2, float& qz,
                   const float* q, const float* scales, const float* zeros, size_t head_dim,
                   int8_t* q8) {
  __m512 mx = _mm512_setzero_ps(), z = _mm512_setzero_ps();
  for (size_t c = 0; c < head_dim; c += 16) {
    const __m512 qv = _mm512_loadu_ps(q + c);
    const __m512 qs = _mm512_mul_ps(qv, _mm512_loadu_ps(scales + c));
    mx = _mm512_max_ps(mx, _mm512_abs_ps(qs));
    z = _mm512_fmadd_ps(qv, _mm512_loadu_ps(zeros + c), z);
  }
  const float m = _mm512_reduce_max_ps(mx);
  qz = _mm512_reduce_add_ps(z);
  step = m / 127.0f;
  step2 = step / 254.0f;
  const __m512 inv = _mm512_set1_ps(m > 0.0f ? 127.0f / m : 0.0f);
  const __m512 inv2 = _mm512_set1_ps(step >= 0x1p-100f ? 254.0f / step : 0.0f);
  const __m512 sv = _mm512_set1_ps(step);
  for (size_t c = 0; c < head_dim; c += 16) {
    const __m512 qs = _mm512_mul_ps(_mm512_loadu_ps(q + c), _mm512_loadu_ps(scales + c));
    const __m512i hi = _mm512_cvtps_epi32(_mm512_mul_ps(qs, inv));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q8 + c), _mm512_cvtsepi32_epi8(hi));
    // the residual q' - step * hi, |.| <= step / 2 (up to rounding), in steps of step2
    const __m512 r = _mm512_fnmadd_ps(sv, _mm512_cvtepi32_ps(hi), qs);
    const __m512i lo = _mm512_cvtps_epi32(_mm512_mul_ps(r, inv2));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q8 + head_dim + c), _mm512_cvtsepi32_epi8(lo));
  }
  spread_operands<Bits>(hi_ops, q8, head_dim);
  spread_operands<Bits>(lo_ops, q8 + head_dim, head_dim);
}

// NQ (1 or 2) queries against every octet of a key block. ops: [4][n_vec] operand vectors, hi of
// query j at j, lo at 2 + j; step, step2, qz: [2]. The accumulators of (i, operand set f)
// are acc[f * P + i]: the four operand sets play the four queries of the reduction tables.
template <int NQ, int Bits>
void key_block_q8_nq(float* out, size_t out_stride, const __m512i* ops, const float* step,
                     const float* step2, const float* qz, const uint8_t* words, size_t n_rows,
                     size_t head_dim) {
  using S = Q8Shape<Bits>;
  constexpr int kAcc = S::kP * 4;
  const size_t n_vec = head_dim / S::kChannels, n_oct = (n_rows + 7) / 8;
  const size_t oct_bytes = head_dim * S::kW;
  const Q8Tables<Bits>& t = tables<Bits>();
  const __m512i shuffle = _mm512_load_si512(t.shuffle);
  const __m512i shifts = [] {  // accumulator f of a group of 4 (lane k = f % 4): i = f % P
    alignas(64) int32_t s[16];
    for (int k = 0; k < 16; ++k) s[k] = Bits * ((k / 4) % S::kP);
    return _mm512_load_si512(s);
  }();
  const __m512 sv = _mm512_insertf32x8(_mm512_set1_ps(step[0]), _mm256_set1_ps(step[NQ - 1]), 1);
  const __m512 s2v = _mm512_insertf32x8(_mm512_set1_ps(step2[0]), _mm256_set1_ps(step2[NQ - 1]), 1);
  const __m512 zv = _mm512_insertf32x8(_mm512_set1_ps(qz[0]), _mm256_set1_ps(qz[NQ - 1]), 1);
  constexpr int kPerPair = S::kP / 2;  // groups per pair of operand sets (2 P accumulators)
  for (size_t o = 0; o < n_oct; ++o) {
    const uint8_t* w = words + o * oct_bytes;
    __m512i acc[kAcc];
    for (int f = 0; f < kAcc; ++f) acc[f] = _mm512_setzero_si512();
    for (size_t v = 0; v < n_vec; ++v) {
      const __m512i x = _mm512_shuffle_epi8(_mm512_loadu_si512(w + v * 64), shuffle);
      for (int i = 0; i < S::kP; ++i) {
        const __m512i m = _mm512_and_si512(
            x, _mm512_set1_epi8(static_cast<char>(((1 << Bits) - 1) << (Bits * i))));
        for (int j = 0; j < NQ; ++j) {
          dpbusd(acc[j * S::kP + i], m, ops[j * n_vec + v]);
          dpbusd(acc[(2 + j) * S::kP + i], m, ops[(2 + j) * n_vec + v]);
        }
      }
    }
    // groups of 4 accumulators: lane k of g[n] = sum of the lanes of acc[4 n + k], unscaled
    __m512i g[kAcc / 4];
    for (int n = 0; n < kAcc / 4; ++n) {
      g[n] = _mm512_srav_epi32(
          sum_lanes4(acc[4 * n], acc[4 * n + 1], acc[4 * n + 2], acc[4 * n + 3]), shifts);
    }
    // rows[p]: operand sets 2 p, 2 p + 1 (p = 0: hi of both queries, 1: lo), 8 rows each
    __m512 rows[2];
    for (int p = 0; p < 2; ++p) {
      const __m512i a = g[p * kPerPair], b = g[p * kPerPair + kPerPair - 1];
      __m512i r = _mm512_permutex2var_epi32(a, _mm512_load_si512(t.pick[0]), b);
      for (int qd = 1; qd < S::kQ; ++qd) {
        r = _mm512_add_epi32(r, _mm512_permutex2var_epi32(a, _mm512_load_si512(t.pick[qd]), b));
      }
      rows[p] = _mm512_cvtepi32_ps(r);
    }
    const __m512 res = _mm512_fmadd_ps(rows[1], s2v, _mm512_fmadd_ps(rows[0], sv, zv));
    const size_t valid = std::min<size_t>(8, n_rows - o * 8);
    const __mmask8 mask = static_cast<__mmask8>((1u << valid) - 1u);
    _mm256_mask_storeu_ps(out + o * 8, mask, _mm512_castps512_ps256(res));
    if (NQ == 2) {
      _mm256_mask_storeu_ps(out + out_stride + o * 8, mask, _mm512_extractf32x8_ps(res, 1));
    }
  }
}

template <int Bits>
void key_block_q8(float* out, size_t out_stride, const float* q, size_t n_q, const float* scales,
                  const float* zeros, const uint8_t* words, size_t n_rows, size_t head_dim,
                  float* scratch) {
  using S = Q8Shape<Bits>;
  const size_t n_vec = head_dim / S::kChannels;
  // scratch: 64-byte aligned operand vectors [4][n_vec], then q8 bytes [2][head_dim]
  auto* ops = reinterpret_cast<__m512i*>((reinterpret_cast<uintptr_t>(scratch) + 63) &
                                         ~static_cast<uintptr_t>(63));
  auto* q8 = reinterpret_cast<int8_t*>(ops + 4 * n_vec);
  for (size_t j0 = 0; j0 < n_q; j0 += 2) {
    const size_t nq = std::min<size_t>(2, n_q - j0);
    float step[2], step2[2], qz[2];
    for (size_t j = 0; j < nq; ++j) {
      prepare_query<Bits>(ops + j * n_vec, ops + (2 + j) * n_vec, step[j], step2[j], qz[j],
                          q + (j0 + j) * head_dim, scales, zeros, head_dim, q8);
    }
    float* o = out + j0 * out_stride;
    if (nq == 2) {
      key_block_q8_nq<2, Bits>(o, out_stride, ops, step, step2, qz, words, n_rows, head_dim);
    } else {
      key_block_q8_nq<1, Bits>(o, out_stride, ops, step, step2, qz, words, n_rows, head_dim);
    }
  }
}

}  // namespace
#endif  // SNAPKV_KIVI_VNNI

bool kivi_key_q8_handles(size_t head_dim, int bits) {
#if SNAPKV_KIVI_VNNI
  return (bits == 2 && head_dim % Q8Shape<2>::kChannels == 0) ||
         (bits == 4 && head_dim % Q8Shape<4>::kChannels == 0);
#else
  (void)head_dim, (void)bits;
  return false;
#endif
}

bool kivi_key_block_dot_q8(float* out, size_t out_stride, const float* q, size_t n_q,
                           const float* scales, const float* zeros, const uint8_t* words,
                           size_t n_rows, size_t head_dim, int bits, float* scratch) {
#if SNAPKV_KIVI_VNNI
  if (bits == 2 && head_dim % Q8Shape<2>::kChannels == 0) {
    key_block_q8<2>(out, out_stride, q, n_q, scales, zeros, words, n_rows, head_dim, scratch);
    return true;
  }
  if (bits == 4 && head_dim % Q8Shape<4>::kChannels == 0) {
    key_block_q8<4>(out, out_stride, q, n_q, scales, zeros, words, n_rows, head_dim, scratch);
    return true;
  }
#else
  (void)out, (void)out_stride, (void)q, (void)n_q, (void)scales, (void)zeros, (void)words;
  (void)n_rows, (void)head_dim, (void)bits, (void)scratch;
#endif
  return false;
}

}  // namespace snapkv::SNAPKV_ISA
