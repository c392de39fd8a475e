// KIVI 4-bit value sums with integer dot products on the packed codes (vpdpwssd: int16 weights x
// int16 codes, two rows per dword lane), compiled once per ISA level (kernels/isa.h);
// kivi_value_rows_accumulate_q16_scalar (kivi_kernels.h) is the arithmetic and its reference.
// The levels without AVX-512 VNNI report "not handled" and keep the float kernel of
// kivi_values_simd.cpp.
//
// A 4-bit row of head_dim 128 is one 64-byte vector, 128-bit lane L holding channels 32 L ..
// 32 L + 31 (byte b: channels 2 b, 2 b + 1). Two rows a, b interleaved by 16-bit words
// (unpacklo / unpackhi_epi16, per 128-bit lane) give dwords (word d of a, word d of b); each word
// holds 4 channels, so masking nibble i of both halves leaves (code(a, c), code(b, c)) as two
// int16 in one dword: with h = 0 (lo) / 1 (hi) and i = 0..3, code vector (h, i) has lane
// 4 L + d = channel 32 L + 16 h + 4 d + i, and vpdpwssd with a weight vector holding
// (wq_a, wq_b) of the channel's group in each lane sums the pair of rows. head_dim 256 is two
// such chunks of 128 channels (k = 0, 1). A pass (k, h) walks the tile's row pairs with the 4
// code vectors in registers for up to 4 queries (16 accumulators); the weights are quantized per
// query and tile in "flat" order (f = row * n_groups + group, 16 per vector, lane f % 16 always
// of group f % n_groups) and packed to a table of dwords [pair][group], from which one
// permute per pair and query picks the pass's weight vector (docs/KERNELS.md).
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/isa.h"
#include "kernels/kivi/kivi_kernels.h"
#include "kernels/unroll.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)
// GCC 12's AVX-512 intrinsics start from _mm512_undefined_*(), a self-initialised variable that
// -W(maybe-)uninitialized reports wherever they inline (-Wuninitialized in the ASan build at
// RelWithDebInfo); silenced for the header's lines only.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#define SNAPKV_KIVI_Q16 1
#include "kernels/kivi/kivi_weights_range.h"
#endif

