// The AVX2 KIVI attention kernels (see kivi_kernels.h), compiled once per ISA level (util/isa.h);
// a level without AVX2+FMA runs the scalar twins (kivi_kernels.cpp). They decode one code word
// (8 codes) into 8 floats by table lookup, then feed up to 4 queries' FMAs from it, so the decode
// cost is shared by the query heads of a GQA group:
//   keys:   8 rows of one channel per word; out(8 rows) += (q_c * scale_c) * codes, no horizontal
//           sums; the zero term sum_c q_c * zero_c is added once per row.
//   values: 8 channels of one row per word; a tile of rows is walked per pair of words with the
//           output in registers; the zero term sum_r w_r * zero_(r,g) is added once per group.
#include <algorithm>
#include <cstring>
#include <type_traits>

#include "kv/codecs/kivi/kivi_kernels.h"
#include "util/isa.h"

#if defined(__AVX2__) && defined(__FMA__)
// GCC 12's AVX-512 intrinsics start from _mm512_undefined_*(), a self-initialised variable that
// -Wmaybe-uninitialized reports wherever they inline; silenced for the header's lines only.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#define SNAPKV_KIVI_AVX2 1
#endif

namespace snapkv::SNAPKV_ISA {
namespace {

#if SNAPKV_KIVI_AVX2

size_t ceil_div(size_t a, size_t b) {
  return (a + b - 1) / b;
}

// Word i of a packed array, inlined for the hot loops (kivi_load_word is the out-of-line twin).
template <int Bits>
inline uint32_t load_word(const uint8_t* words, size_t i) {
  if constexpr (Bits == 2) {
    uint16_t w;
    std::memcpy(&w, words + 2 * i, sizeof w);
    return w;
  } else {
    uint32_t w;
    std::memcpy(&w, words + 4 * i, sizeof w);
    return w;
  }
}

// Byte -> codes as floats: 2-bit bytes hold 4 codes, 4-bit bytes 2 (element k in bits b*k..).
template <int Bits>
struct CodeTable {
  static constexpr int kPerByte = 8 / Bits;
  alignas(16) float codes[256][kPerByte];
  constexpr CodeTable() : codes{} {
    for (int byte = 0; byte < 256; ++byte) {
      for (int k = 0; k < kPerByte; ++k) {
        codes[byte][k] = static_cast<float>((byte >> (Bits * k)) & ((1 << Bits) - 1));
      }
    }
  }
};
constexpr CodeTable<2> kCodes2;
constexpr CodeTable<4> kCodes4;

// The 8 codes of a word as 8 floats, by table lookup (4 KiB / 2 KiB, L1-resident): on AVX2
// cores with 128-bit units (Zen 1) this costs half the micro-ops of broadcast + variable shift +
// mask + convert, which made the unpack as expensive as the FMAs it feeds.
template <int Bits>
inline __m256 unpack8(uint32_t word) {
  if constexpr (Bits == 2) {
    const __m128 lo = _mm_load_ps(kCodes2.codes[word & 0xFFu]);
    const __m128 hi = _mm_load_ps(kCodes2.codes[(word >> 8) & 0xFFu]);
    return _mm256_insertf128_ps(_mm256_castps128_ps256(lo), hi, 1);
  } else {
    const auto pair = [](uint32_t byte) {
      return _mm_castpd_ps(_mm_load_sd(reinterpret_cast<const double*>(kCodes4.codes[byte])));
    };
    const __m128 lo = _mm_movelh_ps(pair(word & 0xFFu), pair((word >> 8) & 0xFFu));
    const __m128 hi = _mm_movelh_ps(pair((word >> 16) & 0xFFu), pair(word >> 24));
    return _mm256_insertf128_ps(_mm256_castps128_ps256(lo), hi, 1);
  }
}

// Writes the 8 row results of one octet (rows past n_rows are dropped): dst[0..valid) = acc + qz.
[[maybe_unused]] inline void store_octet(float* dst, __m256 acc, float qz, size_t valid) {
  const __m256 v = _mm256_add_ps(acc, _mm256_set1_ps(qz));
  if (valid == kKiviOctet) {
    _mm256_storeu_ps(dst, v);
  } else {
    alignas(32) float tmp[kKiviOctet];
    _mm256_store_ps(tmp, v);
    std::copy_n(tmp, valid, dst);
  }
}

// Up to four accumulators as named members: GCC keeps an __m256[NQ] array in memory and stores
// it on every iteration, named members stay in registers.
struct Acc4 {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(),
         a3 = _mm256_setzero_ps();
  __m256 get(int j) const { return j == 0 ? a0 : j == 1 ? a1 : j == 2 ? a2 : a3; }
};

// Runs f(NQ, Bits) with both as std::integral_constant, for nq in 1..4 (more: 4) and bits 2 or 4:
// the one place the kernels' runtime shape becomes their template arguments.
template <class F>
inline void with_nq_bits(int nq, int bits, F&& f) {
  const auto by_nq = [&](auto b) {
    switch (nq) {
      case 1:
        return f(std::integral_constant<int, 1>{}, b);
      case 2:
        return f(std::integral_constant<int, 2>{}, b);
      case 3:
        return f(std::integral_constant<int, 3>{}, b);
      default:
        return f(std::integral_constant<int, 4>{}, b);
    }
  };
  if (bits == 2) {
    by_nq(std::integral_constant<int, 2>{});
  } else {
    by_nq(std::integral_constant<int, 4>{});
  }
}

// acc.aj += broadcast(coef[j * stride]) * x for j < NQ.
template <int NQ>
inline void fma_queries(Acc4& acc, const float* coef, size_t stride, __m256 x) {
  acc.a0 = _mm256_fmadd_ps(_mm256_broadcast_ss(coef), x, acc.a0);
  if constexpr (NQ > 1) acc.a1 = _mm256_fmadd_ps(_mm256_broadcast_ss(coef + stride), x, acc.a1);
  if constexpr (NQ > 2) {
    acc.a2 = _mm256_fmadd_ps(_mm256_broadcast_ss(coef + 2 * stride), x, acc.a2);
  }
  if constexpr (NQ > 3) {
    acc.a3 = _mm256_fmadd_ps(_mm256_broadcast_ss(coef + 3 * stride), x, acc.a3);
  }
}

// The same for two inputs sharing each query's coefficient (two octets of a key block).
template <int NQ>
inline void fma_queries2(Acc4& p, Acc4& r, const float* coef, size_t stride, __m256 x0, __m256 x1) {
  __m256 b = _mm256_broadcast_ss(coef);
  p.a0 = _mm256_fmadd_ps(b, x0, p.a0);
  r.a0 = _mm256_fmadd_ps(b, x1, r.a0);
  if constexpr (NQ > 1) {
    b = _mm256_broadcast_ss(coef + stride);
    p.a1 = _mm256_fmadd_ps(b, x0, p.a1);
    r.a1 = _mm256_fmadd_ps(b, x1, r.a1);
  }
  if constexpr (NQ > 2) {
    b = _mm256_broadcast_ss(coef + 2 * stride);
    p.a2 = _mm256_fmadd_ps(b, x0, p.a2);
    r.a2 = _mm256_fmadd_ps(b, x1, r.a2);
  }
  if constexpr (NQ > 3) {
    b = _mm256_broadcast_ss(coef + 3 * stride);
    p.a3 = _mm256_fmadd_ps(b, x0, p.a3);
    r.a3 = _mm256_fmadd_ps(b, x1, r.a3);
  }
}

// NQ queries (<= 4) against every octet of a key block; qs: [NQ][qs_stride] = q * scale,
// qz: [NQ] = sum_c q * zero.
template <int NQ, int Bits>
void key_block_dot_nq(float* out, size_t out_stride, const float* qs, size_t qs_stride,
                      const float* qz, const uint8_t* words, size_t n_rows, size_t head_dim) {
  const size_t n_oct = ceil_div(n_rows, kKiviOctet);
  size_t oct = 0;
  for (; oct + 2 <= n_oct; oct += 2) {  // two octets at a time: 2 * NQ independent FMA chains
    Acc4 acc0, acc1;
    const uint8_t* w0 = words + oct * head_dim * Bits;
    const uint8_t* w1 = w0 + head_dim * Bits;
    for (size_t c = 0; c < head_dim; ++c) {
      const __m256 x0 = unpack8<Bits>(load_word<Bits>(w0, c));
      const __m256 x1 = unpack8<Bits>(load_word<Bits>(w1, c));
      fma_queries2<NQ>(acc0, acc1, qs + c, qs_stride, x0, x1);
    }
    for (int j = 0; j < NQ; ++j) {
      float* dst = out + static_cast<size_t>(j) * out_stride + oct * kKiviOctet;
      store_octet(dst, acc0.get(j), qz[j], kKiviOctet);
      store_octet(dst + kKiviOctet, acc1.get(j), qz[j],
                  std::min(kKiviOctet, n_rows - (oct + 1) * kKiviOctet));
    }
  }
  if (oct < n_oct) {
    Acc4 acc;
    const uint8_t* w0 = words + oct * head_dim * Bits;
    for (size_t c = 0; c < head_dim; ++c) {
      fma_queries<NQ>(acc, qs + c, qs_stride, unpack8<Bits>(load_word<Bits>(w0, c)));
    }
    for (int j = 0; j < NQ; ++j) {
      store_octet(out + static_cast<size_t>(j) * out_stride + oct * kKiviOctet, acc.get(j), qz[j],
                  n_rows - oct * kKiviOctet);
    }
  }
}

// NQ queries (<= 4) over value rows [0, n_rows); coef: [n_rows][n_groups][4] = w * scale.
// Requires head_dim % 8 == 0 and every word inside one group (group % 8 == 0 or one group).
template <int NQ, int Bits>
void value_tile_nq(float* out, size_t out_stride, const float* coef, const uint8_t* codes,
                   size_t n_rows, size_t head_dim, size_t group, size_t n_groups) {
  const size_t n_words = head_dim / kKiviOctet;
  const size_t row_bytes = n_words * Bits;
  auto group_of = [&](size_t word) { return std::min(word * kKiviOctet / group, n_groups - 1); };
  auto load = [&](Acc4& acc, size_t wi) {
    acc.a0 = _mm256_loadu_ps(out + wi * kKiviOctet);
    if constexpr (NQ > 1) acc.a1 = _mm256_loadu_ps(out + out_stride + wi * kKiviOctet);
    if constexpr (NQ > 2) acc.a2 = _mm256_loadu_ps(out + 2 * out_stride + wi * kKiviOctet);
    if constexpr (NQ > 3) acc.a3 = _mm256_loadu_ps(out + 3 * out_stride + wi * kKiviOctet);
  };
  auto store = [&](const Acc4& acc, size_t wi) {
    for (int j = 0; j < NQ; ++j) {
      _mm256_storeu_ps(out + static_cast<size_t>(j) * out_stride + wi * kKiviOctet, acc.get(j));
    }
  };
  size_t wi = 0;
  for (; wi + 2 <= n_words; wi += 2) {  // two words (16 channels) x NQ queries in registers
    const size_t g0 = group_of(wi), g1 = group_of(wi + 1);
    Acc4 acc0, acc1;
    load(acc0, wi);
    load(acc1, wi + 1);
    for (size_t r = 0; r < n_rows; ++r) {
      const uint8_t* row = codes + r * row_bytes;
      const __m256 x0 = unpack8<Bits>(load_word<Bits>(row, wi));
      const __m256 x1 = unpack8<Bits>(load_word<Bits>(row, wi + 1));
      fma_queries<NQ>(acc0, coef + (r * n_groups + g0) * 4, 1, x0);
      fma_queries<NQ>(acc1, coef + (r * n_groups + g1) * 4, 1, x1);
    }
    store(acc0, wi);
    store(acc1, wi + 1);
  }
  if (wi < n_words) {
    const size_t g0 = group_of(wi);
    Acc4 acc0;
    load(acc0, wi);
    for (size_t r = 0; r < n_rows; ++r) {
      const __m256 x0 = unpack8<Bits>(load_word<Bits>(codes + r * row_bytes, wi));
      fma_queries<NQ>(acc0, coef + (r * n_groups + g0) * 4, 1, x0);
    }
    store(acc0, wi);
  }
}

#if defined(__AVX512F__) && defined(__AVX512BW__)
#define SNAPKV_KIVI_AVX512 1

// 16 codes as 16 floats: Bits = 2: the 32-bit word `w` holds codes 0..15 at bits 2k; Bits = 4: the
// 64-bit `w` holds codes 0..15 at bits 4k. A variable shift per lane, a mask and a convert.
template <int Bits>
inline __m512 unpack16(uint64_t w) {
  if constexpr (Bits == 2) {
    const __m512i shifts =
        _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i v = _mm512_srlv_epi32(_mm512_set1_epi32(static_cast<int>(w)), shifts);
    return _mm512_cvtepi32_ps(_mm512_and_si512(v, _mm512_set1_epi32(3)));
  } else {
    const __m512i shifts =
        _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 0, 4, 8, 12, 16, 20, 24, 28);
    const __m512i halves = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    const __m512i both = _mm512_permutexvar_epi32(
        halves, _mm512_zextsi128_si512(_mm_cvtsi64_si128(static_cast<long long>(w))));
    const __m512i v = _mm512_srlv_epi32(both, shifts);
    return _mm512_cvtepi32_ps(_mm512_and_si512(v, _mm512_set1_epi32(15)));
  }
}

struct Acc4x16 {
  __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps(), a2 = _mm512_setzero_ps(),
         a3 = _mm512_setzero_ps();
  __m512 get(int j) const { return j == 0 ? a0 : j == 1 ? a1 : j == 2 ? a2 : a3; }
};

// acc.aj += coef[j * stride] * x for j < NQ.
template <int NQ>
inline void fma16(Acc4x16& acc, const float* coef, size_t stride, __m512 x) {
  acc.a0 = _mm512_fmadd_ps(_mm512_set1_ps(coef[0]), x, acc.a0);
  if constexpr (NQ > 1) acc.a1 = _mm512_fmadd_ps(_mm512_set1_ps(coef[stride]), x, acc.a1);
  if constexpr (NQ > 2) acc.a2 = _mm512_fmadd_ps(_mm512_set1_ps(coef[2 * stride]), x, acc.a2);
  if constexpr (NQ > 3) acc.a3 = _mm512_fmadd_ps(_mm512_set1_ps(coef[3 * stride]), x, acc.a3);
}

// The codes of rows 16p .. 16p+15 of channel c in a key block (two octets; the second one past
// the block's last octet reads as 0).
template <int Bits>
inline uint64_t key_pair_word(const uint8_t* words, size_t pair, size_t n_oct, size_t c,
                              size_t head_dim) {
  const uint8_t* w0 = words + (2 * pair) * head_dim * Bits;
  const uint64_t lo = load_word<Bits>(w0, c);
  const uint64_t hi = 2 * pair + 1 < n_oct ? load_word<Bits>(w0 + head_dim * Bits, c) : 0;
  return lo | (hi << (8 * Bits));
}

// NQ queries (<= 4) against a key block, 16 rows (two octets) per vector, two vectors (32 rows, a
// whole block of G = 32) per pass; qs, qz as in key_block_dot_nq.
template <int NQ, int Bits>
void key_block_dot16_nq(float* out, size_t out_stride, const float* qs, size_t qs_stride,
                        const float* qz, const uint8_t* words, size_t n_rows, size_t head_dim) {
  const size_t n_oct = ceil_div(n_rows, kKiviOctet);
  const size_t n_pairs = ceil_div(n_oct, 2);
  auto store = [&](const Acc4x16& acc, size_t pair) {
    const size_t row0 = pair * 16;
    const size_t valid = std::min<size_t>(16, n_rows - row0);
    const __mmask16 mask = static_cast<__mmask16>((1u << valid) - 1u);
    for (int j = 0; j < NQ; ++j) {
      const __m512 v = _mm512_add_ps(acc.get(j), _mm512_set1_ps(qz[j]));
      _mm512_mask_storeu_ps(out + static_cast<size_t>(j) * out_stride + row0, mask, v);
    }
  };
  size_t p = 0;
  for (; p + 2 <= n_pairs; p += 2) {
    Acc4x16 acc0, acc1;
    for (size_t c = 0; c < head_dim; ++c) {
      const __m512 x0 = unpack16<Bits>(key_pair_word<Bits>(words, p, n_oct, c, head_dim));
      const __m512 x1 = unpack16<Bits>(key_pair_word<Bits>(words, p + 1, n_oct, c, head_dim));
      fma16<NQ>(acc0, qs + c, qs_stride, x0);
      fma16<NQ>(acc1, qs + c, qs_stride, x1);
    }
    store(acc0, p);
    store(acc1, p + 1);
  }
  if (p < n_pairs) {
    Acc4x16 acc0;
    for (size_t c = 0; c < head_dim; ++c) {
      fma16<NQ>(acc0, qs + c, qs_stride,
                unpack16<Bits>(key_pair_word<Bits>(words, p, n_oct, c, head_dim)));
    }
    store(acc0, p);
  }
}

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
  auto load = [&](Acc4x16& acc, size_t k) {
    acc.a0 = _mm512_loadu_ps(out + k * 16);
    if constexpr (NQ > 1) acc.a1 = _mm512_loadu_ps(out + out_stride + k * 16);
    if constexpr (NQ > 2) acc.a2 = _mm512_loadu_ps(out + 2 * out_stride + k * 16);
    if constexpr (NQ > 3) acc.a3 = _mm512_loadu_ps(out + 3 * out_stride + k * 16);
  };
  auto store = [&](const Acc4x16& acc, size_t k) {
    for (int j = 0; j < NQ; ++j) {
      _mm512_storeu_ps(out + static_cast<size_t>(j) * out_stride + k * 16, acc.get(j));
    }
  };
  size_t k = 0;
  for (; k + 2 <= n_vec; k += 2) {
    const size_t g0 = group_of(k), g1 = group_of(k + 1);
    Acc4x16 acc0, acc1;
    load(acc0, k);
    load(acc1, k + 1);
    for (size_t r = 0; r < n_rows; ++r) {
      const uint8_t* row = codes + r * row_bytes;
      fma16<NQ>(acc0, coef + (r * n_groups + g0) * 4, 1,
                unpack16<Bits>(value_pair_word<Bits>(row, k)));
      fma16<NQ>(acc1, coef + (r * n_groups + g1) * 4, 1,
                unpack16<Bits>(value_pair_word<Bits>(row, k + 1)));
    }
    store(acc0, k);
    store(acc1, k + 1);
  }
  if (k < n_vec) {
    const size_t g0 = group_of(k);
    Acc4x16 acc0;
    load(acc0, k);
    for (size_t r = 0; r < n_rows; ++r) {
      fma16<NQ>(acc0, coef + (r * n_groups + g0) * 4, 1,
                unpack16<Bits>(value_pair_word<Bits>(codes + r * row_bytes, k)));
    }
    store(acc0, k);
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
    Acc4x16 ev, od;
    for (int j = 0; j < NQ; ++j) {
      const float* o = out + static_cast<size_t>(j) * out_stride + 32 * k;
      const __m512 a = _mm512_loadu_ps(o), b = _mm512_loadu_ps(o + 16);
      const __m512 e = _mm512_permutex2var_ps(a, even, b), d = _mm512_permutex2var_ps(a, odd, b);
      if (j == 0) ev.a0 = e, od.a0 = d;
      if (j == 1) ev.a1 = e, od.a1 = d;
      if (j == 2) ev.a2 = e, od.a2 = d;
      if (j == 3) ev.a3 = e, od.a3 = d;
    }
    for (size_t r = 0; r < n_rows; ++r) {
      const __m512i x = _mm512_cvtepu8_epi32(
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(codes + r * row_bytes + 16 * k)));
      const float* cf = coef + (r * n_groups + g) * 4;
      fma16<NQ>(ev, cf, 1, _mm512_cvtepi32_ps(_mm512_and_si512(x, low4)));
      fma16<NQ>(od, cf, 1, _mm512_cvtepi32_ps(_mm512_srli_epi32(x, 4)));
    }
    for (int j = 0; j < NQ; ++j) {
      float* o = out + static_cast<size_t>(j) * out_stride + 32 * k;
      _mm512_storeu_ps(o, _mm512_permutex2var_ps(ev.get(j), first, od.get(j)));
      _mm512_storeu_ps(o + 16, _mm512_permutex2var_ps(ev.get(j), second, od.get(j)));
    }
  }
}

