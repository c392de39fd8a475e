// KIVI key scores with integer dot products on the packed codes (see kivi_kernels.h,
// kivi_key_block_dot_q8_scalar for the arithmetic), compiled once per ISA level (util/isa.h); the
// levels with AVX-512 VNNI run vpdpbusd (u8 codes x s8 query), the others report "not handled"
// and keep the float kernels of kivi_keys_simd.cpp. The 2-bit value kernel (u8 weights x codes) is
// in kivi_q8_values_simd.cpp.
//
// Within a key block every channel c has one scale s_c and zero z_c, so
//   q . k_r = sum_c (q_c s_c) code(r, c) + sum_c q_c z_c.
// q' = q o s is quantized per query and block to a pair of int8 vectors for 4-bit codes, q' ~
// step * hi + step2 * lo (step = max |q'| / 127, step2 = step / 254: about 15 bits, as a single
// int8 vector lost up to 5% of a logit on keys with outlier channels), and the first sum becomes
// step * sum_c hi_c code(r, c) + step2 * sum_c lo_c code(r, c), both sums exact in int32. 2-bit
// codes take hi alone (kivi_kernels.h: its rounding is a few percent of the 2-bit codec's own
// error). The four queries of a GQA group are prepared together (shared parameter loads, one
// transposed reduction for their four maxima and zero terms) and share each masked code vector.
//
// Layout of a key block (include/snapkv/kv/codecs/kivi.h): per octet of 8 rows, one word per
// channel holding the 8 rows' codes, W = bits bytes per word, P = 8 / bits codes per byte (row h *
// P + i sits in byte h at bits bits * i). The kernels take 4 octets (32 rows) at a time and one
// channel quad (4 channels) per code vector: a byte shuffle makes every dword hold byte h of the
// quad's 4 channels in one octet, so masking bits (bits * i) .. leaves in each dword one row's
// codes of those 4 channels (times 2^(bits i)), and vpdpbusd against the quad's 4 query bytes
// (broadcast from memory) adds that row's part of the dot product into the dword. Every dword of
// an accumulator therefore stays one row for the whole channel walk: no reduction across lanes,
// only a shift, an interleave of the P accumulators into row order and the conversion at the end.
// 2-bit: 8 dwords (4 octets x 2 bytes) per 256-bit vector, row 4 k + i in dword k of accumulator
// i; 4-bit: 16 dwords (4 octets x 4 bytes) per 512-bit vector, row 2 k + i.
// The decode case of 2-bit keys (4 queries, runs of blocks) prepares two blocks at once
// (prepare_pair) and puts both quads of 8 channels in one 512-bit vector (key_block_2bit_pair).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kv/codecs/kivi/kivi_kernels.h"
#include "util/isa.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__) && \
    defined(__AVX512VL__) && defined(__AVX512DQ__)
// GCC 12's AVX-512 intrinsics start from _mm512_undefined_*(), a self-initialised variable that
// -W(maybe-)uninitialized reports wherever they inline; silenced for the header's lines only.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
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

constexpr size_t kRowsPerPass = 32;  // 4 octets
// Passes ahead whose code words the kernels prefetch, one line per channel step: the words of
// a store's blocks follow each other, so this runs into the next blocks (a prefetch past the
// end of the words is harmless: it never faults; the address is formed as an integer); spread
// over the loop, unlike a burst per block.
constexpr size_t kPrefetchPasses = 4;

// The loops over accumulators must unroll completely, or the accumulators live in memory.
#if defined(__clang__)
#define SNAPKV_UNROLL _Pragma("unroll")
#elif defined(__GNUC__)
#define SNAPKV_UNROLL _Pragma("GCC unroll 16")
#else
#define SNAPKV_UNROLL
#endif
// The kernels stay out of line: inlined beside the query preparation, GCC 12 kept their
// accumulators in memory.
#if defined(__GNUC__)
#define SNAPKV_NOINLINE __attribute__((noinline))
#else
#define SNAPKV_NOINLINE
#endif

// acc += vpdpbusd(u8 a, s8 b), in place: GCC 12 copies every accumulator of the intrinsic into a
// fresh register and back around each instruction; the asm ties the accumulator to its register.
template <typename V>
inline void dpbusd(V& acc, V a, V b) {
#if defined(__GNUC__)
  __asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b));
#else
  if constexpr (sizeof(V) == 32) {
    acc = _mm256_dpbusd_epi32(acc, a, b);
  } else {
    acc = _mm512_dpbusd_epi32(acc, a, b);
  }
#endif
}

// The 4 bytes at p as one int32 (to broadcast: one load per query and channel quad, reused by
// every masked code vector of the quad).
inline int32_t load_i32(const int8_t* p) {
  int32_t x;
  std::memcpy(&x, p, 4);
  return x;
}