namespace snapkv::SNAPKV_ISA {

#if SNAPKV_KIVI_Q16
namespace {

constexpr size_t kTile = kKiviValueQ16Tile;
constexpr size_t kMaxHeadDim = 256;
constexpr size_t kMaxGroups = 16;
constexpr size_t kMaxFlat = kTile * kMaxGroups;  // flat entries of a tile
constexpr size_t kBatch = 4;                     // queries per pass (a GQA group)
constexpr size_t kAheadRows = 128;               // rows between a prefetch and its use
static_assert(kTile % 16 == 0 && kTile * 15 * 32767 < (size_t{1} << 31), "int32 sums exact");

// acc + vpdpwssd(a, b): the asm keeps the accumulator in its register.
inline __m512i dpwssd(__m512i acc, __m512i a, __m512i b) {
#if defined(__GNUC__)
  __asm__("vpdpwssd %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b));
  return acc;
#else
  return _mm512_dpwssd_epi32(acc, a, b);
#endif
}

bool q16_shape(size_t head_dim, size_t group, int bits) {
  if (bits != 4 || (head_dim != 128 && head_dim != 256) || group == 0) return false;
  const size_t n_groups = (head_dim + group - 1) / group;
  return (group % 16 == 0 || n_groups == 1) && 16 % n_groups == 0;
}

// rotate lanes: lane l <- x[(l + S) % 16]
template <int S>
inline __m512 rot(__m512 x) {
  const __m512i v = _mm512_castps_si512(x);
  return _mm512_castsi512_ps(_mm512_alignr_epi32(v, v, S));
}
// lane l <- op over the lanes l + k n_groups (k = 0, 1, ..): steps s = 8, 4, .. n_groups
template <bool Max>
inline __m512 fold_groups(__m512 x, size_t n_groups) {
  const auto op = [](__m512 a, __m512 b) {
    return Max ? _mm512_max_ps(a, b) : _mm512_add_ps(a, b);
  };
  if (n_groups <= 8) x = op(x, rot<8>(x));
  if (n_groups <= 4) x = op(x, rot<4>(x));
  if (n_groups <= 2) x = op(x, rot<2>(x));
  if (n_groups <= 1) x = op(x, rot<1>(x));
  return x;
}

struct alignas(64) Q16Scratch {
  float u[kBatch][kMaxFlat];                         // the queries' w * scale, flat
  float wt[kBatch][kTile];                           // the queries' weights of a tile, 0 past nr
  int32_t tab[kBatch][kTile / 2 * kMaxGroups + 16];  // int16 weight pairs [pair][group], + pad
  float sums[kBatch][kMaxHeadDim];                   // float sums in lane order
  int32_t chan[kMaxHeadDim];                         // channel -> lane of sums
  int32_t group_of[kMaxHeadDim];
  alignas(64) int32_t bidx[kMaxGroups][16];  // flat lane -> row within a 16-row weight vector
  alignas(64) int16_t pidx[32];              // packs_epi32 word -> pair-table word
  alignas(64) uint8_t zero_row[kMaxHeadDim / 2] = {};  // the pair of a last odd row
  size_t head_dim = 0, group = 0;                      // the shape of the tables above
};

// One per thread. Out of line, so the kernels take the scratch's address once, not from the
// thread pointer inside their loops.
__attribute__((noinline)) Q16Scratch& q16_scratch() {
  thread_local Q16Scratch sc;
  return sc;
}

// Quantizes the NQ queries' weights of a tile (rows [0, nr) of w, w_stride apart; params: the
// tile's) into sc.tab[j]: the arithmetic of kivi_value_rows_accumulate_q16_scalar, the queries
// interleaved (independent chains of max and fma); z[j]: query j's zero lanes, updated;
// steps[j]: its steps (lane l: group l % n_groups). n_vec: flat vectors, an even count covering
// nr * n_groups (params and weights past the tile's rows read as 0).
template <int NQ>
void quantize_tile(Q16Scratch& sc, __m512* z, __m512* steps, const float* w, size_t w_stride,
                   const KiviParams* params, size_t nr, size_t n_groups, size_t n_vec) {
  for (size_t j = 0; j < NQ; ++j) {
    for (size_t b = 0; b < kTile / 16; ++b) {
      const size_t valid = nr > 16 * b ? std::min<size_t>(16, nr - 16 * b) : 0;
      _mm512_store_ps(sc.wt[j] + 16 * b,
                      _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << valid) - 1u),
                                            w + j * w_stride + 16 * b));
    }
  }
  __m512 m[NQ], zl[NQ];
#pragma GCC unroll 4
  for (int j = 0; j < NQ; ++j) m[j] = _mm512_setzero_ps(), zl[j] = z[j];
  const size_t shift = static_cast<size_t>(__builtin_ctzll(n_groups));  // n_groups: 2^shift
  const size_t n_flat = nr * n_groups;
  const auto* pd = reinterpret_cast<const int*>(params);  // (scale, zero) dwords, flat order
  const auto flat = [&](size_t v, __m512i d) {
    const __m512 sv = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(d));
    const __m512 zv = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(d, 16)));
    const __m512i idx = _mm512_load_si512(sc.bidx[v & (n_groups - 1)]);
    const size_t at = 16 * (v >> shift);
#pragma GCC unroll 4
    for (int j = 0; j < NQ; ++j) {
      const __m512 wb = _mm512_permutexvar_ps(idx, _mm512_load_ps(sc.wt[j] + at));
      const __m512 u = _mm512_mul_ps(wb, sv);
      _mm512_store_ps(sc.u[j] + 16 * v, u);
      m[j] = _mm512_max_ps(m[j], u);
      zl[j] = _mm512_fmadd_ps(wb, zv, zl[j]);
    }
  };
  size_t v = 0;
  for (; v < n_flat / 16; ++v) flat(v, _mm512_loadu_si512(pd + 16 * v));
  for (; v < n_vec; ++v) {  // the last rows of a partial tile, then zeros
    const size_t valid = n_flat > 16 * v ? n_flat - 16 * v : 0;
    flat(v, _mm512_maskz_loadu_epi32(static_cast<__mmask16>((1u << valid) - 1u),
                                     valid > 0 ? pd + 16 * v : pd));
  }
  const __m512i pidx = _mm512_load_si512(sc.pidx);
