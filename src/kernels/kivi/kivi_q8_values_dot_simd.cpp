// The sums of one tile of the 2-bit integer KIVI value kernel (kivi_q8_values_simd.h), compiled
// once per ISA level; only the levels with AVX-512 VNNI define them.
#include <algorithm>

#include "kernels/kivi/kivi_q8_values_simd.h"

#if SNAPKV_KIVI_VNNI
namespace snapkv::SNAPKV_ISA::kivi_q8_values {
namespace {

// acc += vpdpbusd(u8 a, s8 b), in place: the asm keeps the accumulator in its register.
inline void dpbusd(__m512i& acc, __m512i a, const __m512i& b) {
#if defined(__GNUC__)
  __asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(a), "vm"(b));
#else
  acc = _mm512_dpbusd_epi32(acc, a, b);
#endif
}

// Code vectors 4 v .. 4 v + 3 of V_v: code i of each byte in place, times kCodeMul[i] (int8 <= 48),
// one shift for the four; computed in the sums for every query rather than stored (the masks
// issue beside the vpdpbusd).
struct CodeMasks {
  __m512i m03 = _mm512_set1_epi8(0x03), m0c = _mm512_set1_epi8(0x0C), m30 = _mm512_set1_epi8(0x30);
};

}  // namespace

template <int U1, int U2, int U3, bool Pair>
void dot_tile(__m512* sums, const __m512i (*tabs)[2], const int32_t (*w_idx)[4][16],
              const __m512i* codes, size_t n_steps, size_t sub_steps, const __m512* step_v) {
  const CodeMasks cm;
  __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0,
          a7 = a0, a8 = a0, a9 = a0, a10 = a0, a11 = a0, a12 = a0, a13 = a0, a14 = a0, a15 = a0;
  const auto four = [&](__m512i& b0, __m512i& b1, __m512i& b2, __m512i& b3, __m512i h, __m512i x) {
    dpbusd(b0, h, _mm512_and_si512(x, cm.m03));
    dpbusd(b1, h, _mm512_and_si512(x, cm.m0c));
    dpbusd(b2, h, _mm512_and_si512(x, cm.m30));
    dpbusd(b3, h, _mm512_and_si512(_mm512_srli_epi16(x, 2), cm.m30));
  };
  for (size_t sub = 0, st = 0; st < n_steps; ++sub) {
    const __m512i t0 = tabs[sub][0], t1 = tabs[sub][1];
    const size_t sub_end = std::min(n_steps, st + sub_steps);
    for (const int32_t(*wi)[16] = w_idx[0]; st < sub_end; ++st, wi += 4) {
      const __m512i* c = codes + st * 4;
      const auto pick = [&](int u) {
        return _mm512_permutex2var_epi32(t0, _mm512_load_si512(wi[u]), t1);
      };
      // one permute per distinct weight vector (vector v is the U_v-th distinct one)
      const __m512i h0 = pick(0);
      const __m512i h1 = U1 == 0 ? h0 : pick(U1);
      const __m512i h2 = U2 == 0 ? h0 : U2 == U1 ? h1 : pick(U2);
      const __m512i h3 = U3 == 0 ? h0 : U3 == U1 ? h1 : U3 == U2 ? h2 : pick(U3);
      four(a0, a1, a2, a3, h0, _mm512_load_si512(c));
      four(a4, a5, a6, a7, h1, _mm512_load_si512(c + 1));
      four(a8, a9, a10, a11, h2, _mm512_load_si512(c + 2));
      four(a12, a13, a14, a15, h3, _mm512_load_si512(c + 3));
    }
  }
  const __m512i acc[kVK] = {a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15};
  if (Pair) {  // lanes l and l + 8 of acc[k] are one channel: sums[p] = [acc[2 p] | acc[2 p + 1]]
    for (size_t p = 0; p < kVK / 2; ++p) {
      const __m512i x = acc[2 * p], y = acc[2 * p + 1];
      const __m512i both = _mm512_add_epi32(_mm512_shuffle_i64x2(x, y, _MM_SHUFFLE(1, 0, 1, 0)),
                                            _mm512_shuffle_i64x2(x, y, _MM_SHUFFLE(3, 2, 3, 2)));
      sums[p] = _mm512_fmadd_ps(step_v[p / 2], _mm512_cvtepi32_ps(both), sums[p]);
    }
  } else {
    for (size_t k = 0; k < kVK; ++k) {
      sums[k] = _mm512_fmadd_ps(step_v[k / 4], _mm512_cvtepi32_ps(acc[k]), sums[k]);
    }
  }
}

