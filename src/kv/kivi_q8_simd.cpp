// KIVI key scores with integer dot products on the packed codes (see kivi_kernels.h,
// kivi_key_block_dot_q8_scalar for the arithmetic), compiled once per ISA level (util/isa.h); the
// levels with AVX-512 VNNI run vpdpbusd (u8 codes x s8 query), the others report "not handled"
// and keep the float kernels of kivi_simd.cpp. The 2-bit value kernel (u8 weights x codes) is in
// kivi_q8_values_simd.cpp.
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

// A query pair's row sums (lanes 0-7: the first query's rows, 8-15: the second's) from the two
// groups a, b of its accumulators, through the reduction tables' picks.
template <int Bits>
inline __m512i pair_row_sums(const Q8Tables<Bits>& t, __m512i a, __m512i b) {
  __m512i r = _mm512_permutex2var_epi32(a, _mm512_load_si512(t.pick[0]), b);
  for (int qd = 1; qd < Q8Shape<Bits>::kQ; ++qd) {
    r = _mm512_add_epi32(r, _mm512_permutex2var_epi32(a, _mm512_load_si512(t.pick[qd]), b));
  }
  return r;
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
template <int NP, int Bits, bool OnePart = false>
void key_block_q8_pairs(float* out, size_t out_stride, size_t nq, const __m512i* ops,
                        const float* step, const float* step2, const float* qz,
                        const uint8_t* words, size_t n_rows, size_t head_dim) {
  using S = Q8Shape<Bits>;
  static_assert(!OnePart || NP == 1, "one part: four queries, one operand set each");
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
  // per pair of queries (one part: the two pairs of the four queries) their step, step2, qz
  constexpr int kQueryPairs = OnePart ? 2 : NP;
  __m512 sv[kQueryPairs], s2v[kQueryPairs], zv[kQueryPairs];
  for (int p = 0; p < kQueryPairs; ++p) {
    const auto pair = [p](const float* x) {
      return _mm512_insertf32x8(_mm512_set1_ps(x[2 * p]), _mm256_set1_ps(x[2 * p + 1]), 1);
    };
    sv[p] = pair(step), zv[p] = pair(qz);
    if constexpr (!OnePart) s2v[p] = pair(step2);
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
    for (int p = 0; p < kQueryPairs; ++p) {
      __m512 res;
      if constexpr (OnePart) {  // queries 2 p (low half) and 2 p + 1 (high half)
        const __m512i a = g[p * kPerPair], b = g[p * kPerPair + kPerPair - 1];
        res = _mm512_fmadd_ps(_mm512_cvtepi32_ps(pair_row_sums<Bits>(t, a, b)), sv[p], zv[p]);
      } else {
        // rows[h]: operand sets 4 p + 2 h, 4 p + 2 h + 1 (h = 0: hi of both queries, 1: lo)
        __m512 rows[2];
        for (int h = 0; h < 2; ++h) {
          const int m = 2 * p + h;
          const __m512i a = g[m * kPerPair], b = g[m * kPerPair + kPerPair - 1];
          rows[h] = _mm512_cvtepi32_ps(pair_row_sums<Bits>(t, a, b));
        }
        res = _mm512_fmadd_ps(rows[1], s2v[p], _mm512_fmadd_ps(rows[0], sv[p], zv[p]));
      }
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
// That is key_block_q8_pairs<1, Bits, true>: the accumulators of (i, query f) are acc[f * P + i],
// the four operand sets being the four queries.
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
    key_block_q8_pairs<1, Bits, true>(out + j0 * out_stride, out_stride, nq, ops, step, nullptr, qz,
                                      words, n_rows, head_dim);
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

}  // namespace snapkv::SNAPKV_ISA
