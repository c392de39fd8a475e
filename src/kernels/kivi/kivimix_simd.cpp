// kivimix's wide-channel pass and its weights (kernels/kivi/kivimix_kernels.h), compiled once per
// ISA level (kernels/isa.h); a level without AVX2 runs the scalar references
// (kernels/kivi/kivimix_kernels.cpp). The rows go across the vector lanes (8 at avx2, 16 at
// avx512; two vectors, a 32-row block, in flight): each lane holds one 32-bit word of its row's low
// codes (16 codes: bytes 4m .. 4m + 3, see RowWords), each code is shifted and masked out in turn,
// converted to float, and multiplied by up to 4 queries' weights, each product added to its row's
// sum (a multiply, then an add: the reference's operations in the reference's order, so the results
// are equal bit for bit). The sums are added to out once, at the end, through masked loads/stores
// on a tail.
#include <algorithm>
#include <cstdint>

#include "kernels/isa.h"
#include "kernels/kivi/kivimix_kernels.h"
#include "kernels/vec.h"

namespace snapkv::SNAPKV_ISA {
namespace {

#if SNAPKV_VEC_X86

// The rows' sums are VecF (kernels/vec.h: kLanes rows per vector); the code words are VecI.
#if SNAPKV_VEC_AVX512
struct Lanes {  // the first n of 16 lanes
  __mmask16 mask = 0;
  Lanes() = default;
  explicit Lanes(size_t n) : mask(static_cast<__mmask16>((1u << n) - 1u)) {}
};
using VecI = __m512i;
inline VecI gather_words(const uint8_t* base, size_t row_bytes, Lanes lanes) {
  const VecI idx =
      _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                         _mm512_set1_epi32(static_cast<int>(row_bytes)));
  return _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), lanes.mask, idx, base, 1);
}
inline VecI load_words(const uint32_t* p) {
  return _mm512_loadu_si512(p);
}
inline VecF codes_of(VecI words) {  // the low 2 bits of each lane, as float
  return _mm512_cvtepi32_ps(_mm512_and_si512(words, _mm512_set1_epi32(3)));
}
inline VecI next_code(VecI words) {
  return _mm512_srli_epi32(words, 2);
}
inline VecI load_channels(const KittyChannel* p) {  // 16 channel indices as int32
  return _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
inline VecF gather_f(const float* base, VecI idx) {
  return _mm512_mask_i32gather_ps(_mm512_setzero_ps(), 0xFFFF, idx, base, 4);
}
inline void add_to(float* p, VecF v, Lanes lanes) {
  _mm512_mask_storeu_ps(p, lanes.mask, _mm512_add_ps(_mm512_maskz_loadu_ps(lanes.mask, p), v));
}
#else
struct Lanes {  // the first n of 8 lanes
  __m256i mask = _mm256_setzero_si256();
  Lanes() = default;
  explicit Lanes(size_t n)
      : mask(_mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)),
                                _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7))) {}
};
using VecI = __m256i;
inline VecI gather_words(const uint8_t* base, size_t row_bytes, Lanes lanes) {
  const VecI idx = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                                      _mm256_set1_epi32(static_cast<int>(row_bytes)));
  return _mm256_mask_i32gather_epi32(_mm256_setzero_si256(), reinterpret_cast<const int*>(base),
                                     idx, lanes.mask, 1);
}
inline VecI load_words(const uint32_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}
inline VecF codes_of(VecI words) {
  return _mm256_cvtepi32_ps(_mm256_and_si256(words, _mm256_set1_epi32(3)));
}
inline VecI next_code(VecI words) {
  return _mm256_srli_epi32(words, 2);
}
inline VecI load_channels(const KittyChannel* p) {  // 8 channel indices as int32
  return _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
inline VecF gather_f(const float* base, VecI idx) {
  return _mm256_mask_i32gather_ps(_mm256_setzero_ps(), base, idx,
                                  _mm256_castsi256_ps(_mm256_set1_epi32(-1)), 4);
}
inline void add_to(float* p, VecF v, Lanes lanes) {
  _mm256_maskstore_ps(p, lanes.mask, _mm256_add_ps(_mm256_maskload_ps(p, lanes.mask), v));
}
#endif

// Codes 16 m .. 16 m + 15 of rows 0 .. nr - 1 of `low` (row r at low + r * row_bytes), one 32-bit
// word per lane (lanes >= nr: 0). A word the rows end inside is assembled from its bytes, so no
// byte past a row is read.
inline VecI chunk(const uint8_t* low, size_t row_bytes, size_t m, size_t nr, Lanes lanes) {
  if (4 * m + 4 <= row_bytes) return gather_words(low + 4 * m, row_bytes, lanes);
  uint32_t words[kLanes] = {};
  for (size_t r = 0; r < nr; ++r) {
    for (size_t i = 4 * m; i < row_bytes; ++i) {
      words[r] |= static_cast<uint32_t>(low[r * row_bytes + i]) << (8 * (i - 4 * m));
    }
  }
  return load_words(words);
}

// The low-code words of kLanes rows (row r at low + r * row_bytes), chunk by chunk (chunk m: codes
// 16 m .. 16 m + 15, one 32-bit word per lane; lanes >= nr: 0).
//   D = 0: any row_bytes; a gather per chunk.
//   D = 1, 2, 4 (row_bytes = 4 D: the store's rows for head_dim 17 .. 32, 33 .. 64, 65 .. 128):
//   the rows' D * nr words are loaded at once (D registers; masked: nothing past row nr - 1 is
//   read) and each chunk is picked out of them by permutes (avx512) or a transpose (avx2), no
//   gathers.
template <size_t D>
struct RowWords {
#if SNAPKV_VEC_AVX512
  static_assert(D == 1 || D == 2 || D == 4);
  VecI regs[D];
  void init(const uint8_t* low, size_t /*row_bytes*/, size_t nr, Lanes /*lanes*/) {
    const size_t words = nr * D;
    for (size_t i = 0; i < D; ++i) {
      const size_t here = words > 16 * i ? std::min<size_t>(16, words - 16 * i) : 0;
      regs[i] = _mm512_maskz_loadu_epi32(static_cast<__mmask16>((1u << here) - 1u), low + 64 * i);
    }
  }
  VecI chunk(size_t m) const {  // lane r: word D r + m (D = 4: lanes 8 .. 15 from regs 2, 3)
    const VecI lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const VecI at = _mm512_set1_epi32(static_cast<int>(m));
    if constexpr (D == 1) {
      return regs[0];
    } else if constexpr (D == 2) {
      return _mm512_permutex2var_epi32(regs[0], _mm512_add_epi32(_mm512_slli_epi32(lane, 1), at),
                                       regs[1]);
    } else {
      const VecI idx =
          _mm512_add_epi32(_mm512_slli_epi32(_mm512_and_si512(lane, _mm512_set1_epi32(7)), 2), at);
      return _mm512_mask_blend_epi32(0xFF00, _mm512_permutex2var_epi32(regs[0], idx, regs[1]),
                                     _mm512_permutex2var_epi32(regs[2], idx, regs[3]));
    }
  }
#else
  // avx2: the 8 rows' words (D registers, masked loads) transposed once into the D chunks
  static_assert(D == 1 || D == 2 || D == 4);
  VecI chunks[D];
  void init(const uint8_t* low, size_t /*row_bytes*/, size_t nr, Lanes /*lanes*/) {
    const size_t words = nr * D;
    VecI regs[D];
    for (size_t i = 0; i < D; ++i) {
      const size_t here = words > 8 * i ? std::min<size_t>(8, words - 8 * i) : 0;
      const VecI mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(here)),
                                           _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
      regs[i] = _mm256_maskload_epi32(reinterpret_cast<const int*>(low + 32 * i), mask);
    }
    if constexpr (D == 1) {
      chunks[0] = regs[0];
    } else if constexpr (D == 2) {
      // per 128-bit lane, the even (odd) words of rows 0, 1, 4, 5 | 2, 3, 6, 7; then rows in order
      const __m256 a = _mm256_castsi256_ps(regs[0]), b = _mm256_castsi256_ps(regs[1]);
      chunks[0] = _mm256_permute4x64_epi64(
          _mm256_castps_si256(_mm256_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0))),
          _MM_SHUFFLE(3, 1, 2, 0));
      chunks[1] = _mm256_permute4x64_epi64(
          _mm256_castps_si256(_mm256_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1))),
          _MM_SHUFFLE(3, 1, 2, 0));
    } else {
      // a 4x4 transpose per 128-bit lane (rows 0, 2, 4, 6 | 1, 3, 5, 7), then rows in order
      const VecI t0 = _mm256_unpacklo_epi32(regs[0], regs[1]);
      const VecI t1 = _mm256_unpackhi_epi32(regs[0], regs[1]);
      const VecI t2 = _mm256_unpacklo_epi32(regs[2], regs[3]);
      const VecI t3 = _mm256_unpackhi_epi32(regs[2], regs[3]);
      const VecI order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
      chunks[0] = _mm256_permutevar8x32_epi32(_mm256_unpacklo_epi64(t0, t2), order);
      chunks[1] = _mm256_permutevar8x32_epi32(_mm256_unpackhi_epi64(t0, t2), order);
      chunks[2] = _mm256_permutevar8x32_epi32(_mm256_unpacklo_epi64(t1, t3), order);
      chunks[3] = _mm256_permutevar8x32_epi32(_mm256_unpackhi_epi64(t1, t3), order);
    }
  }
  VecI chunk(size_t m) const {
    return chunks[m];
  }