template <int U1, int U2, int U3, bool Pair>
void dot_quad(__m512* sums, const __m512i (*const* tabs)[2], const int32_t (*w_idx)[4][16],
              const __m512i* codes, size_t n_steps, size_t sub_steps, const __m512 (*step_v)[4],
              const NextTile& next, bool first) {
  const CodeMasks cm;
  for (size_t v = 0; v < 4; ++v) {
    const int u = v == 0 ? 0 : v == 1 ? U1 : v == 2 ? U2 : U3;
    __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0, b2 = a0,
            b3 = a0, c0 = a0, c1 = a0, c2 = a0, c3 = a0, d0 = a0, d1 = a0, d2 = a0, d3 = a0;
    for (size_t sub = 0, st = 0; st < n_steps; ++sub) {
      const __m512i ta0 = tabs[0][sub][0], ta1 = tabs[0][sub][1];
      const __m512i tb0 = tabs[1][sub][0], tb1 = tabs[1][sub][1];
      const __m512i tc0 = tabs[2][sub][0], tc1 = tabs[2][sub][1];
      const __m512i td0 = tabs[3][sub][0], td1 = tabs[3][sub][1];
      const size_t sub_end = std::min(n_steps, st + sub_steps);
      for (const int32_t(*wi)[16] = w_idx[0]; st < sub_end; ++st, wi += 4) {
        if (v == 0 && next.src != nullptr) {
          if (next.pf_codes != 0) {
            prefetch_t2(next.pf_codes + st * 256, 256);
            prefetch_t2(next.pf_params + st * next.pf_param_step, next.pf_param_step);
          }
          build_step(next.dst + st * 4, next.src + st * 256);
        }
        const __m512i x = _mm512_load_si512(codes + st * 4 + v);
        const __m512i k0 = _mm512_and_si512(x, cm.m03), k1 = _mm512_and_si512(x, cm.m0c);
        const __m512i k2 = _mm512_and_si512(x, cm.m30);
        const __m512i k3 = _mm512_and_si512(_mm512_srli_epi16(x, 2), cm.m30);
        const __m512i idx = _mm512_load_si512(wi[u]);
        const __m512i ha = _mm512_permutex2var_epi32(ta0, idx, ta1);
        dpbusd(a0, ha, k0), dpbusd(a1, ha, k1), dpbusd(a2, ha, k2), dpbusd(a3, ha, k3);
        const __m512i hb = _mm512_permutex2var_epi32(tb0, idx, tb1);
        dpbusd(b0, hb, k0), dpbusd(b1, hb, k1), dpbusd(b2, hb, k2), dpbusd(b3, hb, k3);
        const __m512i hc = _mm512_permutex2var_epi32(tc0, idx, tc1);
        dpbusd(c0, hc, k0), dpbusd(c1, hc, k1), dpbusd(c2, hc, k2), dpbusd(c3, hc, k3);
        const __m512i hd = _mm512_permutex2var_epi32(td0, idx, td1);
        dpbusd(d0, hd, k0), dpbusd(d1, hd, k1), dpbusd(d2, hd, k2), dpbusd(d3, hd, k3);
      }
    }
    const __m512i acc[4][4] = {
        {a0, a1, a2, a3}, {b0, b1, b2, b3}, {c0, c1, c2, c3}, {d0, d1, d2, d3}};
    for (size_t q = 0; q < 4; ++q) {
      __m512* sq = sums + q * kVK;
      if (Pair) {  // sums[2 v + i / 2] from acc[4 v + i] (i even) and acc[4 v + i + 1]
        for (size_t i = 0; i < 4; i += 2) {
          const __m512i x = acc[q][i], y = acc[q][i + 1];
          const __m512i both =
              _mm512_add_epi32(_mm512_shuffle_i64x2(x, y, _MM_SHUFFLE(1, 0, 1, 0)),
                               _mm512_shuffle_i64x2(x, y, _MM_SHUFFLE(3, 2, 3, 2)));
          const size_t p = 2 * v + i / 2;
          const __m512 f = _mm512_cvtepi32_ps(both);
          sq[p] = first ? _mm512_mul_ps(step_v[q][v], f) : _mm512_fmadd_ps(step_v[q][v], f, sq[p]);
        }
      } else {
        for (size_t i = 0; i < 4; ++i) {
          const __m512 f = _mm512_cvtepi32_ps(acc[q][i]);
          sq[4 * v + i] = first ? _mm512_mul_ps(step_v[q][v], f)
                                : _mm512_fmadd_ps(step_v[q][v], f, sq[4 * v + i]);
        }
      }
    }
  }
}