// Lane k (k < 4) of the result: the total of v[k] under op (max or add); v[k] for k >= n are
// taken as zero. One transposed tree for the four vectors.
template <typename Op>
inline __m128 totals4(const __m512* v, Op op) {
  const __m512 a =
      op(_mm512_shuffle_f32x4(v[0], v[1], 0x44), _mm512_shuffle_f32x4(v[0], v[1], 0xEE));
  const __m512 b =
      op(_mm512_shuffle_f32x4(v[2], v[3], 0x44), _mm512_shuffle_f32x4(v[2], v[3], 0xEE));
  // 128-bit lane k: two partial quarters of v[k]
  __m512 c = op(_mm512_shuffle_f32x4(a, b, 0x88), _mm512_shuffle_f32x4(a, b, 0xDD));
  c = op(c, _mm512_permute_ps(c, 0x4E));
  c = op(c, _mm512_permute_ps(c, 0xB1));  // every float of lane k: v[k]'s total
  return _mm512_castps512_ps128(
      _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), c));
}

// The query side of a pass over up to 4 queries (kivi_key_block_dot_q8_scalar): per query j its
// step, step2, qz, and the int8 parts of q', interleaved so that one pointer serves every
// multiply of a channel quad: per 16 channels (chunk) Parts vectors of 64 bytes (hi, then lo),
// dword 4 n + j of one holding quad n of the chunk for query j (the order packs_epi32 and
// packs_epi16 leave; absent queries are 0). Quad g's operands: ops + quad_offset<Parts>(g) +
// 64 part + 4 j.
struct QueryParams {
  alignas(16) float step[4], step2[4], qz[4], inv[4], inv2[4];
};
template <int Parts>
constexpr size_t quad_offset(size_t g) {
  return g / 4 * 64 * Parts + g % 4 * 16;
}

// A block's per-channel scales and zeros, 16 channels at a time: fp32 arrays, or the block's
// fp16 params as stored ([scales][zeros], converted exactly on load).
struct F32Params {
  const float* scales;
  const float* zeros;
  __m512 scale(size_t c) const { return _mm512_loadu_ps(scales + c); }
  __m512 zero(size_t c) const { return _mm512_loadu_ps(zeros + c); }
};
struct F16Params {
  const fp16_t* params;
  size_t head_dim;
  __m512 scale(size_t c) const {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(params + c)));
  }
  __m512 zero(size_t c) const {
    return _mm512_cvtph_ps(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(params + head_dim + c)));
  }
};

// qs_buf: [4][head_dim] 64-byte aligned scratch that keeps q' between the two passes (the
// second reads it back instead of converting the scales and multiplying again).
template <int Parts, int NQ, typename Params>
void prepare_queries(int8_t* ops, float* qs_buf, QueryParams& qp, const float* q, size_t nq,
                     const Params& params, size_t head_dim) {
  // two partial maxima and zero sums per query (even / odd chunks): shorter dependency chains
  __m512 mx[2][4], z[2][4];
  SNAPKV_UNROLL
  for (int j = 0; j < 4; ++j) mx[0][j] = mx[1][j] = z[0][j] = z[1][j] = _mm512_setzero_ps();
  const auto chunk = [&](size_t c, __m512* m, __m512* zs) {
    const __m512 s = params.scale(c), zr = params.zero(c);
    SNAPKV_UNROLL
    for (int j = 0; j < NQ; ++j) {
      if (static_cast<size_t>(j) >= nq) continue;
      const __m512 qv = _mm512_loadu_ps(q + j * head_dim + c);
      const __m512 qs = _mm512_mul_ps(qv, s);
      _mm512_store_ps(qs_buf + j * head_dim + c, qs);
      m[j] = _mm512_range_ps(m[j], qs, 0x0B);  // max |.|, sign cleared
      zs[j] = _mm512_fmadd_ps(qv, zr, zs[j]);
    }
  };
  size_t c1 = 0;
  for (; c1 + 32 <= head_dim; c1 += 32) {
    chunk(c1, mx[0], z[0]);
    chunk(c1 + 16, mx[1], z[1]);
  }
  if (c1 < head_dim) chunk(c1, mx[0], z[0]);
  SNAPKV_UNROLL
  for (int j = 0; j < 4; ++j) {
    mx[0][j] = _mm512_max_ps(mx[0][j], mx[1][j]);
    z[0][j] = _mm512_add_ps(z[0][j], z[1][j]);
  }
  const __m128 m = totals4(mx[0], [](__m512 a, __m512 b) { return _mm512_max_ps(a, b); });
  const __m128 step = _mm_div_ps(m, _mm_set1_ps(127.0f));
  const __m128 zero = _mm_setzero_ps();
  _mm_store_ps(qp.step, step);
  if constexpr (Parts == 2) _mm_store_ps(qp.step2, _mm_div_ps(step, _mm_set1_ps(254.0f)));
  _mm_store_ps(qp.qz, totals4(z[0], [](__m512 a, __m512 b) { return _mm512_add_ps(a, b); }));
  _mm_store_ps(qp.inv,
               _mm_mask_div_ps(zero, _mm_cmp_ps_mask(m, zero, _CMP_GT_OQ), _mm_set1_ps(127.0f), m));
  if constexpr (Parts == 2) {
    _mm_store_ps(qp.inv2,
                 _mm_mask_div_ps(zero, _mm_cmp_ps_mask(step, _mm_set1_ps(0x1p-100f), _CMP_GE_OQ),
                                 _mm_set1_ps(254.0f), step));
  }
  __m512 inv[4], inv2[4], sv[4];
  SNAPKV_UNROLL
  for (int j = 0; j < 4; ++j) {
    inv[j] = _mm512_set1_ps(qp.inv[j]);
    if constexpr (Parts == 2)
      inv2[j] = _mm512_set1_ps(qp.inv2[j]), sv[j] = _mm512_set1_ps(qp.step[j]);
  }
  for (size_t c = 0; c < head_dim; c += 16) {
    __m512i hi[4], lo[4];
    SNAPKV_UNROLL
    for (int j = 0; j < 4; ++j) {
      hi[j] = lo[j] = _mm512_setzero_si512();
      if (j >= NQ || static_cast<size_t>(j) >= nq) continue;
      const __m512 qs = _mm512_load_ps(qs_buf + j * head_dim + c);
      hi[j] = _mm512_cvtps_epi32(_mm512_mul_ps(qs, inv[j]));
      if constexpr (Parts == 2) {
        // the residual q' - step * hi, |.| <= step / 2 (up to rounding), in steps of step2
        const __m512 r = _mm512_fnmadd_ps(sv[j], _mm512_cvtepi32_ps(hi[j]), qs);
        lo[j] = _mm512_cvtps_epi32(_mm512_mul_ps(r, inv2[j]));
      }
    }
    const auto pack = [](const __m512i* x) {
      return _mm512_packs_epi16(_mm512_packs_epi32(x[0], x[1]), _mm512_packs_epi32(x[2], x[3]));
    };
    int8_t* dst = ops + c / 16 * 64 * Parts;
    _mm512_store_si512(dst, pack(hi));
    if constexpr (Parts == 2) _mm512_store_si512(dst + 64, pack(lo));
  }
}