#pragma GCC unroll 4
  for (int j = 0; j < NQ; ++j) {
    z[j] = zl[j];
    const __m512 mx = fold_groups<true>(m[j], n_groups);
    const __mmask16 live = _mm512_cmp_ps_mask(mx, _mm512_set1_ps(0x1p-100f), _CMP_GE_OQ);
    const __m512 inv = _mm512_maskz_div_ps(live, _mm512_set1_ps(32767.0f), mx);
    steps[j] = _mm512_maskz_mul_ps(live, mx, _mm512_set1_ps(1.0f / 32767.0f));
    const float* u = sc.u[j];
    int32_t* tab = sc.tab[j];
    for (size_t e = 0; e < n_vec; e += 2) {
      const __m512i a = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_load_ps(u + 16 * e), inv));
      const __m512i b = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_load_ps(u + 16 * e + 16), inv));
      // signed saturation to 32767 is the min of the reference (never acting)
      _mm512_store_si512(tab + 16 * (e / 2),
                         _mm512_permutexvar_epi16(pidx, _mm512_packs_epi32(a, b)));
    }
  }
}

// One pass (chunk of 128 channels at byte offset `off`, half H) over the tile's row pairs for NQ
// queries: sums[j][4 i .. 4 i + 15] += step_v[j] * (sum over pairs of dpwssd(code vector i,
// weight vector)).
template <int NQ, int H>
void pass(float (*sums)[kMaxHeadDim], size_t sum_at,
          const int32_t (*tab)[kTile / 2 * kMaxGroups + 16], const uint8_t* rows, size_t row_bytes,
          size_t off, size_t nr, const uint8_t* zero_row, size_t n_groups, __m512i widx,
          const __m512* step_v, const KiviParams* par, bool prefetch) {
  __m512i acc[NQ][4];  // [query][code vector]
  unroll<NQ>([&](auto j) { unroll<4>([&](auto i) { acc[j][i] = _mm512_setzero_si512(); }); });
  const __m512i nib = _mm512_set1_epi16(15);
  const auto body = [&](const uint8_t* ra, const uint8_t* rb, size_t p) {
    const __m512i xa = _mm512_loadu_si512(ra + off), xb = _mm512_loadu_si512(rb + off);
    const __m512i x = H == 0 ? _mm512_unpacklo_epi16(xa, xb) : _mm512_unpackhi_epi16(xa, xb);
    const __m512i k[4] = {_mm512_and_si512(x, nib), _mm512_and_si512(_mm512_srli_epi16(x, 4), nib),
                          _mm512_and_si512(_mm512_srli_epi16(x, 8), nib), _mm512_srli_epi16(x, 12)};
    const size_t at = p * n_groups;
    unroll<NQ>([&](auto j) {
      const __m512i wq = _mm512_permutexvar_epi32(widx, _mm512_loadu_si512(tab[j] + at));
      unroll<4>([&](auto i) { acc[j][i] = dpwssd(acc[j][i], k[i], wq); });
    });
  };
  const size_t full = nr / 2;
  // pass h = 0 also prefetches (T2) the codes kAheadRows ahead and the params of the next tile:
  // spread over the loop, not in a burst per tile, and past the call's rows too, as
  // kivi_q8_values_simd.cpp does (a store's spans follow each other; prefetches never fault).
  // Addresses as integers: past the rows, pointer arithmetic would leave the array.
  const size_t pair_param_bytes = 2 * n_groups * sizeof(KiviParams);
  const uintptr_t codes_at = reinterpret_cast<uintptr_t>(rows) + kAheadRows * row_bytes + off;
  const uintptr_t params_at =
      reinterpret_cast<uintptr_t>(par) + kTile * n_groups * sizeof(KiviParams);
  for (size_t p = 0; p < full; ++p) {
    const uint8_t* ra = rows + 2 * p * row_bytes;
    if constexpr (H == 0) {
      if (prefetch) {
        const auto* f = reinterpret_cast<const char*>(codes_at + 2 * p * row_bytes);
        _mm_prefetch(f, _MM_HINT_T2), _mm_prefetch(f + row_bytes, _MM_HINT_T2);
        if (off == 0) {
          const auto* q = reinterpret_cast<const char*>(params_at + p * pair_param_bytes);
          _mm_prefetch(q, _MM_HINT_T2);
          if (pair_param_bytes > 64) _mm_prefetch(q + 64, _MM_HINT_T2);
        }
      }
    }
    body(ra, ra + row_bytes, p);
  }
  if (nr % 2 != 0) body(rows + 2 * full * row_bytes, zero_row, full);  // its weight is 0
  unroll<NQ>([&](auto j) {
    float* s = sums[j] + sum_at;
    unroll<4>([&](auto i) {
      _mm512_store_ps(s + 16 * i, _mm512_fmadd_ps(step_v[j], _mm512_cvtepi32_ps(acc[j][i]),
                                                  _mm512_load_ps(s + 16 * i)));
    });
  });
}