#endif
};
template <>
struct RowWords<0> {
  const uint8_t* low = nullptr;
  size_t row_bytes = 0, nr = 0;
  Lanes lanes;
  void init(const uint8_t* low_in, size_t row_bytes_in, size_t nr_in, Lanes lanes_in) {
    low = low_in;
    row_bytes = row_bytes_in;
    nr = nr_in;
    lanes = lanes_in;
  }
  VecI chunk(size_t m) const { return snapkv::SNAPKV_ISA::chunk(low, row_bytes, m, nr, lanes); }
};

// Queries j0 .. j0 + NQ - 1 over rows 0 .. nr - 1, NV vectors of rows ((NV - 1) kLanes < nr <=
// NV kLanes): NQ * NV independent sums in flight, so the adds' latency overlaps.
template <size_t NQ, size_t NV, size_t D>
void rows_pass(float* out, size_t stride, const float* qk, size_t j0, size_t wide,
               const uint8_t* low, size_t row_bytes, size_t nr) {
  Lanes lanes[NV];
  RowWords<D> rows[NV];
  for (size_t v = 0; v < NV; ++v) {
    const size_t here = std::min(kLanes, nr - v * kLanes);
    lanes[v] = Lanes(here);
    rows[v].init(low + v * kLanes * row_bytes, row_bytes, here, lanes[v]);
  }
  VecF sums[NQ][NV];
  for (size_t j = 0; j < NQ; ++j) {
    for (size_t v = 0; v < NV; ++v) sums[j][v] = zero<VecF>();
  }
  for (size_t m = 0; 16 * m < wide; ++m) {
    VecI words[NV];
    for (size_t v = 0; v < NV; ++v) words[v] = rows[v].chunk(m);
    const size_t k_end = std::min(wide, 16 * m + 16);
    for (size_t k = 16 * m; k < k_end; ++k) {
      VecF codes[NV];
      for (size_t v = 0; v < NV; ++v) {
        codes[v] = codes_of(words[v]);
        words[v] = next_code(words[v]);
      }
      for (size_t j = 0; j < NQ; ++j) {
        const VecF w = set1<VecF>(qk[(j0 + j) * wide + k]);
        for (size_t v = 0; v < NV; ++v) sums[j][v] = add(sums[j][v], mul(w, codes[v]));
      }
    }
  }
  for (size_t j = 0; j < NQ; ++j) {
    for (size_t v = 0; v < NV; ++v) {
      add_to(out + (j0 + j) * stride + v * kLanes, sums[j][v], lanes[v]);
    }
  }
}

