// KIVI 2-bit value sums with integer dot products on the packed codes (vpdpbusd: u8 weights x
// codes), compiled once per ISA level (kernels/isa.h); kivi_value_rows_accumulate_q8_scalar
// (kivi_kernels.h) is the arithmetic and its reference. The levels without AVX-512 VNNI report
// "not handled" and keep the float kernel of kivi_values_simd.cpp. The keys' integer kernel is in
// kivi_q8_simd.cpp. The layout of the code vectors is in kivi_q8_values_simd.h, the sums of
// one tile in kivi_q8_values_dot_simd.cpp.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/kivi/kivi_q8_values_simd.h"

#if SNAPKV_KIVI_VNNI
#include "kernels/kivi/kivi_weights_range.h"
#endif

namespace snapkv::SNAPKV_ISA {

#if SNAPKV_KIVI_VNNI
namespace {

using kivi_q8_values::build_step;
using kivi_q8_values::dot_quad;
using kivi_q8_values::dot_tile;
using kivi_q8_values::kVK;
using kivi_q8_values::kVTile;
using kivi_q8_values::NextTile;
using kivi_q8_values::prefetch_t2;

// p, its origin hidden from the optimizer. The library is built position-independent, where a
// thread_local's address is a call to __tls_get_addr: through an opaque pointer the scratch's and
// the plan's addresses are taken once and stay in a register through the tile loop.
template <class T>
T* opaque(T* p) {
#if defined(__GNUC__)
  __asm__("" : "+r"(p));
#endif
  return p;
}

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

// Code vector 4 v + i holds code i of its bytes times kCodeMul[i] (masked in place, no shift
// for i < 3): the sums of its lanes are kCodeMul[i] times the integer form's, scaled back by
// 1 / kCodeMul[i] (a power of two, exact) when the lanes are mapped back to channels, so the
// result is bit for bit that of unscaled codes (every sum below 2^24: exact in fp32).
constexpr float kCodeMul[4] = {1.0f, 4.0f, 16.0f, 16.0f};

// Rows ahead of the tile being summed whose codes and params are prefetched (T2 hint, as
// kernels/fp16_rows_simd.cpp does for fp16 rows). The prefetches run past the call's last row: a
// store's rows follow each other, so a span's last tiles request the next span's first rows
// (LayerCache::attend reads the store span by span); prefetch instructions never fault, and
// past the store's end they fetch at most kVPrefetchRows rows' worth of unused lines.
constexpr size_t kVPrefetchRows = 2 * kVTile;
// (Addresses as integers: past the rows, pointer arithmetic would leave the array.)
inline uintptr_t address(const void* p) {
  return reinterpret_cast<uintptr_t>(p);
}

// The maxima of four vectors: lanes 4 g .. 4 g + 3 of the result hold max(m[g]) (a transposed
// tree: 13 operations for the four, against 4 horizontal reductions of 8 and their scalar trips).
inline __m512 max_per_group(const __m512* m) {
  const auto fold = [](__m512 a, __m512 b) {  // [a lo | b lo] v [a hi | b hi] in 128-bit lanes
    return _mm512_max_ps(_mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(3, 2, 3, 2)));
  };
  const __m512 a = fold(m[0], m[1]), b = fold(m[2], m[3]);
  const __m512 c = _mm512_max_ps(_mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(2, 0, 2, 0)),
                                 _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(3, 1, 3, 1)));
  const __m512 d = _mm512_max_ps(c, _mm512_permute_ps(c, _MM_SHUFFLE(1, 0, 3, 2)));
  return _mm512_max_ps(d, _mm512_permute_ps(d, _MM_SHUFFLE(2, 3, 0, 1)));
}

// A step is 8 rows of 32 bytes (head_dim 128) or 4 rows of 64 (head_dim 256): value_q8_shape.
constexpr size_t kMaxStepBytes = 256;

