// KIVI attention kernels (see kivi_kernels.h). The AVX2 versions decode one code word (8 codes)
// with a broadcast, a variable shift, a mask and an int->float convert, then feed up to 4 queries'
// FMAs from it, so the decode cost is shared by the query heads of a GQA group:
//   keys:   8 rows of one channel per word; out(8 rows) += (q_c * scale_c) * codes, no horizontal
//           sums; the zero term sum_c q_c * zero_c is added once per row.
//   values: 8 channels of one row per word; a tile of rows is walked per pair of words with the
//           output in registers; the zero term sum_r w_r * zero_(r,g) is added once per group.
#include "kv/kivi_kernels.h"

#include <algorithm>
#include <vector>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define SNAPKV_KIVI_AVX2 1
#endif

namespace snapkv {
namespace {

size_t ceil_div(size_t a, size_t b) {
  return (a + b - 1) / b;
}

uint32_t code_at(uint32_t word, size_t k, int bits) {
  return (word >> (static_cast<uint32_t>(bits) * k)) & kivi_max_code(bits);
}

#if SNAPKV_KIVI_AVX2

// The 8 codes of a word as 8 floats.
inline __m256 unpack8(uint32_t word, __m256i shifts, __m256i mask) {
  const __m256i v = _mm256_set1_epi32(static_cast<int>(word));
  return _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srlv_epi32(v, shifts), mask));
}

inline __m256i word_shifts(int bits) {
  return bits == 2 ? _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14)
                   : _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
}