template <int NQ>
void batch_q16(Q16Scratch& sc, float* out, const float* w, size_t w_stride, const uint8_t* codes,
               const KiviParams* params, size_t n_rows, size_t head_dim, size_t group,
               size_t n_groups, bool prefetch) {
  const size_t row_bytes = head_dim / 2, n_chunks = head_dim / 128;
  // pass (k, h): lane 4 L + d of its vectors is channel 128 k + 32 L + 16 h + 4 d + i, whose
  // group picks both the step and the weight dword of a pair
  __m512i widx[2 * kMaxHeadDim / 128];
  for (size_t kh = 0; kh < 2 * n_chunks; ++kh) {
    alignas(64) int32_t idx[16];
    for (size_t lane = 0; lane < 16; ++lane) {
      const size_t c = 128 * (kh / 2) + 32 * (lane / 4) + 16 * (kh % 2);
      idx[lane] = static_cast<int32_t>(std::min(c / group, n_groups - 1));
    }
    widx[kh] = _mm512_load_si512(idx);
  }
  for (size_t j = 0; j < NQ; ++j) std::fill_n(sc.sums[j], head_dim, 0.0f);
  __m512 z[kBatch];
  for (auto& x : z) x = _mm512_setzero_ps();
  for (size_t r0 = 0; r0 < n_rows; r0 += kTile) {
    const size_t nr = std::min(kTile, n_rows - r0);
    const uint8_t* tile = codes + r0 * row_bytes;
    const size_t n_vec = 2 * ((nr * n_groups + 31) / 32);
    __m512 steps[kBatch];
    quantize_tile<NQ>(sc, z, steps, w + r0, w_stride, params + r0 * n_groups, nr, n_groups, n_vec);
    for (size_t kh = 0; kh < 2 * n_chunks; ++kh) {
      __m512 step_v[kBatch];
      for (size_t j = 0; j < NQ; ++j) step_v[j] = _mm512_permutexvar_ps(widx[kh], steps[j]);
      const size_t off = 64 * (kh / 2), sum_at = 64 * kh;
      if (kh % 2 == 0) {
        pass<NQ, 0>(sc.sums, sum_at, sc.tab, tile, row_bytes, off, nr, sc.zero_row, n_groups,
                    widx[kh], step_v, params + r0 * n_groups, prefetch);
      } else {
        pass<NQ, 1>(sc.sums, sum_at, sc.tab, tile, row_bytes, off, nr, sc.zero_row, n_groups,
                    widx[kh], step_v, params + r0 * n_groups, false);
      }
    }
  }
  // back to channel order: out[c] += sums at the lane of c + the zero sum of its group
  for (size_t j = 0; j < NQ; ++j) {
    const __m512 zs = fold_groups<false>(z[j], n_groups);  // lane g: zero_sum(g)
    float* oj = out + j * head_dim;
    for (size_t c = 0; c < head_dim; c += 16) {
      const __m512 v = _mm512_i32gather_ps(_mm512_loadu_si512(sc.chan + c), sc.sums[j], 4);
      const __m512 zc = _mm512_permutexvar_ps(_mm512_loadu_si512(sc.group_of + c), zs);
      _mm512_storeu_ps(oj + c, _mm512_add_ps(_mm512_loadu_ps(oj + c), _mm512_add_ps(v, zc)));
    }
  }
}

