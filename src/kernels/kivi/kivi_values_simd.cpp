// The float KIVI value kernels (kivi_kernels.h: kivi_value_rows_accumulate), compiled once per
// ISA level (kivi_simd.h). A value row stores 8 channels per word; a tile of rows is walked per
// pair of words with the output in registers; the zero term sum_r w_r * zero_(r,g) is added once
// per group. Levels with AVX-512 VNNI take the integer kernels of kivi_q8_values_simd.cpp (2-bit)
// and kivi_q16_values_simd.cpp (4-bit) first. The tile kernel is written on F8 (kernels/vec.h: one
// word of 8 channels per vector; at the NEON levels a pair of 4-lane registers), the AVX-512 level
// adds 16- and 32-channel forms.
#include "kernels/kivi/kivi_simd.h"

namespace snapkv::SNAPKV_ISA {
namespace {

#if SNAPKV_VEC

// NQ queries (<= 4) over value rows [0, n_rows); coef: [n_rows][n_groups][4] = w * scale.
// Requires head_dim % 8 == 0 and every word inside one group (group % 8 == 0 or one group).
template <int NQ, int Bits>
void value_tile_nq(float* out, size_t out_stride, const float* coef, const uint8_t* codes,
                   size_t n_rows, size_t head_dim, size_t group, size_t n_groups) {
  const size_t n_words = head_dim / kKiviOctet;
  const size_t row_bytes = n_words * Bits;
  auto group_of = [&](size_t word) { return std::min(word * kKiviOctet / group, n_groups - 1); };
  auto load_out = [&](F8(&acc)[NQ], size_t wi) {
    unroll<NQ>([&](auto j) { acc[j] = load<F8>(out + j * out_stride + wi * kKiviOctet); });
  };
  auto store_out = [&](const F8(&acc)[NQ], size_t wi) {
    unroll<NQ>([&](auto j) { store(out + j * out_stride + wi * kKiviOctet, acc[j]); });
  };
  size_t wi = 0;
  for (; wi + 2 <= n_words; wi += 2) {  // two words (16 channels) x NQ queries in registers
    const size_t g0 = group_of(wi), g1 = group_of(wi + 1);
    F8 acc0[NQ], acc1[NQ];
    load_out(acc0, wi);
    load_out(acc1, wi + 1);
    for (size_t r = 0; r < n_rows; ++r) {
      const uint8_t* row = codes + r * row_bytes;
      const F8 x0 = unpack8<Bits>(load_word<Bits>(row, wi));
      const F8 x1 = unpack8<Bits>(load_word<Bits>(row, wi + 1));
      fma_bcast<NQ>(acc0, coef + (r * n_groups + g0) * 4, 1, x0);
      fma_bcast<NQ>(acc1, coef + (r * n_groups + g1) * 4, 1, x1);
    }
    store_out(acc0, wi);
    store_out(acc1, wi + 1);
  }
  if (wi < n_words) {
    const size_t g0 = group_of(wi);
    F8 acc0[NQ];
    load_out(acc0, wi);
    for (size_t r = 0; r < n_rows; ++r) {
      const F8 x0 = unpack8<Bits>(load_word<Bits>(codes + r * row_bytes, wi));
      fma_bcast<NQ>(acc0, coef + (r * n_groups + g0) * 4, 1, x0);
    }
    store_out(acc0, wi);
  }
}

#if SNAPKV_VEC_AVX512

// The 16 codes of channels 16k .. 16k+15 of a value row (two words).
template <int Bits>
inline uint64_t value_pair_word(const uint8_t* row, size_t k) {
  uint64_t w = 0;
  std::memcpy(&w, row + 2 * k * Bits, 2 * Bits);
  return w;
}

// NQ queries (<= 4) over value rows [0, n_rows), 16 channels per vector, two vectors (32
// channels) per pass; coef: [n_rows][n_groups][4]. Requires head_dim % 16 == 0 and every 16
// channels inside one group (group % 16 == 0 or one group).
template <int NQ, int Bits>
void value_tile16_nq(float* out, size_t out_stride, const float* coef, const uint8_t* codes,
                     size_t n_rows, size_t head_dim, size_t group, size_t n_groups) {
  const size_t n_vec = head_dim / 16;
  const size_t row_bytes = head_dim / kKiviOctet * Bits;
  auto group_of = [&](size_t k) { return std::min(k * 16 / group, n_groups - 1); };
  auto load_out = [&](F16(&acc)[NQ], size_t k) {
    unroll<NQ>([&](auto j) { acc[j] = load<F16>(out + j * out_stride + k * 16); });
  };
  auto store_out = [&](const F16(&acc)[NQ], size_t k) {
    unroll<NQ>([&](auto j) { store(out + j * out_stride + k * 16, acc[j]); });
  };
  size_t k = 0;
  for (; k + 2 <= n_vec; k += 2) {
    const size_t g0 = group_of(k), g1 = group_of(k + 1);
    F16 acc0[NQ], acc1[NQ];
    load_out(acc0, k);
    load_out(acc1, k + 1);
    for (size_t r = 0; r < n_rows; ++r) {
      const uint8_t* row = codes + r * row_bytes;
      fma_bcast<NQ>(acc0, coef + (r * n_groups + g0) * 4, 1,
                    unpack16<Bits>(value_pair_word<Bits>(row, k)));
      fma_bcast<NQ>(acc1, coef + (r * n_groups + g1) * 4, 1,
                    unpack16<Bits>(value_pair_word<Bits>(row, k + 1)));
    }
    store_out(acc0, k);
    store_out(acc1, k + 1);
  }
  if (k < n_vec) {
    const size_t g0 = group_of(k);
    F16 acc0[NQ];
    load_out(acc0, k);
    for (size_t r = 0; r < n_rows; ++r) {
      fma_bcast<NQ>(acc0, coef + (r * n_groups + g0) * 4, 1,
                    unpack16<Bits>(value_pair_word<Bits>(codes + r * row_bytes, k)));
    }
    store_out(acc0, k);
  }
}

// coef[r][g][0..4) = w(j, r) * scale(r, g) and zero4[g][j] += w(j, r) * zero(r, g) for the nr
// (<= kKiviValueTile) rows of a tile with n_groups <= 4, a row at a time in one vector (the loop
// of kivi_value_rows_accumulate with its per-row gather of 4 weights through memory, a
// store-forwarding stall per row, does the same products and the same fma sequence per zero sum:
// identical results). w: nq (<= 4) weight rows at w_stride; params32: [nr][n_groups][2].
void tile_coefs(float* coef, float* zero4, const float* w, size_t w_stride, size_t nq,
                const float* params32, size_t nr, size_t n_groups) {
  alignas(64) float wq[kKiviValueTile * 4];  // [row][4] weights of the 4 queries
  for (size_t r0 = 0; r0 < nr; r0 += 16) {   // transpose 16 rows of the 4 weight rows
    const auto m = static_cast<__mmask16>(nr - r0 >= 16 ? 0xFFFFu : (1u << (nr - r0)) - 1u);
    __m512 a[4];
    for (size_t j = 0; j < 4; ++j) {
      a[j] = j < nq ? _mm512_maskz_loadu_ps(m, w + j * w_stride + r0) : _mm512_setzero_ps();
    }
    const auto pd = [](__m512 x) { return _mm512_castps_pd(x); };
    const __m512 ab_lo = _mm512_unpacklo_ps(a[0], a[1]), ab_hi = _mm512_unpackhi_ps(a[0], a[1]);
    const __m512 cd_lo = _mm512_unpacklo_ps(a[2], a[3]), cd_hi = _mm512_unpackhi_ps(a[2], a[3]);
    // t[k]: 128-bit lane L holds the quad of row 4 L + k
    const __m512 t0 = _mm512_castpd_ps(_mm512_unpacklo_pd(pd(ab_lo), pd(cd_lo)));
    const __m512 t1 = _mm512_castpd_ps(_mm512_unpackhi_pd(pd(ab_lo), pd(cd_lo)));
    const __m512 t2 = _mm512_castpd_ps(_mm512_unpacklo_pd(pd(ab_hi), pd(cd_hi)));
    const __m512 t3 = _mm512_castpd_ps(_mm512_unpackhi_pd(pd(ab_hi), pd(cd_hi)));
    const __m512 x01 = _mm512_shuffle_f32x4(t0, t1, 0x44), y01 = _mm512_shuffle_f32x4(t2, t3, 0x44);
    const __m512 x23 = _mm512_shuffle_f32x4(t0, t1, 0xEE), y23 = _mm512_shuffle_f32x4(t2, t3, 0xEE);
    _mm512_store_ps(wq + 4 * r0, _mm512_shuffle_f32x4(x01, y01, 0x88));       // rows 0 .. 3
    _mm512_store_ps(wq + 4 * r0 + 16, _mm512_shuffle_f32x4(x01, y01, 0xDD));  // rows 4 .. 7
    _mm512_store_ps(wq + 4 * r0 + 32, _mm512_shuffle_f32x4(x23, y23, 0x88));  // rows 8 .. 11
    _mm512_store_ps(wq + 4 * r0 + 48, _mm512_shuffle_f32x4(x23, y23, 0xDD));  // rows 12 .. 15
  }
  const __m512i sidx = _mm512_setr_epi32(0, 0, 0, 0, 2, 2, 2, 2, 4, 4, 4, 4, 6, 6, 6, 6);
  const __m512i zidx = _mm512_add_epi32(sidx, _mm512_set1_epi32(1));
  const auto gm = static_cast<__mmask16>((1u << (4 * n_groups)) - 1u);
  const auto pm = static_cast<__mmask8>((1u << (2 * n_groups)) - 1u);
  __m512 zacc = _mm512_maskz_loadu_ps(gm, zero4);
  for (size_t r = 0; r < nr; ++r) {
    const __m512 wv = _mm512_broadcast_f32x4(_mm_load_ps(wq + 4 * r));
    const __m512 p = _mm512_castps256_ps512(_mm256_maskz_loadu_ps(pm, params32 + 2 * r * n_groups));
    _mm512_mask_storeu_ps(coef + r * n_groups * 4, gm,
                          _mm512_mul_ps(wv, _mm512_permutexvar_ps(sidx, p)));
    zacc = _mm512_fmadd_ps(wv, _mm512_permutexvar_ps(zidx, p), zacc);
  }
  _mm512_mask_storeu_ps(zero4, gm, zacc);
}

// 4-bit value rows, NQ queries (<= 4), 32 channels (16 bytes of a row) per pass: one zero-extend
// of 16 bytes to dwords gives the even channels 32k + 2i (low nibble, masked) and the odd ones
// 32k + 2i + 1 (high nibble, shifted) of 16 lanes each, a third of unpack16's work per code; the
// sums run in that even / odd order and are interleaved back when stored. Each channel's sum is
// the same sequence of fmas as value_tile16_nq's. Requires head_dim % 32 == 0 and every 32
// channels inside one group (group % 32 == 0 or one group); coef as in value_tile16_nq.
template <int NQ>
void value_tile_nib_nq(float* out, size_t out_stride, const float* coef, const uint8_t* codes,
                       size_t n_rows, size_t head_dim, size_t group, size_t n_groups) {
  const size_t row_bytes = head_dim / 2;
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  const __m512i first = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m512i second =
      _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
  const __m512i low4 = _mm512_set1_epi32(15);
  for (size_t k = 0; k < head_dim / 32; ++k) {
    const size_t g = std::min(k * 32 / group, n_groups - 1);
    __m512 ev[NQ], od[NQ];
    unroll<NQ>([&](auto j) {
      const float* o = out + j * out_stride + 32 * k;
      const __m512 a = _mm512_loadu_ps(o), b = _mm512_loadu_ps(o + 16);
      ev[j] = _mm512_permutex2var_ps(a, even, b);
      od[j] = _mm512_permutex2var_ps(a, odd, b);
    });
    for (size_t r = 0; r < n_rows; ++r) {
      const __m512i x = _mm512_cvtepu8_epi32(
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(codes + r * row_bytes + 16 * k)));
      const float* cf = coef + (r * n_groups + g) * 4;
      fma_bcast<NQ>(ev, cf, 1, _mm512_cvtepi32_ps(_mm512_and_si512(x, low4)));
      fma_bcast<NQ>(od, cf, 1, _mm512_cvtepi32_ps(_mm512_srli_epi32(x, 4)));
    }
    unroll<NQ>([&](auto j) {
      float* o = out + j * out_stride + 32 * k;
      _mm512_storeu_ps(o, _mm512_permutex2var_ps(ev[j], first, od[j]));
      _mm512_storeu_ps(o + 16, _mm512_permutex2var_ps(ev[j], second, od[j]));
    });
  }
}

#endif  // SNAPKV_VEC_AVX512

#endif  // SNAPKV_VEC

}  // namespace

