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

#include "kv/kivi_kernels.h"
#include "util/isa.h"

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
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
inline void store_octet(float* dst, __m256 acc, float qz, size_t valid) {
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

template <int Bits>
void key_block_dot_dispatch(int nq, float* out, size_t out_stride, const float* qs,
                            size_t qs_stride, const float* qz, const uint8_t* words, size_t n_rows,
                            size_t head_dim) {
  switch (nq) {
    case 1:
      return key_block_dot_nq<1, Bits>(out, out_stride, qs, qs_stride, qz, words, n_rows, head_dim);
    case 2:
      return key_block_dot_nq<2, Bits>(out, out_stride, qs, qs_stride, qz, words, n_rows, head_dim);
    case 3:
      return key_block_dot_nq<3, Bits>(out, out_stride, qs, qs_stride, qz, words, n_rows, head_dim);
    default:
      return key_block_dot_nq<4, Bits>(out, out_stride, qs, qs_stride, qz, words, n_rows, head_dim);
  }
}

// NQ queries (<= 4) over value rows [0, n_rows); coef: [n_rows][n_groups][NQ] = w * scale.
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
      fma_queries<NQ>(acc0, coef + (r * n_groups + g0) * NQ, 1, x0);
      fma_queries<NQ>(acc1, coef + (r * n_groups + g1) * NQ, 1, x1);
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
      fma_queries<NQ>(acc0, coef + (r * n_groups + g0) * NQ, 1, x0);
    }
    store(acc0, wi);
  }
}

template <int Bits>
void value_tile_dispatch(int nq, float* out, size_t out_stride, const float* coef,
                         const uint8_t* codes, size_t n_rows, size_t head_dim, size_t group,
                         size_t n_groups) {
  switch (nq) {
    case 1:
      return value_tile_nq<1, Bits>(out, out_stride, coef, codes, n_rows, head_dim, group,
                                    n_groups);
    case 2:
      return value_tile_nq<2, Bits>(out, out_stride, coef, codes, n_rows, head_dim, group,
                                    n_groups);
    case 3:
      return value_tile_nq<3, Bits>(out, out_stride, coef, codes, n_rows, head_dim, group,
                                    n_groups);
    default:
      return value_tile_nq<4, Bits>(out, out_stride, coef, codes, n_rows, head_dim, group,
                                    n_groups);
  }
}

#endif  // SNAPKV_KIVI_AVX2

}  // namespace

void kivi_key_block_dot(float* out, size_t out_stride, const float* q, size_t n_q,
                        const float* scales, const float* zeros, const uint8_t* words,
                        size_t n_rows, size_t head_dim, int bits, float* scratch) {
#if SNAPKV_KIVI_AVX2
  // qs[j][c] = q[j][c] * scale[c]; qz[j] = sum_c q[j][c] * zero[c]
  float* qs = scratch;
  float* qz = scratch + n_q * head_dim;
  for (size_t j = 0; j < n_q; ++j) {
    float z = 0.0f;
    for (size_t c = 0; c < head_dim; ++c) {
      qs[j * head_dim + c] = q[j * head_dim + c] * scales[c];
      z += q[j * head_dim + c] * zeros[c];
    }
    qz[j] = z;
  }
  for (size_t j0 = 0; j0 < n_q; j0 += 4) {
    const int nq = static_cast<int>(std::min<size_t>(4, n_q - j0));
    float* o = out + j0 * out_stride;
    const float* s = qs + j0 * head_dim;
    if (bits == 2) {
      key_block_dot_dispatch<2>(nq, o, out_stride, s, head_dim, qz + j0, words, n_rows, head_dim);
    } else {
      key_block_dot_dispatch<4>(nq, o, out_stride, s, head_dim, qz + j0, words, n_rows, head_dim);
    }
  }
#else
  (void)scratch;
  kivi_key_block_dot_scalar(out, out_stride, q, n_q, scales, zeros, words, n_rows, head_dim, bits);
#endif
}

void kivi_value_rows_accumulate(float* out, const float* w, size_t w_stride, size_t n_q,
                                const uint8_t* codes, const KiviParams* params, size_t n_rows,
                                size_t head_dim, size_t group, int bits, float* scratch) {
#if SNAPKV_KIVI_AVX2
  const size_t n_groups = ceil_div(head_dim, group);
  const bool words_in_one_group = group % kKiviOctet == 0 || n_groups == 1;
  if (head_dim % kKiviOctet == 0 && words_in_one_group) {
    const size_t row_bytes = head_dim / kKiviOctet * kivi_word_bytes(bits);
    float* coef = scratch;                                       // [kKiviValueTile][n_groups][4]
    float* params32 = coef + kKiviValueTile * n_groups * 4;      // [kKiviValueTile][n_groups][2]
    float* zero_sum = params32 + kKiviValueTile * n_groups * 2;  // [n_q][n_groups] sum_r w * zero
    std::fill_n(zero_sum, n_q * n_groups, 0.0f);
    for (size_t j0 = 0; j0 < n_q; j0 += 4) {
      const size_t nq = std::min<size_t>(4, n_q - j0);
      for (size_t r0 = 0; r0 < n_rows; r0 += kKiviValueTile) {
        const size_t nr = std::min(kKiviValueTile, n_rows - r0);
        // the tile's params in fp32 at once (F16C): [nr][n_groups] (scale, zero) pairs
        fp16_to_fp32_n(params32, reinterpret_cast<const fp16_t*>(params + r0 * n_groups),
                       2 * nr * n_groups);
        for (size_t r = 0; r < nr; ++r) {
          for (size_t g = 0; g < n_groups; ++g) {
            const float scale = params32[2 * (r * n_groups + g)];
            const float zero = params32[2 * (r * n_groups + g) + 1];
            for (size_t j = 0; j < nq; ++j) {
              const float wj = w[(j0 + j) * w_stride + r0 + r];
              coef[(r * n_groups + g) * nq + j] = wj * scale;
              zero_sum[(j0 + j) * n_groups + g] += wj * zero;
            }
          }
        }
        const int inq = static_cast<int>(nq);
        if (bits == 2) {
          value_tile_dispatch<2>(inq, out + j0 * head_dim, head_dim, coef, codes + r0 * row_bytes,
                                 nr, head_dim, group, n_groups);
        } else {
          value_tile_dispatch<4>(inq, out + j0 * head_dim, head_dim, coef, codes + r0 * row_bytes,
                                 nr, head_dim, group, n_groups);
        }
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
