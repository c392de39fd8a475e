// KIVI key scores and 2-bit value sums with integer dot products on the packed codes (see
// kivi_kernels.h, kivi_key_block_dot_q8_scalar and kivi_value_rows_accumulate_q8_scalar for the
// arithmetic), compiled once per ISA level (util/isa.h); the levels with AVX-512 VNNI run vpdpbusd
// (keys: u8 codes x s8 query; values: u8 weights x codes), the others report "not handled" and
// keep the float kernels of kivi_simd.cpp. The value kernel is described above its code below.
//
// Within a key block every channel c has one scale s_c and zero z_c, so
//   q . k_r = sum_c (q_c s_c) code(r, c) + sum_c q_c z_c.
// q' = q o s is quantized per query and block to a pair of int8 vectors for 4-bit codes, q' ~
// step * hi + step2 * lo (step = max |q'| / 127, step2 = step / 254: about 15 bits, as a single
// int8 vector lost up to 5% of a logit on keys with outlier channels), and the first sum becomes
// step * sum_c hi_c code(r, c) + step2 * sum_c lo_c code(r, c), both sums exact in int32. 2-bit
// codes take hi alone (kivi_kernels.h: its rounding is a few percent of the 2-bit codec's own
// error), and the four queries of a GQA group share each masked code vector.
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
#include <vector>

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

// N (1 or 2) 16-byte chunks as the low bytes of a vector.
template <size_t N>
inline __m512i join_chunks(const __m128i* x) {
  if constexpr (N == 1) {
    return _mm512_zextsi128_si512(x[0]);
  } else {
    return _mm512_zextsi256_si512(_mm256_inserti128_si256(_mm256_castsi128_si256(x[0]), x[1], 1));
  }
}

// One query's int8 pair (kivi_key_block_dot_q8_scalar): the operand vectors of hi (hi_ops) and
// lo (lo_ops), step, step2 and qz.
template <int Bits>
void prepare_query(__m512i* hi_ops, __m512i* lo_ops, float& step, float& step2, float& qz,
                   const float* q, const float* scales, const float* zeros, size_t head_dim) {
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
  // the int8 vectors straight into the operands (a store of 16 bytes read back as 32 stalls the
  // load on store forwarding)
  const __m512i spread = _mm512_load_si512(tables<Bits>().spread);
  constexpr size_t kChunks = Q8Shape<Bits>::kChannels / 16;  // 16-channel chunks per operand
  for (size_t v = 0; v < head_dim / Q8Shape<Bits>::kChannels; ++v) {
    __m128i hi8[kChunks], lo8[kChunks];
    for (size_t k = 0; k < kChunks; ++k) {
      const size_t c = v * Q8Shape<Bits>::kChannels + 16 * k;
      const __m512 qs = _mm512_mul_ps(_mm512_loadu_ps(q + c), _mm512_loadu_ps(scales + c));
      const __m512i hi = _mm512_cvtps_epi32(_mm512_mul_ps(qs, inv));
      hi8[k] = _mm512_cvtsepi32_epi8(hi);
      // the residual q' - step * hi, |.| <= step / 2 (up to rounding), in steps of step2
      const __m512 r = _mm512_fnmadd_ps(sv, _mm512_cvtepi32_ps(hi), qs);
      lo8[k] = _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(r, inv2)));
    }
    hi_ops[v] = _mm512_permutexvar_epi32(spread, join_chunks<kChunks>(hi8));
    lo_ops[v] = _mm512_permutexvar_epi32(spread, join_chunks<kChunks>(lo8));
  }
}

