// Shared by the 2-bit integer KIVI value kernel (kivi_q8_values_simd.cpp: the tiles, the weights
// and the entry points; kivi_q8_values_dot_simd.cpp: the sums of one tile), compiled once per ISA
// level (kernels/isa.h): whether the level has AVX-512 VNNI, the code vectors' layout, and the tile
// sums the driver calls (defined in kivi_q8_values_dot_simd.cpp, in this level's namespace).
//
// 2-bit value rows only (4-bit keeps the float kernel: kivi_kernels.h says why). A row is
// [head_dim / 8] words of 8 channels, byte b holding channels 4 b .. 4 b + 3. Four rows' bytes
// are interleaved so that a dword holds byte position p of 4 rows (unpack epi8 then
// epi16, per 128-bit lane); masking bits 2 i, 2 i + 1 of every byte leaves code(row, 4 p + i)
// (times kCodeMul[i]) in each byte, and vpdpbusd with the four rows' quantized weights (u8) sums
// 4 rows of one channel per dword lane. Rows of 64 bytes (head_dim 256) fill a vector with 4 rows
// x 64 byte positions; rows of 32 bytes (head_dim 128) put rows r, r + 2, r + 4, r + 6 in the
// low half and r + 1, r + 3, r + 5, r + 7 in the high half (two rows to a 64-byte load; two lanes
// per byte position, added in int32 at the end of each tile). The interleaved vectors of a tile
// are built once and serve every query; a whole group of 4 queries masks them once per step
// for its 4 sums (dot_quad); the float sums stay in lane order until the end of the call
// (docs/KERNELS.md).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/isa.h"
#include "kernels/kivi/kivi_kernels.h"
#include "kernels/vec.h"  // <immintrin.h> at the x86-64 levels

#if SNAPKV_VEC_X86 && defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)
#define SNAPKV_KIVI_VNNI 1
#endif

#if SNAPKV_KIVI_VNNI
namespace snapkv::SNAPKV_ISA::kivi_q8_values {

// The next tile's code vectors, built a step at a time inside dot_quad's first pass (whose
// vpdpbusd stream leaves vector slots free) when that tile is whole; with the prefetches of its
// steps' rows kVPrefetchRows ahead (pf_codes, pf_params: addresses, 0 for none).
struct NextTile {
  const uint8_t* src = nullptr;  // its rows, 256 bytes a step; null: nothing to build
  __m512i* dst = nullptr;        // [steps][4] vectors V_v
  uintptr_t pf_codes = 0;
  uintptr_t pf_params = 0;
  size_t pf_param_step = 0;  // param bytes per step
};

// The sums over the steps of one tile for one query, the accumulators as named locals (so they
// stay in registers): acc[4 v + i] += weight vector v (u8) x code vector 4 v + i (s8, masked from
// V_v); then sums[k] += step_v[k / 4] * acc[k], or with Pair (rows of 32 bytes) sums[p] +=
// step_v[p / 2] * [acc[2 p] | acc[2 p + 1]], each half the sum of an accumulator's two row halves.
// The weight vectors are picked from the sub-tile's two tables (tabs[sub]) by w_idx[step in
// sub-tile][u], one permute per distinct vector u (the template: U_v is vector v's); codes:
// [n_steps][4] vectors V_v.
template <int U1, int U2, int U3, bool Pair>
void dot_tile(__m512* sums, const __m512i (*tabs)[2], const int32_t (*w_idx)[4][16],
              const __m512i* codes, size_t n_steps, size_t sub_steps, const __m512* step_v);

// dot_tile for the 4 queries of a GQA group at once, one code vector V_v at a time: its 4 masked
// vectors are computed once per step and serve the 4 queries (16 accumulators: 4 queries x 4
// codes), where dot_tile masks every V_v again for each query. The same integer sums and float
// updates as 4 calls of dot_tile; a weight vector shared by several V_v is picked again for each
// (one permute per query, V_v and step). tabs[q], step_v[q]: query q's tables and steps; sums:
// [4][kVK]; first: the call's first tile, whose products set the sums (step * isum, as
// fma(step, isum, 0) of the twin: both are >= 0, so no -0 arises) instead of adding to them (no
// zeroing per call).
template <int U1, int U2, int U3, bool Pair>
void dot_quad(__m512* sums, const __m512i (*const* tabs)[2], const int32_t (*w_idx)[4][16],
              const __m512i* codes, size_t n_steps, size_t sub_steps, const __m512 (*step_v)[4],
              const NextTile& next, bool first);
// (U1, U2, U3) is (0, 0, 0), (0, 1, 1) or (1, 2, 3): the instantiations
// kivi_q8_values_dot_simd.cpp provides (the plan's pattern 0, 1, 2).

namespace {

constexpr size_t kVTile = kKiviValueQ8Tile;  // rows per tile: one weight step per (query, group)
constexpr size_t kVK = 16;                   // code vectors per step = accumulators per query

// The 4 vectors V_v of one step starting at `rows` (256 bytes, all readable) into dst.
inline void build_step(__m512i* dst, const uint8_t* rows) {
  // 64 bytes each: rows 2 t, 2 t + 1 of 32 bytes (the halves of a vector), or row t of 64
  __m512i x[4];
  for (size_t t = 0; t < 4; ++t) x[t] = _mm512_loadu_si512(rows + 64 * t);
  // V_v lane L dword d <- byte 16 L + 4 v + d of the 4 rows
  const __m512i ab_lo = _mm512_unpacklo_epi8(x[0], x[1]), ab_hi = _mm512_unpackhi_epi8(x[0], x[1]);
  const __m512i cd_lo = _mm512_unpacklo_epi8(x[2], x[3]), cd_hi = _mm512_unpackhi_epi8(x[2], x[3]);
  const __m512i vv[4] = {_mm512_unpacklo_epi16(ab_lo, cd_lo), _mm512_unpackhi_epi16(ab_lo, cd_lo),
                         _mm512_unpacklo_epi16(ab_hi, cd_hi), _mm512_unpackhi_epi16(ab_hi, cd_hi)};
  for (int v = 0; v < 4; ++v) _mm512_store_si512(dst + v, vv[v]);
}

inline void prefetch_t2(uintptr_t at, size_t bytes) {
  for (size_t b = 0; b < bytes; b += 64) {
    _mm_prefetch(reinterpret_cast<const char*>(at + b), _MM_HINT_T2);
  }
}

}  // namespace
}  // namespace snapkv::SNAPKV_ISA::kivi_q8_values
#endif  // SNAPKV_KIVI_VNNI