struct alignas(64) Bytes64 {  // one vector's worth of storage
  uint8_t b[64];
};
struct ValueQ8Scratch {
  std::vector<Bytes64> codes;  // [steps per tile][16] code vectors
  std::vector<Bytes64> sums;   // [n_q][16] float vectors
  std::vector<Bytes64> zsum;   // [n_q][4] float vectors of sum_r w_r zero(r, g) (g < n_groups)
  // Fixed arrays, not std::vector<uint8_t> / <int32_t>: their fill members would be compiled
  // here as weak symbols shared with other levels' objects (tests/isa_objects_check.sh).
  alignas(64) uint8_t pad[kMaxStepBytes];  // a partial step's rows, zero-filled
  alignas(64) float scale[4 * kVTile];     // a tile's params in fp32, [group][row]
  alignas(64) float zero[4 * kVTile];
};

// What a call needs of its shape (head_dim, group), built once per thread and shape: per
// weight vector v, lane -> 4 * group (the group's lanes in max_per_group); the pattern of
// distinct weight vectors (dot kernel: all one, {0, 0, 1, 1}, else four picks, a repeated one
// picked again); per step of a sub-tile and pick u, lane -> the dword of the weights of (group
// g, quad qd: 4 rows, see low_words) in the packed tables: 16 (g / 2) + 4 (qd % 4) + 2 (g % 2) + qd
// / 4; per group, lane i -> dword (i % 8) * n_groups + g of 8 rows' params; channel -> group.
constexpr size_t kMaxSubSteps = 8;  // steps per weight table (32 rows, steps of 4 or 8 rows)
struct ValueQ8Plan {
  size_t head_dim = 0, group = 0;
  int pattern = 2;
  alignas(64) int32_t grp_idx4[4][16];
  alignas(64) int32_t w_idx[kMaxSubSteps][4][16];
  alignas(64) int32_t param_idx[4][16];
  alignas(64) int32_t group_of[256];
  alignas(64) int16_t low_words[32];
};

const ValueQ8Plan& value_q8_plan(const ValueQ8Shape& s, size_t head_dim, size_t group) {
  thread_local ValueQ8Plan p;
  if (p.head_dim == head_dim && p.group == group) return p;
  p = ValueQ8Plan{};
  const size_t n_groups = (head_dim + group - 1) / group;  // <= 4 (value_q8_shape)
  int32_t grp[4][16];
  int uniq[4];
  int n_uniq = 0;
  for (int v = 0; v < 4; ++v) {
    for (size_t lane = 0; lane < 16; ++lane) {
      grp[v][lane] = static_cast<int32_t>(
          std::min(value_q8_channel(s, 4 * static_cast<size_t>(v), lane) / group, n_groups - 1));
      p.grp_idx4[v][lane] = 4 * grp[v][lane];
    }
    uniq[v] = n_uniq;
    for (int e = 0; e < v; ++e) {
      if (std::equal(grp[v], grp[v] + 16, grp[e])) {
        uniq[v] = uniq[e];
        break;
      }
    }
    if (uniq[v] == n_uniq) ++n_uniq;
  }
  p.pattern = n_uniq == 1 ? 0 : uniq[1] == 0 && uniq[2] == 1 && uniq[3] == 1 && n_uniq == 2 ? 1 : 2;
  for (size_t st = 0; st < 32 / s.step_rows; ++st) {
    for (int v = 0; v < 4; ++v) {
      for (size_t lane = 0; lane < 16; ++lane) {
        const auto qd = static_cast<int32_t>(s.pair_rows ? 2 * st + lane / 8 : st);
        const int32_t g = grp[v][lane];
        p.w_idx[st][p.pattern == 2 ? v : uniq[v]][lane] =
            16 * (g / 2) + 4 * (qd % 4) + 2 * (g % 2) + qd / 4;
      }
    }
  }
  for (size_t g = 0; g < 4; ++g) {
    for (size_t i = 0; i < 16; ++i) {
      p.param_idx[g][i] = static_cast<int32_t>((i % 8) * n_groups + std::min(g, n_groups - 1));
    }
  }
  for (size_t c = 0; c < head_dim; ++c) p.group_of[c] = static_cast<int32_t>(c / group);
  for (int j = 0; j < 32; ++j) {
    // word j = 8 L + 4 m + k: row k of quad 4 m + L, rows 4 qd + k (4-row steps) or
    // 8 (qd / 2) + qd % 2 + 2 k (8-row steps: their even and odd rows, build_step)
    const int lane = j / 8, m = j % 8 / 4, k = j % 4, qd = 4 * m + lane;
    const int row = s.pair_rows ? 8 * (qd / 2) + qd % 2 + 2 * k : 4 * qd + k;
    p.low_words[j] = static_cast<int16_t>((row < 16 ? 0 : 32) + 2 * (row % 16));
  }
  p.head_dim = head_dim, p.group = group;
  return p;
}