// NP pairs of queries (1 or 2) against every octet of a key block, both int8 parts. ops:
// [4 NP][n_vec] operand vectors: for pair p, hi of its queries at 4 p, 4 p + 1 and lo at
// 4 p + 2, 4 p + 3 (zero for an absent query); step, step2, qz: [2 NP]; rows of queries < nq are
// stored. The accumulators of (i, operand set f) are acc[f * P + i]; operand sets 2 m, 2 m + 1
// play the query pair of the reduction tables (m = 2 p: hi, 2 p + 1: lo), so each masked code
// vector serves all 2 NP queries (4-bit: 16 accumulators for two pairs).
template <int NP, int Bits>
void key_block_q8_pairs(float* out, size_t out_stride, size_t nq, const __m512i* ops,
                        const float* step, const float* step2, const float* qz,
                        const uint8_t* words, size_t n_rows, size_t head_dim) {
  using S = Q8Shape<Bits>;
  constexpr int kSets = 4 * NP;
  constexpr int kAcc = S::kP * kSets;
  static_assert(kAcc <= 16, "the accumulators stay in registers");
  const size_t n_vec = head_dim / S::kChannels, n_oct = (n_rows + 7) / 8;
  const size_t oct_bytes = head_dim * S::kW;
  const Q8Tables<Bits>& t = tables<Bits>();
  const __m512i shuffle = _mm512_load_si512(t.shuffle);
  const __m512i shifts = [] {  // accumulator f of a group of 4 (lane k = f % 4): i = f % P
    alignas(64) int32_t s[16];
    for (int k = 0; k < 16; ++k) s[k] = Bits * ((k / 4) % S::kP);
    return _mm512_load_si512(s);
  }();
  __m512 sv[NP], s2v[NP], zv[NP];
  for (int p = 0; p < NP; ++p) {
    const auto pair = [p](const float* x) {
      return _mm512_insertf32x8(_mm512_set1_ps(x[2 * p]), _mm256_set1_ps(x[2 * p + 1]), 1);
    };
    sv[p] = pair(step), s2v[p] = pair(step2), zv[p] = pair(qz);
  }
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
        for (int f = 0; f < kSets; ++f) dpbusd(acc[f * S::kP + i], m, ops[f * n_vec + v]);
      }
    }
    // groups of 4 accumulators: lane k of g[n] = sum of the lanes of acc[4 n + k], unscaled
    __m512i g[kAcc / 4];
    for (int n = 0; n < kAcc / 4; ++n) {
      g[n] = _mm512_srav_epi32(
          sum_lanes4(acc[4 * n], acc[4 * n + 1], acc[4 * n + 2], acc[4 * n + 3]), shifts);
    }
    const size_t valid = std::min<size_t>(8, n_rows - o * 8);
    const __mmask8 mask = static_cast<__mmask8>((1u << valid) - 1u);
    for (int p = 0; p < NP; ++p) {
      // rows[h]: operand sets 4 p + 2 h, 4 p + 2 h + 1 (h = 0: hi of both queries, 1: lo)
      __m512 rows[2];
      for (int h = 0; h < 2; ++h) {
        const int m = 2 * p + h;
        const __m512i a = g[m * kPerPair], b = g[m * kPerPair + kPerPair - 1];
        __m512i r = _mm512_permutex2var_epi32(a, _mm512_load_si512(t.pick[0]), b);
        for (int qd = 1; qd < S::kQ; ++qd) {
          r = _mm512_add_epi32(r, _mm512_permutex2var_epi32(a, _mm512_load_si512(t.pick[qd]), b));
        }
        rows[h] = _mm512_cvtepi32_ps(r);
      }
      const __m512 res = _mm512_fmadd_ps(rows[1], s2v[p], _mm512_fmadd_ps(rows[0], sv[p], zv[p]));
      if (static_cast<size_t>(2 * p) < nq) {
        _mm256_mask_storeu_ps(out + 2 * p * out_stride + o * 8, mask, _mm512_castps512_ps256(res));
      }
      if (static_cast<size_t>(2 * p + 1) < nq) {
        _mm256_mask_storeu_ps(out + (2 * p + 1) * out_stride + o * 8, mask,
                              _mm512_extractf32x8_ps(res, 1));
      }
    }
  }
}

template <int Bits>
void key_block_q8(float* out, size_t out_stride, const float* q, size_t n_q, const float* scales,
                  const float* zeros, const uint8_t* words, size_t n_rows, size_t head_dim,
                  float* scratch) {
  using S = Q8Shape<Bits>;
  constexpr size_t kPairs = Bits == 4 ? 2 : 1;  // query pairs per pass (key_block_q8_pairs)
  const size_t n_vec = head_dim / S::kChannels;
  // scratch: 64-byte aligned operand vectors [4 kPairs][n_vec]
  auto* ops = reinterpret_cast<__m512i*>((reinterpret_cast<uintptr_t>(scratch) + 63) &
                                         ~static_cast<uintptr_t>(63));
  for (size_t j0 = 0; j0 < n_q; j0 += 2 * kPairs) {
    const size_t nq = std::min<size_t>(2 * kPairs, n_q - j0);
    float step[4] = {}, step2[4] = {}, qz[4] = {};
    for (size_t j = 0; j < 2 * ((nq + 1) / 2); ++j) {
      __m512i* hi = ops + (4 * (j / 2) + j % 2) * n_vec;
      __m512i* lo = hi + 2 * n_vec;
      if (j < nq) {
        prepare_query<Bits>(hi, lo, step[j], step2[j], qz[j], q + (j0 + j) * head_dim, scales,
                            zeros, head_dim);
      } else {
        for (size_t v = 0; v < n_vec; ++v) hi[v] = lo[v] = _mm512_setzero_si512();
      }
    }
    float* o = out + j0 * out_stride;
    if (kPairs == 2 && nq > 2) {
      key_block_q8_pairs<kPairs, Bits>(o, out_stride, nq, ops, step, step2, qz, words, n_rows,
                                       head_dim);
    } else {
      key_block_q8_pairs<1, Bits>(o, out_stride, nq, ops, step, step2, qz, words, n_rows, head_dim);
    }
  }
}