#endif  // AVX-512

#endif  // SNAPKV_KIVI_AVX2

}  // namespace

void kivi_key_block_dot(float* out, size_t out_stride, const float* q, size_t n_q,
                        const float* scales, const float* zeros, const uint8_t* words,
                        size_t n_rows, size_t head_dim, int bits, float* scratch) {
  if (kivi_key_block_dot_q8(out, out_stride, q, n_q, scales, zeros, words, n_rows, head_dim, bits,
                            scratch)) {
    return;  // integer dot products (kivi_q8_simd.cpp)
  }
#if SNAPKV_KIVI_AVX2
  // qs[j][c] = q[j][c] * scale[c]; qz[j] = sum_c q[j][c] * zero[c]
  float* qs = scratch;
  float* qz = scratch + n_q * head_dim;
  for (size_t j = 0; j < n_q; ++j) {
    const float* qj = q + j * head_dim;
    __m256 z8 = _mm256_setzero_ps();
    size_t c = 0;
    for (; c + 8 <= head_dim; c += 8) {
      const __m256 qv = _mm256_loadu_ps(qj + c);
      _mm256_storeu_ps(qs + j * head_dim + c, _mm256_mul_ps(qv, _mm256_loadu_ps(scales + c)));
      z8 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(zeros + c), z8);
    }
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, z8);
    float z = 0.0f;
    for (float x : lanes) z += x;
    for (; c < head_dim; ++c) {
      qs[j * head_dim + c] = qj[c] * scales[c];
      z += qj[c] * zeros[c];
    }
    qz[j] = z;
  }
  for (size_t j0 = 0; j0 < n_q; j0 += 4) {
    const int nq = static_cast<int>(std::min<size_t>(4, n_q - j0));
    float* o = out + j0 * out_stride;
    const float* s = qs + j0 * head_dim;
    with_nq_bits(nq, bits, [&](auto n, auto b) {
      constexpr int kNq = decltype(n)::value, kBits = decltype(b)::value;
#if SNAPKV_KIVI_AVX512
      key_block_dot16_nq<kNq, kBits>(o, out_stride, s, head_dim, qz + j0, words, n_rows, head_dim);
#else
      key_block_dot_nq<kNq, kBits>(o, out_stride, s, head_dim, qz + j0, words, n_rows, head_dim);
#endif
    });
  }