// The instantiations the driver calls (kivi_q8_values_simd.h).
template void dot_tile<0, 0, 0, true>(__m512* sums, const __m512i (*tabs)[2],
                                      const int32_t (*w_idx)[4][16], const __m512i* codes,
                                      size_t n_steps, size_t sub_steps, const __m512* step_v);
template void dot_tile<0, 1, 1, true>(__m512* sums, const __m512i (*tabs)[2],
                                      const int32_t (*w_idx)[4][16], const __m512i* codes,
                                      size_t n_steps, size_t sub_steps, const __m512* step_v);
template void dot_tile<1, 2, 3, true>(__m512* sums, const __m512i (*tabs)[2],
                                      const int32_t (*w_idx)[4][16], const __m512i* codes,
                                      size_t n_steps, size_t sub_steps, const __m512* step_v);
template void dot_tile<0, 0, 0, false>(__m512* sums, const __m512i (*tabs)[2],
                                       const int32_t (*w_idx)[4][16], const __m512i* codes,
                                       size_t n_steps, size_t sub_steps, const __m512* step_v);
template void dot_tile<0, 1, 1, false>(__m512* sums, const __m512i (*tabs)[2],
                                       const int32_t (*w_idx)[4][16], const __m512i* codes,
                                       size_t n_steps, size_t sub_steps, const __m512* step_v);
template void dot_tile<1, 2, 3, false>(__m512* sums, const __m512i (*tabs)[2],
                                       const int32_t (*w_idx)[4][16], const __m512i* codes,
                                       size_t n_steps, size_t sub_steps, const __m512* step_v);
template void dot_quad<0, 0, 0, true>(__m512* sums, const __m512i (*const* tabs)[2],
                                      const int32_t (*w_idx)[4][16], const __m512i* codes,
                                      size_t n_steps, size_t sub_steps, const __m512 (*step_v)[4],
                                      const NextTile& next, bool first);
template void dot_quad<0, 1, 1, true>(__m512* sums, const __m512i (*const* tabs)[2],
                                      const int32_t (*w_idx)[4][16], const __m512i* codes,
                                      size_t n_steps, size_t sub_steps, const __m512 (*step_v)[4],
                                      const NextTile& next, bool first);
template void dot_quad<1, 2, 3, true>(__m512* sums, const __m512i (*const* tabs)[2],
                                      const int32_t (*w_idx)[4][16], const __m512i* codes,
                                      size_t n_steps, size_t sub_steps, const __m512 (*step_v)[4],
                                      const NextTile& next, bool first);
template void dot_quad<0, 0, 0, false>(__m512* sums, const __m512i (*const* tabs)[2],
                                       const int32_t (*w_idx)[4][16], const __m512i* codes,
                                       size_t n_steps, size_t sub_steps, const __m512 (*step_v)[4],
                                       const NextTile& next, bool first);
template void dot_quad<0, 1, 1, false>(__m512* sums, const __m512i (*const* tabs)[2],
                                       const int32_t (*w_idx)[4][16], const __m512i* codes,
                                       size_t n_steps, size_t sub_steps, const __m512 (*step_v)[4],
                                       const NextTile& next, bool first);
template void dot_quad<1, 2, 3, false>(__m512* sums, const __m512i (*const* tabs)[2],
                                       const int32_t (*w_idx)[4][16], const __m512i* codes,
                                       size_t n_steps, size_t sub_steps, const __m512 (*step_v)[4],
                                       const NextTile& next, bool first);

}  // namespace snapkv::SNAPKV_ISA::kivi_q8_values
#endif  // SNAPKV_KIVI_VNNI