// prepare_queries<1, 4> for two blocks at once (the decode case of 2-bit keys, 4 queries):
// both blocks' chains (param loads, q', maxima, zero sums, the reductions and divisions) are in
// flight together, so their latency, which the dot loop after them cannot hide, is paid once per
// two blocks, and the loads of q serve both. The arithmetic is prepare_queries' own (the same
// even / odd zero sums and trees; the maxima are exact in any order), so the operands are bit for
// bit those of two calls. The preparation competes with the dot loops for the multiply pipes, so
// its stores and multiplies are balanced: q' of the first block is kept in qs_buf ([4][head_dim]
// floats, 64-byte aligned), the second block's is recomputed in the quantizing pass (alternated
// A/B, one thread, 16K rows, key half: keeping both 3.5% slower, recomputing both 3% slower). The
// operands are stored in key_block_2bit_pair's order: per chunk of 16 channels, qword 4 p + j
// holds quads 2 p, 2 p + 1 of query j. ops: [2][head_dim / 16][64] bytes, qp: [2].
template <typename Params>
void prepare_pair(int8_t* ops, float* qs_buf, QueryParams* qp, const float* q, const Params& p0,
                  const Params& p1, size_t head_dim) {
  __m512 mx[2][4], z[2][2][4];  // [block][query], [block][even / odd chunks][query]
  SNAPKV_UNROLL
  for (int j = 0; j < 4; ++j) {
    mx[0][j] = mx[1][j] = _mm512_setzero_ps();
    z[0][0][j] = z[0][1][j] = z[1][0][j] = z[1][1][j] = _mm512_setzero_ps();
  }
  const auto chunk = [&](size_t c, int par) {
    const __m512 s0 = p0.scale(c), s1 = p1.scale(c), zr0 = p0.zero(c), zr1 = p1.zero(c);
    SNAPKV_UNROLL
    for (int j = 0; j < 4; ++j) {
      const __m512 qv = _mm512_loadu_ps(q + j * head_dim + c);
      const __m512 a = _mm512_mul_ps(qv, s0);
      _mm512_store_ps(qs_buf + j * head_dim + c, a);
      mx[0][j] = _mm512_range_ps(mx[0][j], a, 0x0B);
      mx[1][j] = _mm512_range_ps(mx[1][j], _mm512_mul_ps(qv, s1), 0x0B);
      z[0][par][j] = _mm512_fmadd_ps(qv, zr0, z[0][par][j]);
      z[1][par][j] = _mm512_fmadd_ps(qv, zr1, z[1][par][j]);
    }
  };
  size_t c1 = 0;
  for (; c1 + 32 <= head_dim; c1 += 32) {
    chunk(c1, 0);
    chunk(c1 + 16, 1);
  }
  if (c1 < head_dim) chunk(c1, 0);
  __m512 inv[2][4];
  SNAPKV_UNROLL
  for (int b = 0; b < 2; ++b) {
    SNAPKV_UNROLL
    for (int j = 0; j < 4; ++j) z[b][0][j] = _mm512_add_ps(z[b][0][j], z[b][1][j]);
    const __m128 m = totals4(mx[b], [](__m512 a, __m512 x) { return _mm512_max_ps(a, x); });
    const __m128 zero = _mm_setzero_ps();
    _mm_store_ps(qp[b].step, _mm_div_ps(m, _mm_set1_ps(127.0f)));
    _mm_store_ps(qp[b].qz,
                 totals4(z[b][0], [](__m512 a, __m512 x) { return _mm512_add_ps(a, x); }));
    const __m128 iv =
        _mm_mask_div_ps(zero, _mm_cmp_ps_mask(m, zero, _CMP_GT_OQ), _mm_set1_ps(127.0f), m);
    _mm_store_ps(qp[b].inv, iv);
    const __m512 iv4 = _mm512_broadcast_f32x4(iv);
    inv[b][0] = _mm512_permute_ps(iv4, 0x00);  // immediates: clang wants literal constants
    inv[b][1] = _mm512_permute_ps(iv4, 0x55);
    inv[b][2] = _mm512_permute_ps(iv4, 0xAA);
    inv[b][3] = _mm512_permute_ps(iv4, 0xFF);
  }
  const auto pack = [](const __m512i* x) {
    return _mm512_packs_epi16(_mm512_packs_epi32(x[0], x[1]), _mm512_packs_epi32(x[2], x[3]));
  };
  // dword 4 n + j (quad n, query j; pack's order) -> 8 p + 2 j + n' (quad 2 p + n')
  const __m512i pair_order =
      _mm512_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7, 8, 12, 9, 13, 10, 14, 11, 15);
  for (size_t c = 0; c < head_dim; c += 16) {
    const __m512 s1 = p1.scale(c);
    __m512i hi0[4], hi1[4];
    SNAPKV_UNROLL
    for (int j = 0; j < 4; ++j) {
      const __m512 qv = _mm512_loadu_ps(q + j * head_dim + c);
      hi0[j] =
          _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_load_ps(qs_buf + j * head_dim + c), inv[0][j]));
      hi1[j] = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_mul_ps(qv, s1), inv[1][j]));
    }
    _mm512_store_si512(ops + c / 16 * 64, _mm512_permutexvar_epi32(pair_order, pack(hi0)));
    _mm512_store_si512(ops + head_dim / 16 * 64 + c / 16 * 64,
                       _mm512_permutexvar_epi32(pair_order, pack(hi1)));
  }
}