// All queries over rows 0 .. nr - 1 (nr <= NV kLanes), 4 at a time.
template <size_t NV, size_t D>
void rows_all_queries(float* out, size_t stride, const float* qk, size_t n_q, size_t wide,
                      const uint8_t* low, size_t row_bytes, size_t nr) {
  size_t j0 = 0;
  for (; j0 + 4 <= n_q; j0 += 4) {
    rows_pass<4, NV, D>(out, stride, qk, j0, wide, low, row_bytes, nr);
  }
  switch (n_q - j0) {
    case 3:
      rows_pass<3, NV, D>(out, stride, qk, j0, wide, low, row_bytes, nr);
      break;
    case 2:
      rows_pass<2, NV, D>(out, stride, qk, j0, wide, low, row_bytes, nr);
      break;
    case 1:
      rows_pass<1, NV, D>(out, stride, qk, j0, wide, low, row_bytes, nr);
      break;
    default:
      break;
  }
}

// Rows 0 .. n - 1, 2 kLanes at a time (a 32-row block: 2 passes at avx512, 4 at avx2).
template <size_t D>
void all_rows(float* out, size_t stride, const float* qk, size_t n_q, size_t wide,
              const uint8_t* low, size_t row_bytes, size_t n) {
  for (size_t r0 = 0; r0 < n; r0 += 2 * kLanes) {
    const size_t nr = std::min(2 * kLanes, n - r0);
    const uint8_t* rows = low + r0 * row_bytes;
    if (nr > kLanes) {
      rows_all_queries<2, D>(out + r0, stride, qk, n_q, wide, rows, row_bytes, nr);
    } else {
      rows_all_queries<1, D>(out + r0, stride, qk, n_q, wide, rows, row_bytes, nr);
    }
  }
}