// One part (2-bit keys, kivi_kernels.h): query j's hi operand vectors into ops, its step and qz;
// an absent query (q == nullptr) gets zero operands.
template <int Bits>
void prepare_query_one(__m512i* ops, float& step, float& qz, const float* q, const float* scales,
                       const float* zeros, size_t head_dim) {
  if (q == nullptr) {
    for (size_t v = 0; v < head_dim / Q8Shape<Bits>::kChannels; ++v)
      ops[v] = _mm512_setzero_si512();
    step = qz = 0.0f;
    return;
  }
  __m512 mx = _mm512_setzero_ps(), z = _mm512_setzero_ps();
  for (size_t c = 0; c < head_dim; c += 16) {
    const __m512 qv = _mm512_loadu_ps(q + c);
    mx = _mm512_max_ps(mx, _mm512_abs_ps(_mm512_mul_ps(qv, _mm512_loadu_ps(scales + c))));
    z = _mm512_fmadd_ps(qv, _mm512_loadu_ps(zeros + c), z);
  }
  const float m = _mm512_reduce_max_ps(mx);
  qz = _mm512_reduce_add_ps(z);
  step = m / 127.0f;
  const __m512 inv = _mm512_set1_ps(m > 0.0f ? 127.0f / m : 0.0f);
  const __m512i spread = _mm512_load_si512(tables<Bits>().spread);
  constexpr size_t kChunks = Q8Shape<Bits>::kChannels / 16;
  for (size_t v = 0; v < head_dim / Q8Shape<Bits>::kChannels; ++v) {
    __m128i hi8[kChunks];
    for (size_t k = 0; k < kChunks; ++k) {
      const size_t c = v * Q8Shape<Bits>::kChannels + 16 * k;
      const __m512 qs = _mm512_mul_ps(_mm512_loadu_ps(q + c), _mm512_loadu_ps(scales + c));
      hi8[k] = _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(qs, inv)));
    }
    ops[v] = _mm512_permutexvar_epi32(spread, join_chunks<kChunks>(hi8));
  }
}

// Four queries (one int8 part each) against every octet of a key block: the masked codes of a
// vector feed all four, so each code load, shuffle and mask serves the whole GQA group. ops:
// [4][n_vec] (query j at j; zero for absent queries), step, qz: [4]; out rows of queries < nq.
// The accumulators of (i, query f) are acc[f * P + i], as in key_block_q8_nq with the four
// operand sets being the four queries.
template <int Bits>
void key_block_q8_one4(float* out, size_t out_stride, size_t nq, const __m512i* ops,
                       const float* step, const float* qz, const uint8_t* words, size_t n_rows,
                       size_t head_dim) {
  using S = Q8Shape<Bits>;
  constexpr int kAcc = S::kP * 4;
  const size_t n_vec = head_dim / S::kChannels, n_oct = (n_rows + 7) / 8;
  const size_t oct_bytes = head_dim * S::kW;
  const Q8Tables<Bits>& t = tables<Bits>();
  const __m512i shuffle = _mm512_load_si512(t.shuffle);
  const __m512i shifts = [] {
    alignas(64) int32_t s[16];
    for (int k = 0; k < 16; ++k) s[k] = Bits * ((k / 4) % S::kP);
    return _mm512_load_si512(s);
  }();
  __m512 sv[2], zv[2];
  for (int p = 0; p < 2; ++p) {
    sv[p] = _mm512_insertf32x8(_mm512_set1_ps(step[2 * p]), _mm256_set1_ps(step[2 * p + 1]), 1);
    zv[p] = _mm512_insertf32x8(_mm512_set1_ps(qz[2 * p]), _mm256_set1_ps(qz[2 * p + 1]), 1);
  }
  constexpr int kPerPair = S::kP / 2;
  for (size_t o = 0; o < n_oct; ++o) {
    const uint8_t* w = words + o * oct_bytes;
    __m512i acc[kAcc];
    for (int f = 0; f < kAcc; ++f) acc[f] = _mm512_setzero_si512();
    for (size_t v = 0; v < n_vec; ++v) {
      const __m512i x = _mm512_shuffle_epi8(_mm512_loadu_si512(w + v * 64), shuffle);
      for (int i = 0; i < S::kP; ++i) {
        const __m512i m = _mm512_and_si512(
            x, _mm512_set1_epi8(static_cast<char>(((1 << Bits) - 1) << (Bits * i))));
        for (int f = 0; f < 4; ++f) dpbusd(acc[f * S::kP + i], m, ops[f * n_vec + v]);
      }
    }
    __m512i g[kAcc / 4];
    for (int n = 0; n < kAcc / 4; ++n) {
      g[n] = _mm512_srav_epi32(
          sum_lanes4(acc[4 * n], acc[4 * n + 1], acc[4 * n + 2], acc[4 * n + 3]), shifts);
    }
    const size_t valid = std::min<size_t>(8, n_rows - o * 8);
    const __mmask8 mask = static_cast<__mmask8>((1u << valid) - 1u);
    for (int p = 0; p < 2; ++p) {  // queries 2 p (low half) and 2 p + 1 (high half)
      const __m512i a = g[p * kPerPair], b = g[p * kPerPair + kPerPair - 1];
      __m512i r = _mm512_permutex2var_epi32(a, _mm512_load_si512(t.pick[0]), b);
      for (int qd = 1; qd < S::kQ; ++qd) {
        r = _mm512_add_epi32(r, _mm512_permutex2var_epi32(a, _mm512_load_si512(t.pick[qd]), b));
      }
      const __m512 res = _mm512_fmadd_ps(_mm512_cvtepi32_ps(r), sv[p], zv[p]);
      if (static_cast<size_t>(2 * p) < nq) {
        _mm256_mask_storeu_ps(out + 2 * p * out_stride + o * 8, mask, _mm512_castps512_ps256(res));
      }
      if (static_cast<size_t>(2 * p + 1) < nq) {
        _mm256_mask_storeu_ps(out + (2 * p + 1) * out_stride + o * 8, mask,
                              _mm512_extractf32x8_ps(res, 1));
      }
    }
  }
}