// The octet addresses of a pass over rows r0 .. r0 + 31 (octets past the block repeat its last
// one; their rows are never stored) and the store masks of its two halves of 16 rows.
struct Pass {
  const uint8_t* oct[4];
  __mmask16 mask[2];
  Pass(const uint8_t* words, size_t oct_bytes, size_t r0, size_t n_rows) {
    const size_t n_oct = (n_rows + 7) / 8;
    for (size_t o = 0; o < 4; ++o) oct[o] = words + std::min(r0 / 8 + o, n_oct - 1) * oct_bytes;
    const size_t valid = std::min(kRowsPerPass, n_rows - r0);
    mask[0] = static_cast<__mmask16>(valid >= 16 ? 0xFFFFu : (1u << valid) - 1u);
    mask[1] = static_cast<__mmask16>(valid >= 32  ? 0xFFFFu
                                     : valid > 16 ? (1u << (valid - 16)) - 1u
                                                  : 0u);
  }
};

// Bytes 16 step .. 16 step + 15 of the pass's 4 octets in the 4 lanes of one vector (lane o:
// octet o), after a prefetch of one line of the words kPrefetchPasses passes ahead (a step per
// line: spread over the loop, not a burst per block).
inline __m512i octet_lanes(const Pass& pass, size_t oct_bytes, size_t step) {
  _mm_prefetch(reinterpret_cast<const char*>(reinterpret_cast<uintptr_t>(pass.oct[0]) +
                                             kPrefetchPasses * 4 * oct_bytes + 64 * step),
               _MM_HINT_T0);
  const auto lane = [step](const uint8_t* p) {
    return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 * step));
  };
  __m512i x = _mm512_castsi128_si512(lane(pass.oct[0]));
  x = _mm512_inserti32x4(x, lane(pass.oct[1]), 1);
  x = _mm512_inserti32x4(x, lane(pass.oct[2]), 2);
  return _mm512_inserti32x4(x, lane(pass.oct[3]), 3);
}