#endif  // SNAPKV_VEC_X86

}  // namespace

void kivimix_wide_dot(float* out, size_t stride, const float* qk, size_t n_q, size_t wide,
                      const uint8_t* low, size_t row_bytes, size_t n) {
#if SNAPKV_VEC_X86
  if (row_bytes == 4) return all_rows<1>(out, stride, qk, n_q, wide, low, row_bytes, n);
  if (row_bytes == 8) return all_rows<2>(out, stride, qk, n_q, wide, low, row_bytes, n);
  if (row_bytes == 16) return all_rows<4>(out, stride, qk, n_q, wide, low, row_bytes, n);
  all_rows<0>(out, stride, qk, n_q, wide, low, row_bytes, n);
#else
  kivimix_wide_dot_scalar(out, stride, qk, n_q, wide, low, row_bytes, n);
#endif
}

void kivimix_wide_weights(float* qk, const float* q, size_t n_q, size_t head_dim,
                          const float* scales, const KittyChannel* channels, size_t wide) {
#if SNAPKV_VEC_AVX512
  // head_dim <= 256 (every model's): all head_dim products, 16 channels at a time, and the wide
  // ones kept, in order, by a compress (no gathers)
  if (head_dim <= 256) {
    // the wide channels' bits, in registers (an array indexed by channel would chain its ORs
    // through memory)
    uint64_t w0 = 0, w1 = 0, w2 = 0, w3 = 0;
    for (size_t k = 0; k < wide; ++k) {
      const uint64_t bit = uint64_t{1} << (channels[k] % 64);
      const unsigned word = channels[k] / 64u;
      w0 |= word == 0 ? bit : 0;
      w1 |= word == 1 ? bit : 0;
      w2 |= word == 2 ? bit : 0;
      w3 |= word == 3 ? bit : 0;
    }
    const uint64_t is_wide[4] = {w0, w1, w2, w3};
    size_t at = 0;
    for (size_t c0 = 0; c0 < head_dim; c0 += 16) {
      const auto keep = static_cast<__mmask16>(is_wide[c0 / 64] >> (c0 % 64));
      if (keep == 0) continue;
      const auto valid = static_cast<__mmask16>((1u << std::min<size_t>(16, head_dim - c0)) - 1u);
      const size_t count = static_cast<size_t>(__builtin_popcount(keep));
      const auto first = static_cast<__mmask16>((1u << count) - 1u);
      const VecF s = mul(set1<VecF>(0.25f), _mm512_maskz_loadu_ps(valid, scales + c0));
      for (size_t j = 0; j < n_q; ++j) {
        const VecF prod = mul(_mm512_maskz_loadu_ps(valid, q + j * head_dim + c0), s);
        _mm512_mask_storeu_ps(qk + j * wide + at, first, _mm512_maskz_compress_ps(keep, prod));
      }
      at += count;
    }
    return;
  }
#endif
#if SNAPKV_VEC_X86
  // kLanes channels at a time: their scales and each query's entries gathered, then the scalar
  // reference's two products; the last wide % kLanes channels by the reference itself.
  const size_t full = wide - wide % kLanes;
  for (size_t k0 = 0; k0 < full; k0 += kLanes) {
    const VecI idx = load_channels(channels + k0);
    const VecF s = mul(set1<VecF>(0.25f), gather_f(scales, idx));
    for (size_t j = 0; j < n_q; ++j) {
      store(qk + j * wide + k0, mul(gather_f(q + j * head_dim, idx), s));
    }
  }
  for (size_t j = 0; j < n_q; ++j) {
    for (size_t k = full; k < wide; ++k) {
      qk[j * wide + k] = q[j * head_dim + channels[k]] * (0.25f * scales[channels[k]]);
    }
  }
#else
  kivimix_wide_weights_scalar(qk, q, n_q, head_dim, scales, channels, wide);
#endif
}

}  // namespace snapkv::SNAPKV_ISA