#else
  (void)scratch;
  kivi_key_block_dot_scalar(out, out_stride, q, n_q, scales, zeros, words, n_rows, head_dim, bits);
#endif
}

void kivi_value_rows_accumulate(float* out, const float* w, size_t w_stride, size_t n_q,
                                const uint8_t* codes, const KiviParams* params, size_t n_rows,
                                size_t head_dim, size_t group, int bits, float* scratch) {
  if (kivi_value_rows_accumulate_q8(out, w, w_stride, n_q, codes, params, n_rows, head_dim, group,
                                    bits)) {
    return;  // integer weighted sums (kivi_q8_simd.cpp)
  }
  if (kivi_value_rows_accumulate_q16(out, w, w_stride, n_q, codes, params, n_rows, head_dim, group,
                                     bits)) {
    return;  // 4-bit rows: int16 weights (kivi_q16_values_simd.cpp)
  }
#if SNAPKV_KIVI_AVX2
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
          for (size_t b = 0; b < nf * row_bytes; b += 64) _mm_prefetch(c + b, _MM_HINT_T2);
          const auto* p = reinterpret_cast<const char*>(params + (r0 + kPrefetchRows) * n_groups);
          for (size_t b = 0; b < nf * n_groups * sizeof(KiviParams); b += 64) {
            _mm_prefetch(p + b, _MM_HINT_T2);
          }
        }
        // the tile's params in fp32 at once (F16C): [nr][n_groups] (scale, zero) pairs
        fp16_to_fp32_n(params32, reinterpret_cast<const fp16_t*>(params + r0 * n_groups),
                       2 * nr * n_groups);
        // coef[r][g][0..4) = w(j0 + j, r) * scale(r, g); zero4[g][j] += w(j0 + j, r) * zero(r, g)