// 2-bit keys, one int8 part, NQ queries (1, 2 or 4; absent ones have zero operands).
template <int NQ>
SNAPKV_NOINLINE void key_block_2bit(float* out, size_t out_stride, size_t nq, const int8_t* ops,
                                    const QueryParams& qp, const uint8_t* words, size_t n_rows,
                                    size_t head_dim) {
  const size_t oct_bytes = 2 * head_dim;
  // in a lane of 8 channels (channel c, byte h at 2 c + h): qword n <- quad n, dword h of it <-
  // byte h of its 4 channels
  const __m256i shuffle = _mm256_setr_epi8(0, 2, 4, 6, 1, 3, 5, 7, 8, 10, 12, 14, 9, 11, 13, 15, 0,
                                           2, 4, 6, 1, 3, 5, 7, 8, 10, 12, 14, 9, 11, 13, 15);
  // row p of a half of 16 rows (row 4 k + i) <- dword k of accumulator i (pairs of accumulators
  // joined: i * 8 + k), shifted back by 2 i
  const __m512i pick[2] = {
      _mm512_setr_epi32(0, 8, 16, 24, 1, 9, 17, 25, 2, 10, 18, 26, 3, 11, 19, 27),
      _mm512_setr_epi32(4, 12, 20, 28, 5, 13, 21, 29, 6, 14, 22, 30, 7, 15, 23, 31)};
  const __m512i shifts = _mm512_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6, 0, 2, 4, 6, 0, 2, 4, 6);
  for (size_t r0 = 0; r0 < n_rows; r0 += kRowsPerPass) {
    const Pass pass(words, oct_bytes, r0, n_rows);
    __m256i acc[4 * NQ];  // [i][query]
    SNAPKV_UNROLL
    for (int i = 0; i < 4; ++i) {
      SNAPKV_UNROLL
      for (int f = 0; f < NQ; ++f) acc[i * NQ + f] = _mm256_setzero_si256();
    }
    for (size_t t = 0; t < head_dim / 8; ++t) {  // 8 channels: quads 2 t, 2 t + 1
      // one line of the words kPrefetchPasses passes ahead per iteration (a pass is 16 lines at
      // head_dim 128)
      _mm_prefetch(reinterpret_cast<const char*>(reinterpret_cast<uintptr_t>(pass.oct[0]) +
                                                 kPrefetchPasses * 4 * oct_bytes + 64 * t),
                   _MM_HINT_T0);
      const auto join = [t](const uint8_t* lo, const uint8_t* hi) {
        return _mm256_inserti128_si256(
            _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(lo + 16 * t))),
            _mm_loadu_si128(reinterpret_cast<const __m128i*>(hi + 16 * t)), 1);
      };
      const __m256i a = _mm256_shuffle_epi8(join(pass.oct[0], pass.oct[2]), shuffle);
      const __m256i b = _mm256_shuffle_epi8(join(pass.oct[1], pass.oct[3]), shuffle);
      // dword k = 2 o + h of quad n: byte h of octet o (rows 8 o + 4 h + i)
      const __m256i x[2] = {_mm256_unpacklo_epi64(a, b), _mm256_unpackhi_epi64(a, b)};
      SNAPKV_UNROLL
      for (int n = 0; n < 2; ++n) {
        const int8_t* qb = ops + quad_offset<1>(2 * t + n);
        __m256i qv[NQ];
        SNAPKV_UNROLL
        for (int f = 0; f < NQ; ++f) qv[f] = _mm256_set1_epi32(load_i32(qb + 4 * f));
        SNAPKV_UNROLL
        for (int i = 0; i < 4; ++i) {
          const __m256i m =
              _mm256_and_si256(x[n], _mm256_set1_epi8(static_cast<char>(3 << (2 * i))));
          SNAPKV_UNROLL
          for (int f = 0; f < NQ; ++f) dpbusd(acc[i * NQ + f], m, qv[f]);
        }
      }
    }
    SNAPKV_UNROLL
    for (int f = 0; f < NQ; ++f) {
      if (static_cast<size_t>(f) >= nq) continue;
      const __m512i a01 = _mm512_inserti64x4(_mm512_castsi256_si512(acc[f]), acc[NQ + f], 1);
      const __m512i a23 =
          _mm512_inserti64x4(_mm512_castsi256_si512(acc[2 * NQ + f]), acc[3 * NQ + f], 1);
      const __m512 sv = _mm512_set1_ps(qp.step[f]), zv = _mm512_set1_ps(qp.qz[f]);
      SNAPKV_UNROLL
      for (int h = 0; h < 2; ++h) {
        const __m512i rows =
            _mm512_srav_epi32(_mm512_permutex2var_epi32(a01, pick[h], a23), shifts);
        _mm512_mask_storeu_ps(out + f * out_stride + r0 + 16 * h, pass.mask[h],
                              _mm512_fmadd_ps(_mm512_cvtepi32_ps(rows), sv, zv));
      }
    }
  }
}