template <int Bits>
void key_block_q8_one(float* out, size_t out_stride, const float* q, size_t n_q,
                      const float* scales, const float* zeros, const uint8_t* words, size_t n_rows,
                      size_t head_dim, float* scratch) {
  using S = Q8Shape<Bits>;
  const size_t n_vec = head_dim / S::kChannels;
  // scratch: 64-byte aligned operand vectors [4][n_vec]
  auto* ops = reinterpret_cast<__m512i*>((reinterpret_cast<uintptr_t>(scratch) + 63) &
                                         ~static_cast<uintptr_t>(63));
  for (size_t j0 = 0; j0 < n_q; j0 += 4) {
    const size_t nq = std::min<size_t>(4, n_q - j0);
    float step[4], qz[4];
    for (size_t j = 0; j < 4; ++j) {
      prepare_query_one<Bits>(ops + j * n_vec, step[j], qz[j],
                              j < nq ? q + (j0 + j) * head_dim : nullptr, scales, zeros, head_dim);
    }
    key_block_q8_one4<Bits>(out + j0 * out_stride, out_stride, nq, ops, step, qz, words, n_rows,
                            head_dim);
  }
}

}  // namespace

// ---- values: integer weighted sums (kivi_value_rows_accumulate_q8_scalar is the reference) ----
//
// 2-bit value rows only (4-bit keeps the float kernel: kivi_kernels.h says why). A row is
// [head_dim / 8] words of 8 channels, byte b holding channels 4 b .. 4 b + 3. Four rows' bytes
// are interleaved so that a dword holds byte position p of 4 consecutive rows (unpack epi8 then
// epi16, per 128-bit lane); masking bits 2 i, 2 i + 1 of every byte leaves code(row, 4 p + i)
// in each byte, and vpdpbusd with the four rows' quantized weights (u8) sums 4 rows of one channel
// per dword lane. Rows of 64 bytes (head_dim 256) fill a vector with 4 rows x 64 byte positions;
// rows of 32 bytes (head_dim 128) put rows r .. r + 3 in the low half and r + 4 .. r + 7 in the
// high half (two lanes per byte position, added when the lanes are mapped back to channels). The
// code vectors of a tile are built once and serve every query of the group; the float sums stay
// in lane order until the end of the call.
namespace {

constexpr size_t kVTile = kKiviValueQ8Tile;  // rows per tile: one weight step per (query, group)
constexpr size_t kVK = 16;                   // code vectors per step = accumulators per query

struct ValueQ8Shape {
  bool pair_rows = false;  // rows of 32 bytes: 8 rows per step, halves of the vector
  size_t step_rows = 0;    // 4, or 8 when pair_rows
};

bool value_q8_shape(ValueQ8Shape& s, size_t head_dim, size_t group, int bits) {
  if (bits != 2 || (head_dim != 128 && head_dim != 256)) return false;
  const size_t n_groups = (head_dim + group - 1) / group;
  s.pair_rows = head_dim == 128;  // 32-byte rows
  s.step_rows = s.pair_rows ? 8 : 4;
  // each dword (4 bytes of a row: 16 channels) inside one group; the tile's weights of every
  // group in two vectors (n_groups <= 4)
  return (n_groups == 1 || group % 16 == 0) && n_groups <= 4;
}

// Channel of lane `lane` of code vector k = 4 v + i (see the block comment).
size_t value_q8_channel(const ValueQ8Shape& s, size_t k, size_t lane) {
  const size_t v = k / 4, i = k % 4, lane128 = lane / 4, d = lane % 4;
  const size_t pos = (s.pair_rows ? 16 * (lane128 % 2) : 16 * lane128) + 4 * v + d;
  return 4 * pos + i;
}

// The 16 code vectors of one step starting at `rows` (row_bytes apart, all readable) into dst.
void build_step(__m512i* dst, const uint8_t* rows, size_t row_bytes, const ValueQ8Shape& s) {
  __m512i x[4];
  for (size_t t = 0; t < 4; ++t) {
    if (s.pair_rows) {
      const auto* lo = reinterpret_cast<const __m256i*>(rows + t * row_bytes);
      const auto* hi = reinterpret_cast<const __m256i*>(rows + (4 + t) * row_bytes);
      x[t] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256(lo)),
                                _mm256_loadu_si256(hi), 1);
    } else {
      x[t] = _mm512_loadu_si512(rows + t * row_bytes);
    }
  }
  // V_v lane L dword d <- byte 16 L + 4 v + d of the 4 rows
  const __m512i ab_lo = _mm512_unpacklo_epi8(x[0], x[1]), ab_hi = _mm512_unpackhi_epi8(x[0], x[1]);
  const __m512i cd_lo = _mm512_unpacklo_epi8(x[2], x[3]), cd_hi = _mm512_unpackhi_epi8(x[2], x[3]);
  const __m512i vv[4] = {_mm512_unpacklo_epi16(ab_lo, cd_lo), _mm512_unpackhi_epi16(ab_lo, cd_lo),
                         _mm512_unpacklo_epi16(ab_hi, cd_hi), _mm512_unpackhi_epi16(ab_hi, cd_hi)};
  const __m512i mask = _mm512_set1_epi8(3);
  for (int v = 0; v < 4; ++v) {
    for (int i = 0; i < 4; ++i) {
      const __m512i shifted = i == 0 ? vv[v] : _mm512_srli_epi16(vv[v], 2 * i);
      _mm512_store_si512(dst + 4 * v + i, _mm512_and_si512(shifted, mask));
    }
  }
}