void kivi_value_rows_accumulate(float* out, const float* w, size_t w_stride, size_t n_q,
                                const uint8_t* codes, const KiviParams* params, size_t n_rows,
                                size_t head_dim, size_t group, int bits, float* scratch) {
  if (kivi_value_rows_accumulate_q8(out, w, w_stride, n_q, codes, params, n_rows, head_dim, group,
                                    bits)) {
    return;  // integer weighted sums (kivi_q8_values_simd.cpp)
  }
  if (kivi_value_rows_accumulate_q16(out, w, w_stride, n_q, codes, params, n_rows, head_dim, group,
                                     bits)) {
    return;  // 4-bit rows: int16 weights (kivi_q16_values_simd.cpp)
  }
#if SNAPKV_VEC
  // rows ahead of the tile being summed whose codes and params are prefetched
  constexpr size_t kPrefetchRows = 4 * kKiviValueTile;
  const size_t n_groups = ceil_div(head_dim, group);
  const bool words_in_one_group = group % kKiviOctet == 0 || n_groups == 1;
  if (head_dim % kKiviOctet == 0 && words_in_one_group) {
    const size_t row_bytes = head_dim / kKiviOctet * kivi_word_bytes(bits);
    float* coef = scratch;                                       // [kKiviValueTile][n_groups][4]
    float* params32 = coef + kKiviValueTile * n_groups * 4;      // [kKiviValueTile][n_groups][2]
    float* zero_sum = params32 + kKiviValueTile * n_groups * 2;  // [n_q][n_groups] sum_r w * zero
    float* zero4 = zero_sum + n_q * n_groups;                    // [n_groups][4] of one query group
    for (size_t j0 = 0; j0 < n_q; j0 += 4) {
      const size_t nq = std::min<size_t>(4, n_q - j0);
      std::fill_n(zero4, 4 * n_groups, 0.0f);
      for (size_t r0 = 0; r0 < n_rows; r0 += kKiviValueTile) {
        const size_t nr = std::min(kKiviValueTile, n_rows - r0);
        if (j0 == 0 && r0 + kPrefetchRows < n_rows) {  // codes, params kPrefetchRows ahead (T2)
          const size_t nf = std::min(kKiviValueTile, n_rows - r0 - kPrefetchRows);
          const auto* c = reinterpret_cast<const char*>(codes + (r0 + kPrefetchRows) * row_bytes);
          for (size_t b = 0; b < nf * row_bytes; b += 64) prefetch_t2(c + b);
          const auto* p = reinterpret_cast<const char*>(params + (r0 + kPrefetchRows) * n_groups);
          for (size_t b = 0; b < nf * n_groups * sizeof(KiviParams); b += 64) {
            prefetch_t2(p + b);
          }
        }
        // the tile's params in fp32 at once (F16C): [nr][n_groups] (scale, zero) pairs
        fp16_to_fp32_n(params32, reinterpret_cast<const fp16_t*>(params + r0 * n_groups),
                       2 * nr * n_groups);
        // coef[r][g][0..4) = w(j0 + j, r) * scale(r, g); zero4[g][j] += w(j0 + j, r) * zero(r, g)
#if SNAPKV_VEC_AVX512
        if (n_groups <= 4) {
          tile_coefs(coef, zero4, w + j0 * w_stride + r0, w_stride, nq, params32, nr, n_groups);
        }
        for (size_t r = 0; r < nr && n_groups > 4; ++r) {
#else
        for (size_t r = 0; r < nr; ++r) {
#endif
          alignas(16) float wr[4] = {0.0f, 0.0f, 0.0f, 0.0f};
          for (size_t j = 0; j < nq; ++j) wr[j] = w[(j0 + j) * w_stride + r0 + r];
          const F4 wv = load<F4>(wr);
          const float* p = params32 + 2 * r * n_groups;
          for (size_t g = 0; g < n_groups; ++g) {
            store(coef + (r * n_groups + g) * 4, mul(wv, set1<F4>(p[2 * g])));
            store(zero4 + 4 * g, fma(wv, set1<F4>(p[2 * g + 1]), load<F4>(zero4 + 4 * g)));
          }
        }
        const uint8_t* tile_codes = codes + r0 * row_bytes;
        float* o = out + j0 * head_dim;
        with_nq_bits(static_cast<int>(nq), bits, [&](auto n, auto b) {
          constexpr int kNq = decltype(n)::value, kBits = decltype(b)::value;
#if SNAPKV_VEC_AVX512
          if (kBits == 4 && head_dim % 32 == 0 && (group % 32 == 0 || n_groups == 1)) {
            value_tile_nib_nq<kNq>(o, head_dim, coef, tile_codes, nr, head_dim, group, n_groups);
            return;
          }
          if (head_dim % 16 == 0 && (group % 16 == 0 || n_groups == 1)) {
            value_tile16_nq<kNq, kBits>(o, head_dim, coef, tile_codes, nr, head_dim, group,
                                        n_groups);
            return;
          }
#endif
          value_tile_nq<kNq, kBits>(o, head_dim, coef, tile_codes, nr, head_dim, group, n_groups);
        });
      }
      for (size_t j = 0; j < nq; ++j) {
        for (size_t g = 0; g < n_groups; ++g) zero_sum[(j0 + j) * n_groups + g] = zero4[4 * g + j];
      }
    }
    for (size_t j = 0; j < n_q; ++j) {
      for (size_t c = 0; c < head_dim; ++c)
        out[j * head_dim + c] += zero_sum[j * n_groups + c / group];
    }
    return;
  }
#else
  (void)scratch;
#endif
  kivi_value_rows_accumulate_scalar(out, w, w_stride, n_q, codes, params, n_rows, head_dim, group,
                                    bits);
}

}  // namespace snapkv::SNAPKV_ISA