// 2-bit keys, 4 queries, 512-bit vectors (the decode pairs: prepare_pair's operand order): per 8
// channels (step t) one code vector holds both quads, lane o = octet o, dword 4 o + 2 h + n <-
// byte h of quad n's 4 channels, against a query operand with quad 2 t in the even and 2 t + 1 in
// the odd dwords (one qword broadcast). Each accumulator dword is then one row slot (k = 2 o + h,
// row 4 k + i) and quad parity; the two parities are added (exact in int32) at the end, which
// leaves the sums of key_block_2bit.
SNAPKV_NOINLINE void key_block_2bit_pair(float* out, size_t out_stride, const int8_t* ops,
                                         const QueryParams& qp, const uint8_t* words, size_t n_rows,
                                         size_t head_dim) {
  const size_t oct_bytes = 2 * head_dim;
  const __m512i shuffle =
      _mm512_broadcast_i32x4(_mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15));
  // row p of a half of 16 rows (row 4 k + i) <- slot k of accumulator i in the joined pairs
  // (joined: 128-bit lane l of a pair holds slots 2 l, 2 l + 1 of its first accumulator, then of
  // its second; the second pair at 16 ..)
  const __m512i pick[2] = {
      _mm512_setr_epi32(0, 2, 16, 18, 1, 3, 17, 19, 4, 6, 20, 22, 5, 7, 21, 23),
      _mm512_setr_epi32(8, 10, 24, 26, 9, 11, 25, 27, 12, 14, 28, 30, 13, 15, 29, 31)};
  const __m512i shifts = _mm512_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6, 0, 2, 4, 6, 0, 2, 4, 6);
  for (size_t r0 = 0; r0 < n_rows; r0 += kRowsPerPass) {
    const Pass pass(words, oct_bytes, r0, n_rows);
    __m512i acc[16];  // [i][query]
    SNAPKV_UNROLL
    for (int a = 0; a < 16; ++a) acc[a] = _mm512_setzero_si512();
    for (size_t t = 0; t < head_dim / 8; ++t) {
      const __m512i x = _mm512_shuffle_epi8(octet_lanes(pass, oct_bytes, t), shuffle);
      const int8_t* qb = ops + t / 2 * 64 + t % 2 * 32;
      __m512i qv[4];
      SNAPKV_UNROLL
      for (int f = 0; f < 4; ++f) {
        int64_t w;
        std::memcpy(&w, qb + 8 * f, 8);
        qv[f] = _mm512_set1_epi64(w);
      }
      SNAPKV_UNROLL
      for (int i = 0; i < 4; ++i) {
        const __m512i m = _mm512_and_si512(x, _mm512_set1_epi8(static_cast<char>(3 << (2 * i))));
        SNAPKV_UNROLL
        for (int f = 0; f < 4; ++f) dpbusd(acc[i * 4 + f], m, qv[f]);
      }
    }
    SNAPKV_UNROLL
    for (int f = 0; f < 4; ++f) {
      // the two quad parities of each slot added (in-lane shuffles of the even and odd dwords)
      const auto join = [](__m512i a, __m512i b) {
        const __m512 fa = _mm512_castsi512_ps(a), fb = _mm512_castsi512_ps(b);
        return _mm512_add_epi32(_mm512_castps_si512(_mm512_shuffle_ps(fa, fb, 0x88)),
                                _mm512_castps_si512(_mm512_shuffle_ps(fa, fb, 0xDD)));
      };
      const __m512i a01 = join(acc[f], acc[4 + f]), a23 = join(acc[8 + f], acc[12 + f]);
      const __m512 sv = _mm512_set1_ps(qp.step[f]), zv = _mm512_set1_ps(qp.qz[f]);
      SNAPKV_UNROLL
      for (int h = 0; h < 2; ++h) {
        const __m512i rows =
            _mm512_srav_epi32(_mm512_permutex2var_epi32(a01, pick[h], a23), shifts);
        _mm512_mask_storeu_ps(out + f * out_stride + r0 + 16 * h, pass.mask[h],
                              _mm512_fmadd_ps(_mm512_cvtepi32_ps(rows), sv, zv));
      }
    }
  }
}

// 4-bit keys, two int8 parts (hi and lo, prepare_queries), NQ queries.
template <int NQ>
SNAPKV_NOINLINE void key_block_4bit(float* out, size_t out_stride, size_t nq, const int8_t* ops,
                                    const QueryParams& qp, const uint8_t* words, size_t n_rows,
                                    size_t head_dim) {
  const size_t oct_bytes = 4 * head_dim;
  // in a lane of one quad (channel c, byte h at 4 c + h): dword h <- byte h of the 4 channels
  const __m512i shuffle =
      _mm512_broadcast_i32x4(_mm_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15));
  // row p of a half of 16 rows (row 2 k + i) <- dword k of accumulator i (i * 16 + k)
  const __m512i pick[2] = {
      _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23),
      _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31)};
  for (size_t r0 = 0; r0 < n_rows; r0 += kRowsPerPass) {
    const Pass pass(words, oct_bytes, r0, n_rows);
    __m512i acc[4 * NQ];  // [i][query][part]
    SNAPKV_UNROLL
    for (int i = 0; i < 2; ++i) {
      SNAPKV_UNROLL
      for (int f = 0; f < NQ; ++f)
        acc[2 * (i * NQ + f)] = acc[2 * (i * NQ + f) + 1] = _mm512_setzero_si512();
    }
    for (size_t g = 0; g < head_dim / 4; ++g) {
      // dword k = 4 o + h: byte h of octet o (rows 8 o + 2 h + i)
      const __m512i x = _mm512_shuffle_epi8(octet_lanes(pass, oct_bytes, g), shuffle);
      const int8_t* qb = ops + quad_offset<2>(g);
      __m512i qv[2 * NQ];  // [query][part]
      SNAPKV_UNROLL
      for (int f = 0; f < NQ; ++f) {
        qv[2 * f] = _mm512_set1_epi32(load_i32(qb + 4 * f));
        qv[2 * f + 1] = _mm512_set1_epi32(load_i32(qb + 64 + 4 * f));
      }
      SNAPKV_UNROLL
      for (int i = 0; i < 2; ++i) {
        const __m512i m = _mm512_and_si512(x, _mm512_set1_epi8(static_cast<char>(15 << (4 * i))));
        SNAPKV_UNROLL
        for (int f = 0; f < NQ; ++f) {
          dpbusd(acc[2 * (i * NQ + f)], m, qv[2 * f]);
          dpbusd(acc[2 * (i * NQ + f) + 1], m, qv[2 * f + 1]);
        }
      }
    }
    SNAPKV_UNROLL
    for (int f = 0; f < NQ; ++f) {
      if (static_cast<size_t>(f) >= nq) continue;
      const __m512 sv = _mm512_set1_ps(qp.step[f]), s2v = _mm512_set1_ps(qp.step2[f]);
      const __m512 zv = _mm512_set1_ps(qp.qz[f]);
      __m512 res[2];
      SNAPKV_UNROLL
      for (int i = 0; i < 2; ++i) {
        const __m512 hi = _mm512_cvtepi32_ps(_mm512_srai_epi32(acc[2 * (i * NQ + f)], 4 * i));
        const __m512 lo = _mm512_cvtepi32_ps(_mm512_srai_epi32(acc[2 * (i * NQ + f) + 1], 4 * i));
        res[i] = _mm512_fmadd_ps(lo, s2v, _mm512_fmadd_ps(hi, sv, zv));
      }
      SNAPKV_UNROLL
      for (int h = 0; h < 2; ++h) {
        _mm512_mask_storeu_ps(out + f * out_stride + r0 + 16 * h, pass.mask[h],
                              _mm512_permutex2var_ps(res[0], pick[h], res[1]));
      }
    }
  }
}

