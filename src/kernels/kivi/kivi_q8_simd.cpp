// KIVI key scores with integer dot products on the packed codes (see kivi_kernels.h,
// kivi_key_block_dot_q8_scalar for the arithmetic), compiled once per ISA level (kernels/isa.h);
// the levels with AVX-512 VNNI run vpdpbusd (u8 codes x s8 query), the others report "not handled"
// and keep the float kernels of kivi_keys_simd.cpp. The 2-bit value kernel (u8 weights x codes) is
// in kivi_q8_values_simd.cpp.
//
// Within a key block every channel c has one scale s_c and zero z_c, so
//   q . k_r = sum_c (q_c s_c) code(r, c) + sum_c q_c z_c.
// q' = q o s is quantized per query and block to a pair of int8 vectors for 4-bit codes, q' ~
// step * hi + step2 * lo (step = max |q'| / 127, step2 = step / 254: about 15 bits; a single int8
// vector moves a logit by up to 5% on keys with outlier channels), and the first sum becomes
// step * sum_c hi_c code(r, c) + step2 * sum_c lo_c code(r, c), both sums exact in int32. 2-bit
// codes take hi alone (kivi_kernels.h: its rounding is a few percent of the 2-bit codec's own
// error). The four queries of a GQA group are prepared together (shared parameter loads, one
// transposed reduction for their four maxima and zero terms) and share each masked code vector.
// The decode case of 2-bit keys (4 queries, runs of blocks) prepares two blocks at once
// (prepare_pair) for key_block_2bit_pair. The per-block kernels and the layout of a key block they
// read are in kivi_q8_blocks_simd.cpp (docs/KERNELS.md).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/kivi/kivi_q8_simd.h"

namespace snapkv::SNAPKV_ISA {

#if SNAPKV_KIVI_VNNI
namespace {

using kivi_q8::key_block_2bit;
using kivi_q8::key_block_2bit_pair;
using kivi_q8::key_block_4bit;
using kivi_q8::quad_offset;
using kivi_q8::QueryParams;

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
// bit those of two calls. q' of the first block is kept in qs_buf ([4][head_dim] floats, 64-byte
// aligned), the second block's is recomputed in the quantizing pass, which balances stores and
// multiplies. The operands are stored in key_block_2bit_pair's order: per chunk of 16 channels,
// qword 4 p + j holds quads 2 p, 2 p + 1 of query j. ops: [2][head_dim / 16][64] bytes, qp: [2].
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

// Blocks ahead whose params key_span_q8 prefetches into L1 (the kernels prefetch the words), past
// the call's blocks too: a store's blocks follow each other, so a span's last blocks request the
// next span's first params (prefetches never fault; past the store's end they fetch
// kPrefetchBlocks blocks' worth of unused lines).
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
      // the params kPrefetchBlocks blocks ahead, into L1 (the preparation's first loads)
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