// The sums over the steps of one tile for one query, the accumulators as named locals (in an
// array GCC 12 kept them in memory, a load and a store around every vpdpbusd): acc[4 v + i] +=
// weight vector v (u8) x code vector 4 v + i (s8, from memory); then sums[k] += step_v[k / 4] *
// acc[k]. The weight vectors are picked from the sub-tile's two tables (tabs[sub]) by
// w_idx[step in sub-tile][uniq[v]] here, one permute per distinct vector (stored per query and
// read back here, their stores were about 15% of this kernel's samples); codes: [n_steps][16].
void dot_tile(__m512* sums, const __m512i (*tabs)[2], const int32_t (*w_idx)[4][16],
              const int* uniq, const __m512i* codes, size_t n_steps, size_t sub_steps,
              const __m512* step_v) {
  const bool same_prev[4] = {false, uniq[1] == uniq[0], uniq[2] == uniq[1], uniq[3] == uniq[2]};
  __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0,
          a7 = a0, a8 = a0, a9 = a0, a10 = a0, a11 = a0, a12 = a0, a13 = a0, a14 = a0, a15 = a0;
  for (size_t sub = 0, st = 0; st < n_steps; ++sub) {
    const __m512i t0 = tabs[sub][0], t1 = tabs[sub][1];
    for (size_t sst = 0; sst < sub_steps && st < n_steps; ++sst, ++st) {
      const __m512i* c = codes + st * kVK;
      const int32_t(*wi)[16] = w_idx[sst];
      const auto pick = [&](int v) {
        return _mm512_permutex2var_epi32(t0, _mm512_load_si512(wi[uniq[v]]), t1);
      };
      // one permute per distinct weight vector (same_prev[v]: vector v is vector v - 1)
      __m512i h = pick(0);
      dpbusd(a0, h, c[0]), dpbusd(a1, h, c[1]), dpbusd(a2, h, c[2]), dpbusd(a3, h, c[3]);
      if (!same_prev[1]) h = pick(1);
      dpbusd(a4, h, c[4]), dpbusd(a5, h, c[5]), dpbusd(a6, h, c[6]), dpbusd(a7, h, c[7]);
      if (!same_prev[2]) h = pick(2);
      dpbusd(a8, h, c[8]), dpbusd(a9, h, c[9]), dpbusd(a10, h, c[10]), dpbusd(a11, h, c[11]);
      if (!same_prev[3]) h = pick(3);
      dpbusd(a12, h, c[12]), dpbusd(a13, h, c[13]), dpbusd(a14, h, c[14]), dpbusd(a15, h, c[15]);
    }
  }
  const __m512i acc[kVK] = {a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15};
  for (size_t k = 0; k < kVK; ++k) {
    sums[k] = _mm512_fmadd_ps(step_v[k / 4], _mm512_cvtepi32_ps(acc[k]), sums[k]);
  }
}

// Rows ahead of the tile being summed whose codes and params are prefetched (T2 hint, as
// kv/fp16_rows_simd.cpp does for fp16 rows).
constexpr size_t kVPrefetchRows = 2 * kVTile;
inline void prefetch_t2(const void* p, size_t bytes) {
  for (size_t b = 0; b < bytes; b += 64) {
    _mm_prefetch(static_cast<const char*>(p) + b, _MM_HINT_T2);
  }
}

// A step is 8 rows of 32 bytes (head_dim 128) or 4 rows of 64 (head_dim 256): value_q8_shape.
constexpr size_t kMaxStepBytes = 256;