// NQ queries (<= 4) against every octet of a key block; qs: [NQ][head_dim] = q * scale,
// qz: [NQ] = sum_c q * zero.
template <int NQ, int Bits>
void key_block_dot_nq(float* out, size_t out_stride, const float* qs, size_t qs_stride,
                      const float* qz, const uint8_t* words, size_t n_rows, size_t head_dim) {
  const __m256i shifts = word_shifts(Bits);
  const __m256i mask = _mm256_set1_epi32(static_cast<int>(kivi_max_code(Bits)));
  const size_t n_oct = ceil_div(n_rows, kKiviOctet);
  auto emit = [&](const __m256* acc, size_t oct) {
    const size_t row0 = oct * kKiviOctet;
    const size_t valid = std::min(kKiviOctet, n_rows - row0);
    for (int j = 0; j < NQ; ++j) {
      const __m256 v = _mm256_add_ps(acc[j], _mm256_set1_ps(qz[j]));
      float* dst = out + static_cast<size_t>(j) * out_stride + row0;
      if (valid == kKiviOctet) {
        _mm256_storeu_ps(dst, v);
      } else {
        alignas(32) float tmp[kKiviOctet];
        _mm256_store_ps(tmp, v);
        std::copy_n(tmp, valid, dst);
      }
    }
  };
  size_t oct = 0;
  for (; oct + 2 <= n_oct; oct += 2) {  // two octets at a time: 2 * NQ independent FMA chains
    __m256 acc0[NQ], acc1[NQ];
    for (int j = 0; j < NQ; ++j) acc0[j] = acc1[j] = _mm256_setzero_ps();
    const uint8_t* w0 = words + oct * head_dim * Bits;
    const uint8_t* w1 = w0 + head_dim * Bits;
    for (size_t c = 0; c < head_dim; ++c) {
      const __m256 x0 = unpack8(kivi_load_word(w0, c, Bits), shifts, mask);
      const __m256 x1 = unpack8(kivi_load_word(w1, c, Bits), shifts, mask);
      for (int j = 0; j < NQ; ++j) {
        const __m256 b = _mm256_broadcast_ss(qs + static_cast<size_t>(j) * qs_stride + c);
        acc0[j] = _mm256_fmadd_ps(b, x0, acc0[j]);
        acc1[j] = _mm256_fmadd_ps(b, x1, acc1[j]);
      }
    }
    emit(acc0, oct);
    emit(acc1, oct + 1);
  }
  if (oct < n_oct) {
    __m256 acc[NQ];
    for (int j = 0; j < NQ; ++j) acc[j] = _mm256_setzero_ps();
    const uint8_t* w0 = words + oct * head_dim * Bits;
    for (size_t c = 0; c < head_dim; ++c) {
      const __m256 x0 = unpack8(kivi_load_word(w0, c, Bits), shifts, mask);
      for (int j = 0; j < NQ; ++j) {
        const __m256 b = _mm256_broadcast_ss(qs + static_cast<size_t>(j) * qs_stride + c);
        acc[j] = _mm256_fmadd_ps(b, x0, acc[j]);
      }
    }
    emit(acc, oct);
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

constexpr size_t kValueTile = 32;  // rows per tile: codes stay in L1 while the words are walked

// NQ queries (<= 4) over value rows [0, n_rows); coef: [n_rows][n_groups][NQ] = w * scale.
// Requires head_dim % 8 == 0 and every word inside one group (group % 8 == 0 or one group).
template <int NQ, int Bits>
void value_tile_nq(float* out, size_t out_stride, const float* coef, const uint8_t* codes,
                   size_t n_rows, size_t head_dim, size_t group, size_t n_groups) {
  const __m256i shifts = word_shifts(Bits);
  const __m256i mask = _mm256_set1_epi32(static_cast<int>(kivi_max_code(Bits)));
  const size_t n_words = head_dim / kKiviOctet;
  const size_t row_bytes = n_words * Bits;
  auto group_of = [&](size_t word) { return std::min(word * kKiviOctet / group, n_groups - 1); };
  size_t wi = 0;
  for (; wi + 2 <= n_words; wi += 2) {
    const size_t g0 = group_of(wi), g1 = group_of(wi + 1);
    __m256 acc0[NQ], acc1[NQ];
    for (int j = 0; j < NQ; ++j) {
      acc0[j] = _mm256_loadu_ps(out + static_cast<size_t>(j) * out_stride + wi * kKiviOctet);
      acc1[j] = _mm256_loadu_ps(out + static_cast<size_t>(j) * out_stride + wi * kKiviOctet + 8);
    }
    for (size_t r = 0; r < n_rows; ++r) {
      const uint8_t* row = codes + r * row_bytes;
      const __m256 x0 = unpack8(kivi_load_word(row, wi, Bits), shifts, mask);
      const __m256 x1 = unpack8(kivi_load_word(row, wi + 1, Bits), shifts, mask);
      const float* c0 = coef + (r * n_groups + g0) * NQ;
      const float* c1 = coef + (r * n_groups + g1) * NQ;
      for (int j = 0; j < NQ; ++j) {
        acc0[j] = _mm256_fmadd_ps(_mm256_broadcast_ss(c0 + j), x0, acc0[j]);
        acc1[j] = _mm256_fmadd_ps(_mm256_broadcast_ss(c1 + j), x1, acc1[j]);
      }
    }
    for (int j = 0; j < NQ; ++j) {
      _mm256_storeu_ps(out + static_cast<size_t>(j) * out_stride + wi * kKiviOctet, acc0[j]);
      _mm256_storeu_ps(out + static_cast<size_t>(j) * out_stride + wi * kKiviOctet + 8, acc1[j]);
    }
  }
  if (wi < n_words) {
    const size_t g0 = group_of(wi);
    __m256 acc0[NQ];
    for (int j = 0; j < NQ; ++j) {
      acc0[j] = _mm256_loadu_ps(out + static_cast<size_t>(j) * out_stride + wi * kKiviOctet);
    }
    for (size_t r = 0; r < n_rows; ++r) {
      const __m256 x0 = unpack8(kivi_load_word(codes + r * row_bytes, wi, Bits), shifts, mask);
      const float* c0 = coef + (r * n_groups + g0) * NQ;
      for (int j = 0; j < NQ; ++j) {
        acc0[j] = _mm256_fmadd_ps(_mm256_broadcast_ss(c0 + j), x0, acc0[j]);
      }
    }
    for (int j = 0; j < NQ; ++j) {
      _mm256_storeu_ps(out + static_cast<size_t>(j) * out_stride + wi * kKiviOctet, acc0[j]);
    }
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

void kivi_key_block_dot_scalar(float* out, size_t out_stride, const float* q, size_t n_q,
                               const float* scales, const float* zeros, const uint8_t* words,
                               size_t n_rows, size_t head_dim, int bits) {
  for (size_t r = 0; r < n_rows; ++r) {
    const uint8_t* oct_words = words + (r / kKiviOctet) * head_dim * kivi_word_bytes(bits);
    const size_t k = r % kKiviOctet;
    for (size_t j = 0; j < n_q; ++j) {
      float sum = 0.0f;
      for (size_t c = 0; c < head_dim; ++c) {
        const uint32_t code = code_at(kivi_load_word(oct_words, c, bits), k, bits);
        sum += q[j * head_dim + c] * kivi_decode(code, scales[c], zeros[c]);
      }
      out[j * out_stride + r] = sum;
    }
  }
}

void kivi_key_block_dot(float* out, size_t out_stride, const float* q, size_t n_q,
                        const float* scales, const float* zeros, const uint8_t* words,
                        size_t n_rows, size_t head_dim, int bits) {
#if SNAPKV_KIVI_AVX2
  // qs[j][c] = q[j][c] * scale[c]; qz[j] = sum_c q[j][c] * zero[c]. thread_local: one buffer per
  // worker, reused across blocks and calls (concurrent stores never share it).
  thread_local std::vector<float> qs;
  thread_local std::vector<float> qz;
  qs.resize(n_q * head_dim);
  qz.resize(n_q);
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
    const float* s = qs.data() + j0 * head_dim;
    if (bits == 2) {
      key_block_dot_dispatch<2>(nq, o, out_stride, s, head_dim, qz.data() + j0, words, n_rows,
                                head_dim);
    } else {
      key_block_dot_dispatch<4>(nq, o, out_stride, s, head_dim, qz.data() + j0, words, n_rows,
                                head_dim);
    }
  }
#else
  kivi_key_block_dot_scalar(out, out_stride, q, n_q, scales, zeros, words, n_rows, head_dim, bits);
#endif
}

void kivi_key_block_decode(float* out, const float* scales, const float* zeros,
                           const uint8_t* words, size_t row_begin, size_t row_end, size_t head_dim,
                           int bits) {
  for (size_t r = row_begin; r < row_end; ++r) {
    const uint8_t* oct_words = words + (r / kKiviOctet) * head_dim * kivi_word_bytes(bits);
    const size_t k = r % kKiviOctet;
    float* dst = out + (r - row_begin) * head_dim;
    for (size_t c = 0; c < head_dim; ++c) {
      dst[c] =
          kivi_decode(code_at(kivi_load_word(oct_words, c, bits), k, bits), scales[c], zeros[c]);
    }
  }
}

void kivi_value_rows_accumulate_scalar(float* out, const float* w, size_t w_stride, size_t n_q,
                                       const uint8_t* codes, const KiviParams* params,
                                       size_t n_rows, size_t head_dim, size_t group, int bits) {
  const size_t n_words = ceil_div(head_dim, kKiviOctet);
  const size_t n_groups = ceil_div(head_dim, group);
  const size_t row_bytes = n_words * kivi_word_bytes(bits);
  for (size_t r = 0; r < n_rows; ++r) {
    const uint8_t* row = codes + r * row_bytes;
    const KiviParams* p = params + r * n_groups;
    for (size_t c = 0; c < head_dim; ++c) {
      const uint32_t code =
          code_at(kivi_load_word(row, c / kKiviOctet, bits), c % kKiviOctet, bits);
      const float x = kivi_decode(code, p[c / group]);
      for (size_t j = 0; j < n_q; ++j) out[j * head_dim + c] += w[j * w_stride + r] * x;
    }
  }
}

void kivi_value_rows_accumulate(float* out, const float* w, size_t w_stride, size_t n_q,
                                const uint8_t* codes, const KiviParams* params, size_t n_rows,
                                size_t head_dim, size_t group, int bits) {
#if SNAPKV_KIVI_AVX2
  const size_t n_groups = ceil_div(head_dim, group);
  const bool words_in_one_group = group % kKiviOctet == 0 || n_groups == 1;
  if (head_dim % kKiviOctet == 0 && words_in_one_group) {
    const size_t row_bytes = head_dim / kKiviOctet * kivi_word_bytes(bits);
    thread_local std::vector<float> coef;      // [kValueTile][n_groups][4]
    thread_local std::vector<float> zero_sum;  // [n_q][n_groups] sum_r w * zero
    coef.resize(kValueTile * n_groups * 4);
    zero_sum.assign(n_q * n_groups, 0.0f);
    for (size_t j0 = 0; j0 < n_q; j0 += 4) {
      const size_t nq = std::min<size_t>(4, n_q - j0);
      for (size_t r0 = 0; r0 < n_rows; r0 += kValueTile) {
        const size_t nr = std::min(kValueTile, n_rows - r0);
        for (size_t r = 0; r < nr; ++r) {
          const KiviParams* p = params + (r0 + r) * n_groups;
          for (size_t g = 0; g < n_groups; ++g) {
            const float scale = fp16_to_fp32(p[g].scale), zero = fp16_to_fp32(p[g].zero);
            for (size_t j = 0; j < nq; ++j) {
              const float wj = w[(j0 + j) * w_stride + r0 + r];
              coef[(r * n_groups + g) * nq + j] = wj * scale;
              zero_sum[(j0 + j) * n_groups + g] += wj * zero;
            }
          }
        }
        const int inq = static_cast<int>(nq);
        if (bits == 2) {
          value_tile_dispatch<2>(inq, out + j0 * head_dim, head_dim, coef.data(),
                                 codes + r0 * row_bytes, nr, head_dim, group, n_groups);
        } else {
          value_tile_dispatch<4>(inq, out + j0 * head_dim, head_dim, coef.data(),
                                 codes + r0 * row_bytes, nr, head_dim, group, n_groups);
        }
      }
    }
    for (size_t j = 0; j < n_q; ++j) {
      for (size_t c = 0; c < head_dim; ++c)
        out[j * head_dim + c] += zero_sum[j * n_groups + c / group];
    }
    return;
  }
#endif
  kivi_value_rows_accumulate_scalar(out, w, w_stride, n_q, codes, params, n_rows, head_dim, group,
                                    bits);
}

void kivi_value_rows_decode(float* out, const uint8_t* codes, const KiviParams* params,
                            size_t n_rows, size_t head_dim, size_t group, int bits) {
  const size_t n_words = ceil_div(head_dim, kKiviOctet);
  const size_t n_groups = ceil_div(head_dim, group);
  const size_t row_bytes = n_words * kivi_word_bytes(bits);
  for (size_t r = 0; r < n_rows; ++r) {
    const uint8_t* row = codes + r * row_bytes;
    for (size_t c = 0; c < head_dim; ++c) {
      const uint32_t code =
          code_at(kivi_load_word(row, c / kKiviOctet, bits), c % kKiviOctet, bits);
      out[r * head_dim + c] = kivi_decode(code, params[r * n_groups + c / group]);
    }
  }
}

}  // namespace snapkv