void value_rows_q16(float* out, const float* w, size_t w_stride, size_t n_q, const uint8_t* codes,
                    const KiviParams* params, size_t n_rows, size_t head_dim, size_t group) {
  const size_t n_groups = (head_dim + group - 1) / group;
  Q16Scratch& sc = q16_scratch();
  if (sc.head_dim != head_dim || sc.group != group) {  // the index tables of this shape
    sc.head_dim = head_dim, sc.group = group;
    for (size_t vm = 0; vm < n_groups; ++vm) {  // flat vector v with v % n_groups == vm
      for (size_t lane = 0; lane < 16; ++lane) {
        sc.bidx[vm][lane] = static_cast<int32_t>((16 * vm + lane) / n_groups);
      }
    }
    // packs_epi32(a, b) word 8 q + e: a's dword 4 q + e (e < 4), else b's dword 4 q + e - 4;
    // the table's word 2 (p n_groups + g) + s holds flat entry (2 p + s) n_groups + g
    for (size_t word = 0; word < 32; ++word) {
      const size_t p = word / 2 / n_groups, g = word / 2 % n_groups, s = word % 2;
      const size_t f = (2 * p + s) * n_groups + g;  // 0 .. 31: a's dwords then b's
      const size_t src = f < 16 ? 8 * (f / 4) + f % 4 : 8 * ((f - 16) / 4) + 4 + (f - 16) % 4;
      sc.pidx[word] = static_cast<int16_t>(src);
    }
    for (size_t c = 0; c < head_dim; ++c) {
      const size_t k = c / 128, l = c % 128, lane128 = l / 32, h = l % 32 / 16, d = l % 16 / 4,
                   i = l % 4;
      sc.chan[c] = static_cast<int32_t>(64 * (2 * k + h) + 16 * i + 4 * lane128 + d);
      sc.group_of[c] = static_cast<int32_t>(c / group);
    }
  }
  for (size_t j0 = 0; j0 < n_q; j0 += kBatch) {
    const size_t nq = std::min(kBatch, n_q - j0);
    const auto run = [&](auto n) {
      batch_q16<decltype(n)::value>(sc, out + j0 * head_dim, w + j0 * w_stride, w_stride, codes,
                                    params, n_rows, head_dim, group, n_groups, j0 == 0);
    };
    switch (nq) {
      case 1:
        run(std::integral_constant<int, 1>{});
        break;
      case 2:
        run(std::integral_constant<int, 2>{});
        break;
      case 3:
        run(std::integral_constant<int, 3>{});
        break;
      default:
        run(std::integral_constant<int, 4>{});
    }
  }
}

}  // namespace
#endif  // SNAPKV_KIVI_Q16

bool kivi_value_q16_handles(size_t head_dim, size_t group, int bits) {
#if SNAPKV_KIVI_Q16
  return q16_shape(head_dim, group, bits);
#else
  (void)head_dim, (void)group, (void)bits;
  return false;
#endif
}

bool kivi_value_rows_accumulate_q16(float* out, const float* w, size_t w_stride, size_t n_q,
                                    const uint8_t* codes, const KiviParams* params, size_t n_rows,
                                    size_t head_dim, size_t group, int bits) {
#if SNAPKV_KIVI_Q16
  if (!q16_shape(head_dim, group, bits) || !weights_in_range(w, w_stride, n_q, n_rows, 0x1p100f)) {
    return false;
  }
  value_rows_q16(out, w, w_stride, n_q, codes, params, n_rows, head_dim, group);
  return true;
#else
  (void)out, (void)w, (void)w_stride, (void)n_q, (void)codes, (void)params, (void)n_rows;
  (void)head_dim, (void)group, (void)bits;
  return false;
#endif
}

}  // namespace snapkv::SNAPKV_ISA