struct alignas(64) Bytes64 {  // one vector's worth of storage
  uint8_t b[64];
};
struct ValueQ8Scratch {
  std::vector<Bytes64> codes;  // [steps per tile][16] code vectors
  std::vector<Bytes64> sums;   // [n_q][16] float vectors
  std::vector<Bytes64> zsum;   // [n_q][n_groups] float vectors of sum_r w_r zero(r, g)
  // Fixed arrays, not std::vector<uint8_t> / <int32_t>: their fill members would be compiled
  // here as weak symbols shared with other levels' objects (tests/isa_objects_check.sh).
  alignas(64) uint8_t pad[kMaxStepBytes];  // a partial step's rows, zero-filled
  alignas(64) int32_t chan[2 * 256];       // [2][head_dim]: the lanes of each channel (-1: none)
  alignas(64) int32_t group_of[256];       // [head_dim]: the group of each channel
};

void value_rows_q8(float* out, const float* w, size_t w_stride, size_t n_q, const uint8_t* codes,
                   const KiviParams* params, size_t n_rows, size_t head_dim, size_t group,
                   const ValueQ8Shape& s) {
  constexpr size_t kSub = 32;  // rows per weight table (two vectors: 4 groups x 32 rows)
  constexpr size_t kQuarters = kVTile / 16;
  constexpr size_t kQBatch = 4;  // queries quantized before their sums are taken
  static_assert(kVTile % kSub == 0, "whole weight tables per tile");
  const size_t n_groups = (head_dim + group - 1) / group;  // <= 4 (value_q8_shape)
  const size_t row_bytes = head_dim / 4;
  const size_t max_steps = kVTile / s.step_rows, sub_steps = kSub / s.step_rows;
  thread_local ValueQ8Scratch sc;
  sc.codes.resize(max_steps * kVK);
  sc.sums.assign(n_q * kVK, Bytes64{});
  sc.zsum.assign(n_q * n_groups, Bytes64{});
  auto* codes_v = reinterpret_cast<__m512i*>(sc.codes.data());
  auto* sums_v = reinterpret_cast<__m512*>(sc.sums.data());
  auto* zsum_v = reinterpret_cast<__m512*>(sc.zsum.data());
  // per weight vector v: lane -> group; the distinct ones (uniq); per step of a sub-tile and
  // distinct v: lane -> the dword of the weights of (group g, rows 4 qd .. 4 qd + 3) in the
  // packed tables below: 16 (g / 2) + 4 (qd % 4) + 2 (g % 2) + qd / 4
  alignas(64) int32_t grp_idx[4][16];
  int uniq[4];
  int n_uniq = 0;
  for (int v = 0; v < 4; ++v) {
    for (size_t lane = 0; lane < 16; ++lane) {
      grp_idx[v][lane] = static_cast<int32_t>(
          std::min(value_q8_channel(s, 4 * static_cast<size_t>(v), lane) / group, n_groups - 1));
    }
    uniq[v] = n_uniq;
    for (int e = 0; e < v; ++e) {
      if (std::equal(grp_idx[v], grp_idx[v] + 16, grp_idx[e])) {
        uniq[v] = uniq[e];
        break;
      }
    }
    if (uniq[v] == n_uniq) ++n_uniq;
  }
  alignas(64) int32_t w_idx[kSub / 4][4][16];
  for (size_t st = 0; st < sub_steps; ++st) {
    for (int v = 0; v < 4; ++v) {
      for (size_t lane = 0; lane < 16; ++lane) {
        const auto qd = static_cast<int32_t>(s.pair_rows ? 2 * st + lane / 8 : st);
        const int32_t g = grp_idx[v][lane];
        w_idx[st][uniq[v]][lane] = 16 * (g / 2) + 4 * (qd % 4) + 2 * (g % 2) + qd / 4;
      }
    }
  }
  __m512i param_idx[4];  // lane i -> dword (i % 8) * n_groups + g of 8 rows' params
  for (size_t g = 0; g < n_groups; ++g) {
    alignas(64) int32_t idx[16];
    for (size_t i = 0; i < 16; ++i) idx[i] = static_cast<int32_t>((i % 8) * n_groups + g);
    param_idx[g] = _mm512_load_si512(idx);
  }
  __m512i w32[4][kQuarters];  // the tile's integer weights [group][16 rows]; past n_groups: 0
  for (auto& g : w32) {
    for (auto& x : g) x = _mm512_setzero_si512();
  }
  __m512 scale_t[4][kQuarters], zero_t[4][kQuarters];  // the tile's params [group][16 rows]
  for (size_t r0 = 0; r0 < n_rows; r0 += kVTile) {
    const size_t nr = std::min(kVTile, n_rows - r0);
    const size_t n_steps = (nr + s.step_rows - 1) / s.step_rows;
    const uint8_t* tile = codes + r0 * row_bytes;
    if (r0 + kVPrefetchRows < n_rows) {  // the codes and params of a tile kVPrefetchRows ahead
      const size_t nf = std::min(kVTile, n_rows - r0 - kVPrefetchRows);
      prefetch_t2(tile + kVPrefetchRows * row_bytes, nf * row_bytes);
      prefetch_t2(params + (r0 + kVPrefetchRows) * n_groups, nf * n_groups * sizeof(KiviParams));
    }
    for (size_t st = 0; st < n_steps; ++st) {
      const size_t row = st * s.step_rows;
      const uint8_t* src = tile + row * row_bytes;
      if (row + s.step_rows > nr) {  // a partial last step: its rows, then zeros
        std::memset(sc.pad, 0, s.step_rows * row_bytes);
        std::memcpy(sc.pad, src, (nr - row) * row_bytes);
        src = sc.pad;
      }
      build_step(codes_v + st * kVK, src, row_bytes, s);
    }
    __mmask16 mask[kQuarters];
    for (size_t h = 0; h < kQuarters; ++h) {
      const size_t valid = nr > 16 * h ? std::min<size_t>(16, nr - 16 * h) : 0;
      mask[h] = static_cast<__mmask16>((1u << valid) - 1u);
    }
    // (scale, zero) pairs as dwords [row][group]: rows 16 h .. 16 h + 7 and 16 h + 8 .. 16 h + 15
    // are 8 n_groups <= 32 dwords each, so one two-source permute per group and 8 rows picks a
    // group's column; dwords past the tile's rows load as 0
    const auto* tile_params = reinterpret_cast<const int*>(params + r0 * n_groups);
    const size_t n_dw = nr * n_groups;
    const auto load16 = [&](size_t at) {
      const size_t valid = at < n_dw ? std::min<size_t>(16, n_dw - at) : 0;
      return valid == 0 ? _mm512_setzero_si512()
                        : _mm512_maskz_loadu_epi32(static_cast<__mmask16>((1u << valid) - 1u),
                                                   tile_params + at);
    };
    for (size_t h = 0; h < kQuarters; ++h) {
      const size_t at0 = 16 * h * n_groups, at1 = at0 + 8 * n_groups;
      const __m512i l0 = load16(at0), l1 = load16(at0 + 16);
      const __m512i h0 = load16(at1), h1 = load16(at1 + 16);
      for (size_t g = 0; g < n_groups; ++g) {
        const __m512i d =
            _mm512_mask_blend_epi32(0xFF00, _mm512_permutex2var_epi32(l0, param_idx[g], l1),
                                    _mm512_permutex2var_epi32(h0, param_idx[g], h1));
        scale_t[g][h] = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(d));
        zero_t[g][h] = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(d, 16)));
      }
    }
    // up to 4 queries (a GQA group) at a time: their weights quantized first (independent
    // chains of max, divide and pack that overlap), then their sums (the vpdpbusd stream)
    for (size_t j0 = 0; j0 < n_q; j0 += kQBatch) {
      const size_t nb = std::min(kQBatch, n_q - j0);
      __m512i tabs[kQBatch][kVTile / kSub][2];
      __m512 step_v[kQBatch][4];
      for (size_t jb = 0; jb < nb; ++jb) {
        const size_t j = j0 + jb;
        const float* wj = w + j * w_stride + r0;
        __m512 wr[kQuarters];
        for (size_t h = 0; h < kQuarters; ++h) wr[h] = _mm512_maskz_loadu_ps(mask[h], wj + 16 * h);
        // the steps of the groups in lanes g, kept in registers (scalars stored and read back as a
        // vector stall on store forwarding)
        __m512 steps = _mm512_setzero_ps();
        for (size_t g = 0; g < n_groups; ++g) {
          // the arithmetic of kivi_value_rows_accumulate_q8_scalar
          __m512 u[kQuarters];
          __m512 z = zsum_v[j * n_groups + g], m = _mm512_setzero_ps();
          for (size_t h = 0; h < kQuarters; ++h) {
            u[h] = _mm512_mul_ps(wr[h], scale_t[g][h]);
            z = _mm512_fmadd_ps(wr[h], zero_t[g][h], z);
            m = _mm512_max_ps(m, u[h]);
          }
          zsum_v[j * n_groups + g] = z;
          const float mx = _mm512_reduce_max_ps(m);
          const bool live = mx >= 0x1p-100f;
          steps = _mm512_mask_mov_ps(steps, static_cast<__mmask16>(1u << g),
                                     _mm512_set1_ps(live ? mx * (1.0f / 255.0f) : 0.0f));
          const __m512 inv = _mm512_set1_ps(live ? 255.0f / mx : 0.0f);
          // min(., 255) is the unsigned saturation of the pack below
          for (size_t h = 0; h < kQuarters; ++h) {
            w32[g][h] = _mm512_cvtps_epi32(_mm512_mul_ps(u[h], inv));
          }
        }
        for (int v = 0; v < 4; ++v) {
          step_v[jb][v] = _mm512_permutexvar_ps(_mm512_load_si512(grp_idx[v]), steps);
        }
        for (size_t sub = 0; sub * sub_steps < n_steps; ++sub) {
          // two groups' 32 rows as bytes: dword (lane L, m) of a pair's table holds group
          // 2 p + m / 2, rows 16 (m % 2) + 4 L .. + 3 of the sub-tile (quad 4 (m % 2) + L)
          const auto table = [&](size_t g0) {
            const __m512i a = _mm512_packs_epi32(w32[g0][2 * sub], w32[g0][2 * sub + 1]);
            const __m512i b = _mm512_packs_epi32(w32[g0 + 1][2 * sub], w32[g0 + 1][2 * sub + 1]);
            return _mm512_packus_epi16(a, b);
          };
          tabs[jb][sub][0] = table(0), tabs[jb][sub][1] = table(2);
        }
      }
      for (size_t jb = 0; jb < nb; ++jb) {
        dot_tile(sums_v + (j0 + jb) * kVK, tabs[jb], w_idx, uniq, codes_v, n_steps, sub_steps,
                 step_v[jb]);
      }
    }
  }
  // back to channel order: out[c] += the lanes of channel c (two when pair_rows: lanes l and
  // l + 8; else the second gather is masked off) + zero sum, 16 channels at a time
  for (size_t i = 0; i < 2 * head_dim; ++i) sc.chan[i] = -1;
  for (size_t k = 0; k < kVK; ++k) {
    for (size_t lane = 0; lane < 16; ++lane) {
      const size_t c = value_q8_channel(s, k, lane);
      sc.chan[s.pair_rows && lane >= 8 ? head_dim + c : c] = static_cast<int32_t>(k * 16 + lane);
    }
  }
  // once per call, not per query and channel (an integer division per lane: about 5% of this
  // kernel's samples with the other divisions of the call)
  for (size_t c = 0, g = 0, in_group = 0; c < head_dim; ++c) {
    sc.group_of[c] = static_cast<int32_t>(g);
    if (++in_group == group) g += 1, in_group = 0;
  }
  for (size_t j = 0; j < n_q; ++j) {
    alignas(64) float zero_sum[16] = {};
    for (size_t g = 0; g < n_groups; ++g) {
      zero_sum[g] = _mm512_reduce_add_ps(zsum_v[j * n_groups + g]);
    }
    const __m512 zs = _mm512_load_ps(zero_sum);
    const auto* base = reinterpret_cast<const float*>(sums_v + j * kVK);
    float* oj = out + j * head_dim;
    for (size_t c = 0; c < head_dim; c += 16) {
      const __m512i i0 = _mm512_loadu_si512(sc.chan + c);
      const __m512i i1 = _mm512_loadu_si512(sc.chan + head_dim + c);
      const __mmask16 has1 = _mm512_cmpge_epi32_mask(i1, _mm512_setzero_si512());
      const __m512 v0 = _mm512_i32gather_ps(i0, base, 4);
      const __m512 v1 = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), has1, i1, base, 4);
      const __m512 z = _mm512_permutexvar_ps(_mm512_load_si512(sc.group_of + c), zs);
      _mm512_storeu_ps(
          oj + c, _mm512_add_ps(_mm512_loadu_ps(oj + c), _mm512_add_ps(_mm512_add_ps(v0, v1), z)));
    }
  }
}