// false (out untouched) when a weight is outside [0, 2^64] or NaN (weights_in_range, run when a
// weight's bits exceed those of 2^64)
bool value_rows_q8(float* out, const float* w, size_t w_stride, size_t n_q, const uint8_t* codes,
                   const KiviParams* params, size_t n_rows, size_t head_dim, size_t group,
                   const ValueQ8Shape& s) {
  constexpr size_t kSub = 32;  // rows per weight table (two vectors: 4 groups x 32 rows)
  constexpr size_t kQuarters = kVTile / 16;
  constexpr size_t kQBatch = 4;  // queries quantized before their sums are taken
  static_assert(kVTile % kSub == 0, "whole weight tables per tile");
  const size_t n_groups = (head_dim + group - 1) / group;  // <= 4 (value_q8_shape)
  const size_t row_bytes = head_dim / 4;
  const size_t max_steps = kVTile / s.step_rows, sub_steps = kSub / s.step_rows;
  thread_local ValueQ8Scratch tls_scratch;
  ValueQ8Scratch& sc = *opaque(&tls_scratch);
  sc.codes.resize(2 * max_steps * 4);  // two tiles: the one summed, the next one
  // the sums of whole GQA groups are set by their first tile (dot_quad's `first`); the rest,
  // and the zero sums, start at 0
  const size_t n_quad = n_rows == 0 ? 0 : n_q / kQBatch * kQBatch;
  sc.sums.resize(n_q * kVK);
  std::fill(sc.sums.begin() + static_cast<std::ptrdiff_t>(n_quad * kVK), sc.sums.end(), Bytes64{});
  sc.zsum.assign(n_q * 4, Bytes64{});
  // the bits of every weight, unsigned, folded by max (the range check of
  // kivi_value_rows_accumulate_q8 on the weights as they are loaded)
  __m512i w_top = _mm512_setzero_si512();
  auto* sums_v = reinterpret_cast<__m512*>(sc.sums.data());
  auto* zsum_v = reinterpret_cast<__m512*>(sc.zsum.data());
  const ValueQ8Plan& plan = *opaque(&value_q8_plan(s, head_dim, group));
  const int pattern = plan.pattern;
  const int32_t(*w_idx)[4][16] = plan.w_idx;
  __m512i param_idx[4];
  for (size_t g = 0; g < 4; ++g) param_idx[g] = _mm512_load_si512(plan.param_idx[g]);
  // the low words of a's and b's dwords in the order of packs_epi32(a, b): word 8 L + k of
  // 128-bit lane L is the low word of dword 4 L + k % 4 of a (k < 4) or b
  const __m512i low_words = _mm512_load_si512(plan.low_words);
  // the tile's params [group][16 rows] in fp32, in the thread's scratch (not arrays of vectors
  // on the stack); past n_groups: 0 (so are their weights and steps)
  __m512* const scale_t = reinterpret_cast<__m512*>(sc.scale);  // [4][kQuarters]
  __m512* const zero_t = reinterpret_cast<__m512*>(sc.zero);
  for (size_t g = n_groups; g < 4; ++g) {
    for (size_t h = 0; h < kQuarters; ++h) {
      scale_t[g * kQuarters + h] = zero_t[g * kQuarters + h] = _mm512_setzero_ps();
    }
  }
  bool built = false;  // the tile's code vectors built (during the previous tile's sums)
  for (size_t r0 = 0; r0 < n_rows; r0 += kVTile) {
    const size_t nr = std::min(kVTile, n_rows - r0);
    const size_t n_steps = (nr + s.step_rows - 1) / s.step_rows;
    auto* codes_v = reinterpret_cast<__m512i*>(sc.codes.data()) + (r0 / kVTile % 2) * max_steps * 4;
    auto* next_v =
        reinterpret_cast<__m512i*>(sc.codes.data()) + (r0 / kVTile % 2 == 0) * max_steps * 4;
    const uint8_t* tile = codes + r0 * row_bytes;
    for (size_t st = 0; !built && st < n_steps; ++st) {
      const size_t row = st * s.step_rows;
      // the codes and params kVPrefetchRows ahead, a step at a time (spread between the steps'
      // work, not in a burst), past the call's rows too (kVPrefetchRows)
      prefetch_t2(address(tile) + (row + kVPrefetchRows) * row_bytes, s.step_rows * row_bytes);
      prefetch_t2(address(params) + (r0 + row + kVPrefetchRows) * n_groups * sizeof(KiviParams),
                  s.step_rows * n_groups * sizeof(KiviParams));
      const uint8_t* src = tile + row * row_bytes;
      if (row + s.step_rows > nr) {  // a partial last step: its rows, then zeros
        std::memset(sc.pad, 0, s.step_rows * row_bytes);
        std::memcpy(sc.pad, src, (nr - row) * row_bytes);
        src = sc.pad;
      }
      build_step(codes_v + st * 4, src);
    }
    built = false;
    // a whole next tile: built in the first dot_quad's first pass, with its prefetches (past
    // the call's rows too: kVPrefetchRows)
    NextTile next;
    if (r0 + 2 * kVTile <= n_rows) {
      next.src = tile + kVTile * row_bytes;
      next.dst = next_v;
      next.pf_codes = address(next.src) + kVPrefetchRows * row_bytes;
      next.pf_params =
          address(params) + (r0 + kVTile + kVPrefetchRows) * n_groups * sizeof(KiviParams);
      next.pf_param_step = s.step_rows * n_groups * sizeof(KiviParams);
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
    // a whole tile of 4 groups per row: every load's 16 dwords are the tile's (no masks)
    const bool whole = n_groups == 4 && n_dw == kVTile * 4;
    const auto load16 = [&](size_t at) {
      if (whole) return _mm512_loadu_si512(tile_params + at);
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
        scale_t[g * kQuarters + h] = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(d));
        zero_t[g * kQuarters + h] =
            _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(d, 16)));
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
        for (size_t h = 0; h < kQuarters; ++h) {
          wr[h] = _mm512_maskz_loadu_ps(mask[h], wj + 16 * h);
          w_top = _mm512_max_epu32(w_top, _mm512_castps_si512(wr[h]));
        }
        // the arithmetic of kivi_value_rows_accumulate_q8_scalar: u = w * scale per group, the
        // groups' maxima in one vector (lanes 4 g .. 4 g + 3 hold group g's), one division
        __m512 u[4][kQuarters], m[4];
        // (m starts at the first u, not at 0 as the twin's mx: they differ only where that u
        // is negative, and a maximum below 0x1p-100 gives the same zero weights and step)
        for (size_t g = 0; g < 4; ++g) {
          __m512 z = zsum_v[j * 4 + g];
          for (size_t h = 0; h < kQuarters; ++h) {
            u[g][h] = _mm512_mul_ps(wr[h], scale_t[g * kQuarters + h]);
            z = _mm512_fmadd_ps(wr[h], zero_t[g * kQuarters + h], z);
            m[g] = h == 0 ? u[g][h] : _mm512_max_ps(m[g], u[g][h]);
          }
          zsum_v[j * 4 + g] = z;
        }
        const __m512 mx = max_per_group(m);
        const __mmask16 live = _mm512_cmp_ps_mask(mx, _mm512_set1_ps(0x1p-100f), _CMP_GE_OQ);
        const __m512 inv = _mm512_maskz_div_ps(live, _mm512_set1_ps(255.0f), mx);
        const __m512 steps = _mm512_maskz_mul_ps(live, mx, _mm512_set1_ps(1.0f / 255.0f));
        const __m512 magic = _mm512_set1_ps(0x1p23f);
        const __m512 inv_g[4] = {
            _mm512_shuffle_f32x4(inv, inv, 0x00), _mm512_shuffle_f32x4(inv, inv, 0x55),
            _mm512_shuffle_f32x4(inv, inv, 0xAA), _mm512_shuffle_f32x4(inv, inv, 0xFF)};
        for (int v = 0; v < 4; ++v) {
          step_v[jb][v] = _mm512_permutexvar_ps(_mm512_load_si512(plan.grp_idx4[v]), steps);
        }
        for (size_t sub = 0; sub < kVTile / kSub; ++sub) {
          // two groups' 32 rows as bytes: dword (lane L, m) of a pair's table holds group
          // 2 p + m / 2, the 4 rows of quad 4 (m % 2) + L of the sub-tile (plan.low_words);
          // the weights are the low bytes of 2^23 + rne(u * inv) (exact: below 2^23 + 256)
          const auto words = [&](size_t g) {  // group g's 32 rows as words
            const __m512 q0 = _mm512_fmadd_ps(u[g][2 * sub], inv_g[g], magic);
            const __m512 q1 = _mm512_fmadd_ps(u[g][2 * sub + 1], inv_g[g], magic);
            return _mm512_permutex2var_epi16(_mm512_castps_si512(q0), low_words,
                                             _mm512_castps_si512(q1));
          };
          tabs[jb][sub][0] = _mm512_packus_epi16(words(0), words(1));
          tabs[jb][sub][1] = _mm512_packus_epi16(words(2), words(3));
        }
      }
      if (nb == kQBatch) {  // a whole GQA group: the masked codes serve its 4 queries
        const __m512i(*const qtabs[kQBatch])[2] = {tabs[0], tabs[1], tabs[2], tabs[3]};
        const auto quad = s.pair_rows ? (pattern == 0   ? dot_quad<0, 0, 0, true>
                                         : pattern == 1 ? dot_quad<0, 1, 1, true>
                                                        : dot_quad<1, 2, 3, true>)
                                      : (pattern == 0   ? dot_quad<0, 0, 0, false>
                                         : pattern == 1 ? dot_quad<0, 1, 1, false>
                                                        : dot_quad<1, 2, 3, false>);
        quad(sums_v + j0 * kVK, qtabs, w_idx, codes_v, n_steps, sub_steps, step_v, next, r0 == 0);
        built = built || next.src != nullptr;
        next.src = nullptr;  // once
        continue;
      }
      for (size_t jb = 0; jb < nb; ++jb) {
        const auto dot = s.pair_rows ? (pattern == 0   ? dot_tile<0, 0, 0, true>
                                        : pattern == 1 ? dot_tile<0, 1, 1, true>
                                                       : dot_tile<1, 2, 3, true>)
                                     : (pattern == 0   ? dot_tile<0, 0, 0, false>
                                        : pattern == 1 ? dot_tile<0, 1, 1, false>
                                                       : dot_tile<1, 2, 3, false>);
        dot(sums_v + (j0 + jb) * kVK, tabs[jb], w_idx, codes_v, n_steps, sub_steps, step_v[jb]);
      }
    }
  }
  // every weight's bits at most those of 2^64 (non-negative, no NaN), else the exact check:
  // out is written only below, so a weight out of range leaves it untouched
  if (_mm512_reduce_max_epu32(w_top) > 0x5F800000u &&
      !weights_in_range(w, w_stride, n_q, n_rows, 0x1p64f)) {
    return false;
  }
  // back to channel order, 16 channels at a time (value_q8_channel): channel
  // 64 L + 16 v + 4 d + i is lane 4 L + d of sums[4 v + i] (plus lane 4 L + 8 + d when
  // pair_rows, L < 2); a 4 x 4 transpose in 128-bit lanes puts it in lane i of 128-bit lane L
  // of y[d], and a transpose of 128-bit lanes puts 128-bit lane L of y[0..3] in output L.
  const __m512 unscale = _mm512_setr_ps(  // channel c: 1 / kCodeMul[c % 4]
      1.0f / kCodeMul[0], 1.0f / kCodeMul[1], 1.0f / kCodeMul[2], 1.0f / kCodeMul[3],
      1.0f / kCodeMul[0], 1.0f / kCodeMul[1], 1.0f / kCodeMul[2], 1.0f / kCodeMul[3],
      1.0f / kCodeMul[0], 1.0f / kCodeMul[1], 1.0f / kCodeMul[2], 1.0f / kCodeMul[3],
      1.0f / kCodeMul[0], 1.0f / kCodeMul[1], 1.0f / kCodeMul[2], 1.0f / kCodeMul[3]);
  for (size_t j = 0; j < n_q; ++j) {
    alignas(64) float zero_sum[16] = {};
    for (size_t g = 0; g < n_groups; ++g) {
      zero_sum[g] = _mm512_reduce_add_ps(zsum_v[j * 4 + g]);
    }
    const __m512 zs = _mm512_load_ps(zero_sum);
    const __m512* x = sums_v + j * kVK;
    __m512 unpaired[kVK];  // pair_rows: sums[4 v + i] in lanes 0..7 (dot_tile's pairs split)
    if (s.pair_rows) {
      for (size_t p = 0; p < kVK / 2; ++p) {
        unpaired[2 * p] = x[p];
        unpaired[2 * p + 1] = _mm512_shuffle_f32x4(x[p], x[p], _MM_SHUFFLE(1, 0, 3, 2));
      }
      x = unpaired;
    }
    float* oj = out + j * head_dim;
    for (size_t v = 0; v < 4; ++v) {
      const __m512* xv = x + 4 * v;
      const __m512 t0 = _mm512_unpacklo_ps(xv[0], xv[1]), t1 = _mm512_unpackhi_ps(xv[0], xv[1]);
      const __m512 t2 = _mm512_unpacklo_ps(xv[2], xv[3]), t3 = _mm512_unpackhi_ps(xv[2], xv[3]);
      __m512 y[4] = {_mm512_shuffle_ps(t0, t2, _MM_SHUFFLE(1, 0, 1, 0)),
                     _mm512_shuffle_ps(t0, t2, _MM_SHUFFLE(3, 2, 3, 2)),
                     _mm512_shuffle_ps(t1, t3, _MM_SHUFFLE(1, 0, 1, 0)),
                     _mm512_shuffle_ps(t1, t3, _MM_SHUFFLE(3, 2, 3, 2))};
      const __m512 lo01 = _mm512_shuffle_f32x4(y[0], y[1], _MM_SHUFFLE(1, 0, 1, 0));
      const __m512 lo23 = _mm512_shuffle_f32x4(y[2], y[3], _MM_SHUFFLE(1, 0, 1, 0));
      const __m512 hi01 = _mm512_shuffle_f32x4(y[0], y[1], _MM_SHUFFLE(3, 2, 3, 2));
      const __m512 hi23 = _mm512_shuffle_f32x4(y[2], y[3], _MM_SHUFFLE(3, 2, 3, 2));
      const __m512 o[4] = {_mm512_shuffle_f32x4(lo01, lo23, _MM_SHUFFLE(2, 0, 2, 0)),
                           _mm512_shuffle_f32x4(lo01, lo23, _MM_SHUFFLE(3, 1, 3, 1)),
                           _mm512_shuffle_f32x4(hi01, hi23, _MM_SHUFFLE(2, 0, 2, 0)),
                           _mm512_shuffle_f32x4(hi01, hi23, _MM_SHUFFLE(3, 1, 3, 1))};
      for (size_t l = 0; l < head_dim / 64; ++l) {
        const size_t c = 64 * l + 16 * v;
        const __m512 z = _mm512_permutexvar_ps(_mm512_load_si512(plan.group_of + c), zs);
        const __m512 sum = _mm512_mul_ps(o[l], unscale);
        _mm512_storeu_ps(oj + c, _mm512_add_ps(_mm512_loadu_ps(oj + c), _mm512_add_ps(sum, z)));
      }
    }
  }
  return true;
}

}  // namespace
#endif  // SNAPKV_KIVI_VNNI

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
  return value_q8_shape(s, head_dim, group, bits) &&
         value_rows_q8(out, w, w_stride, n_q, codes, params, n_rows, head_dim, group, s);
#else
  (void)out, (void)w, (void)w_stride, (void)n_q, (void)codes, (void)params, (void)n_rows;
  (void)head_dim, (void)group, (void)bits;
  return false;
#endif
}

}  // namespace snapkv::SNAPKV_ISA