template <int Bits, typename Params>
void key_block_q8(float* out, size_t out_stride, const float* q, size_t n_q, const Params& params,
                  const uint8_t* words, size_t n_rows, size_t head_dim, float* scratch) {
  constexpr int kParts = Bits == 4 ? 2 : 1;
  // scratch (64-byte aligned): int8 operands [head_dim / 16][kParts][64], then q' [4][head_dim]
  // (prepare_queries): at most 15 + (kParts + 4) * head_dim floats, within
  // kivi_key_scratch_floats
  auto* ops = reinterpret_cast<int8_t*>((reinterpret_cast<uintptr_t>(scratch) + 63) &
                                        ~static_cast<uintptr_t>(63));
  float* qs_buf = reinterpret_cast<float*>(ops + head_dim / 16 * 64 * kParts);
  for (size_t j0 = 0; j0 < n_q; j0 += 4) {
    const size_t nq = std::min<size_t>(4, n_q - j0);
    float* o = out + j0 * out_stride;
    const auto run = [&](auto nq_tag) {
      constexpr int kNq = decltype(nq_tag)::value;
      QueryParams qp;
      prepare_queries<kParts, kNq>(ops, qs_buf, qp, q + j0 * head_dim, nq, params, head_dim);
      if constexpr (Bits == 2) {
        key_block_2bit<kNq>(o, out_stride, nq, ops, qp, words, n_rows, head_dim);
      } else {
        key_block_4bit<kNq>(o, out_stride, nq, ops, qp, words, n_rows, head_dim);
      }
    };
    if (nq == 1) {
      run(std::integral_constant<int, 1>{});
    } else if (nq == 2) {
      run(std::integral_constant<int, 2>{});
    } else {
      run(std::integral_constant<int, 4>{});
    }
  }
}

// Blocks ahead whose params key_span_q8 prefetches (as kivi_key_store.cpp did per block; the
// kernels prefetch the words), past the call's blocks too: a store's blocks follow each other, so
// a span's last blocks request the next span's first params (prefetches never fault; past the
// store's end they fetch kPrefetchBlocks blocks' worth of unused lines). Stopped at the call's
// end, every span's first blocks loaded their params from memory on demand.
constexpr size_t kPrefetchBlocks = 4;
// Prefetches one block's params (2 head_dim fp16) into L1 (addresses as integers: past the
// blocks, pointer arithmetic would leave the array).
inline void prefetch_params(const fp16_t* params, size_t block, size_t head_dim) {
  const uintptr_t at = reinterpret_cast<uintptr_t>(params) + block * 2 * head_dim * sizeof(fp16_t);
  for (size_t i = 0; i < 2 * head_dim * sizeof(fp16_t); i += 64) {
    _mm_prefetch(reinterpret_cast<const char*>(at + i), _MM_HINT_T0);
  }
}