bool weights_in_q8_range(const float* w, size_t w_stride, size_t n_q, size_t n_rows) {
  const __m512 lo = _mm512_setzero_ps(), hi = _mm512_set1_ps(0x1p100f);
  for (size_t j = 0; j < n_q; ++j) {
    for (size_t r = 0; r < n_rows; r += 16) {
      const auto m = static_cast<__mmask16>(n_rows - r >= 16 ? 0xFFFFu : (1u << (n_rows - r)) - 1u);
      const __m512 x = _mm512_maskz_loadu_ps(m, w + j * w_stride + r);
      // NaN fails both ordered compares
      const __mmask16 ok =
          _mm512_cmp_ps_mask(x, lo, _CMP_GE_OQ) & _mm512_cmp_ps_mask(x, hi, _CMP_LE_OQ);
      if ((ok & m) != m) return false;
    }
  }
  return true;
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
  if (bits == 2 && head_dim % Q8Shape<2>::kChannels == 0) {  // one int8 part (kivi_kernels.h)
    key_block_q8_one<2>(out, out_stride, q, n_q, scales, zeros, words, n_rows, head_dim, scratch);
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

bool kivi_value_q8_handles(size_t head_dim, size_t group, int bits) {
#if SNAPKV_KIVI_VNNI
  ValueQ8Shape s;
  return value_q8_shape(s, head_dim, group, bits);
#else
  (void)head_dim, (void)group, (void)bits;
  return false;
#endif
}

bool kivi_value_rows_accumulate_q8(float* out, const float* w, size_t w_stride, size_t n_q,
                                   const uint8_t* codes, const KiviParams* params, size_t n_rows,
                                   size_t head_dim, size_t group, int bits) {
#if SNAPKV_KIVI_VNNI
  ValueQ8Shape s;
  if (!value_q8_shape(s, head_dim, group, bits) || !weights_in_q8_range(w, w_stride, n_q, n_rows)) {
    return false;
  }
  value_rows_q8(out, w, w_stride, n_q, codes, params, n_rows, head_dim, group, s);
  return true;
#else
  (void)out, (void)w, (void)w_stride, (void)n_q, (void)codes, (void)params, (void)n_rows;
  (void)head_dim, (void)group, (void)bits;
  return false;
#endif
}

}  // namespace snapkv::SNAPKV_ISA