#if SNAPKV_KIVI_AVX512
        if (n_groups <= 4) {
          tile_coefs(coef, zero4, w + j0 * w_stride + r0, w_stride, nq, params32, nr, n_groups);
        }
        for (size_t r = 0; r < nr && n_groups > 4; ++r) {
#else
        for (size_t r = 0; r < nr; ++r) {
#endif
          alignas(16) float wr[4] = {0.0f, 0.0f, 0.0f, 0.0f};
          for (size_t j = 0; j < nq; ++j) wr[j] = w[(j0 + j) * w_stride + r0 + r];
          const __m128 wv = _mm_load_ps(wr);
          const float* p = params32 + 2 * r * n_groups;
          for (size_t g = 0; g < n_groups; ++g) {
            _mm_storeu_ps(coef + (r * n_groups + g) * 4, _mm_mul_ps(wv, _mm_set1_ps(p[2 * g])));
            const __m128 z = _mm_loadu_ps(zero4 + 4 * g);
            _mm_storeu_ps(zero4 + 4 * g, _mm_fmadd_ps(wv, _mm_set1_ps(p[2 * g + 1]), z));
          }
        }
        const uint8_t* tile_codes = codes + r0 * row_bytes;
        float* o = out + j0 * head_dim;
        with_nq_bits(static_cast<int>(nq), bits, [&](auto n, auto b) {
          constexpr int kNq = decltype(n)::value, kBits = decltype(b)::value;
#if SNAPKV_KIVI_AVX512
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