// n_blocks blocks of block_rows rows (a multiple of 8) each, params [n_blocks][2][head_dim] fp16,
// words [n_blocks][block_rows / 8][head_dim] words, out rows b * block_rows + r: key_block_q8 per
// block, with one dispatch and scratch for all of them and the groups of 4 queries (the decode
// case) calling their kernels directly.
template <int Bits>
void key_span_q8(float* out, size_t out_stride, const float* q, size_t n_q, const fp16_t* params,
                 const uint8_t* words, size_t n_blocks, size_t block_rows, size_t head_dim,
                 float* scratch) {
  constexpr int kParts = Bits == 4 ? 2 : 1;
  auto* ops = reinterpret_cast<int8_t*>((reinterpret_cast<uintptr_t>(scratch) + 63) &
                                        ~static_cast<uintptr_t>(63));
  float* qs_buf = reinterpret_cast<float*>(ops + head_dim / 16 * 64 * kParts);
  const size_t block_bytes = block_rows / 8 * Bits * head_dim, full = n_q / 4 * 4;
  for (size_t j0 = 0; j0 < full; j0 += 4) {
    const float* qj = q + j0 * head_dim;
    float* o = out + j0 * out_stride;
    for (size_t b = 0; b < n_blocks; ++b) {
      // the params kPrefetchBlocks blocks ahead, into L1: fetched into L2 only, the preparation's
      // first loads (vcvtph2ps) held a fifth of its samples (alternated A/B, one thread, 16K
      // rows: the key half 0.786 -> 0.751 ms)
      prefetch_params(params, b + kPrefetchBlocks, head_dim);
      if constexpr (Bits == 2) {
        if (b + 1 < n_blocks) {  // two blocks: prepare_pair
          prefetch_params(params, b + 1 + kPrefetchBlocks, head_dim);
          QueryParams qp[2];
          // scratch: two blocks' operands, then q' of one block (within kivi_key_scratch_floats)
          prepare_pair(ops, reinterpret_cast<float*>(ops + head_dim / 16 * 128), qp, qj,
                       F16Params{params + b * 2 * head_dim, head_dim},
                       F16Params{params + (b + 1) * 2 * head_dim, head_dim}, head_dim);
          key_block_2bit_pair(o + b * block_rows, out_stride, ops, qp[0], words + b * block_bytes,
                              block_rows, head_dim);
          key_block_2bit_pair(o + (b + 1) * block_rows, out_stride, ops + head_dim / 16 * 64, qp[1],
                              words + (b + 1) * block_bytes, block_rows, head_dim);
          ++b;
          continue;
        }
      }
      QueryParams qp;
      prepare_queries<kParts, 4>(ops, qs_buf, qp, qj, 4,
                                 F16Params{params + b * 2 * head_dim, head_dim}, head_dim);
      if constexpr (Bits == 2) {
        key_block_2bit<4>(o + b * block_rows, out_stride, 4, ops, qp, words + b * block_bytes,
                          block_rows, head_dim);
      } else {
        key_block_4bit<4>(o + b * block_rows, out_stride, 4, ops, qp, words + b * block_bytes,
                          block_rows, head_dim);
      }
    }
  }
  if (full == n_q) return;
  for (size_t b = 0; b < n_blocks; ++b) {
    key_block_q8<Bits>(out + full * out_stride + b * block_rows, out_stride, q + full * head_dim,
                       n_q - full, F16Params{params + b * 2 * head_dim, head_dim},
                       words + b * block_bytes, block_rows, head_dim, scratch);
  }
}

#undef SNAPKV_UNROLL
#undef SNAPKV_NOINLINE
}  // namespace
#endif  // SNAPKV_KIVI_VNNI

bool kivi_key_q8_handles(size_t head_dim, int bits) {
#if SNAPKV_KIVI_VNNI
  return (bits == 2 && head_dim % 32 == 0) || (bits == 4 && head_dim % 16 == 0);
#else
  (void)head_dim, (void)bits;
  return false;
#endif
}

bool kivi_key_block_dot_q8(float* out, size_t out_stride, const float* q, size_t n_q,
                           const float* scales, const float* zeros, const uint8_t* words,
                           size_t n_rows, size_t head_dim, int bits, float* scratch) {
#if SNAPKV_KIVI_VNNI
  if (!kivi_key_q8_handles(head_dim, bits)) return false;
  const F32Params params{scales, zeros};
  if (bits == 2) {  // one int8 part (kivi_kernels.h)
    key_block_q8<2>(out, out_stride, q, n_q, params, words, n_rows, head_dim, scratch);
  } else {
    key_block_q8<4>(out, out_stride, q, n_q, params, words, n_rows, head_dim, scratch);
  }
  return true;
#else
  (void)out, (void)out_stride, (void)q, (void)n_q, (void)scales, (void)zeros, (void)words;
  (void)n_rows, (void)head_dim, (void)bits, (void)scratch;
  return false;
#endif
}

bool kivi_key_block_dot_q8_f16(float* out, size_t out_stride, const float* q, size_t n_q,
                               const fp16_t* params, const uint8_t* words, size_t n_rows,
                               size_t head_dim, int bits, float* scratch) {
#if SNAPKV_KIVI_VNNI
  if (!kivi_key_q8_handles(head_dim, bits)) return false;
  const F16Params p{params, head_dim};
  if (bits == 2) {
    key_block_q8<2>(out, out_stride, q, n_q, p, words, n_rows, head_dim, scratch);
  } else {
    key_block_q8<4>(out, out_stride, q, n_q, p, words, n_rows, head_dim, scratch);
  }
  return true;
#else
  (void)out, (void)out_stride, (void)q, (void)n_q, (void)params, (void)words, (void)n_rows;
  (void)head_dim, (void)bits, (void)scratch;
  return false;
#endif
}

bool kivi_key_blocks_dot_q8_f16(float* out, size_t out_stride, const float* q, size_t n_q,
                                const fp16_t* params, const uint8_t* words, size_t n_blocks,
                                size_t block_rows, size_t head_dim, int bits, float* scratch) {
#if SNAPKV_KIVI_VNNI
  if (!kivi_key_q8_handles(head_dim, bits) || block_rows % 8 != 0) return false;
  if (bits == 2) {
    key_span_q8<2>(out, out_stride, q, n_q, params, words, n_blocks, block_rows, head_dim, scratch);
  } else {
    key_span_q8<4>(out, out_stride, q, n_q, params, words, n_blocks, block_rows, head_dim, scratch);
  }
  return true;
#else
  (void)out, (void)out_stride, (void)q, (void)n_q, (void)params, (void)words, (void)n_blocks;
  (void)block_rows, (void)head_dim, (void)bits, (void)scratch;
  return false;
#endif
}

}  // namespace snapkv::SNAPKV_ISA
