// kivimix's wide-channel pass (kv/kivimix_kernels.h), compiled once per ISA level (util/isa.h); a
// level without AVX2 runs the scalar reference (kv/kivimix_kernels.cpp). The rows go across the
// vector lanes (8 at avx2, 16 at avx512): one 32-bit gather per lane-group fetches 16 low codes of
// each row (bytes 4m .. 4m + 3), each code is shifted and masked out in turn, converted to float,
// and multiplied by up to 4 queries' weights, each product added to its row's sum (a multiply,
// then an add: the reference's operations in the reference's order, so the results are equal bit
// for bit). The sums are added to out once, at the end, through masked loads/stores on a tail.
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kv/kivimix_kernels.h"
#include "util/isa.h"

#if defined(__AVX2__)
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
#define SNAPKV_KIVIMIX_SIMD 1
#endif

namespace snapkv::SNAPKV_ISA {
namespace {

#if SNAPKV_KIVIMIX_SIMD

#if defined(__AVX512F__)
constexpr size_t kLanes = 16;
struct Lanes {  // the first n of 16 lanes
  __mmask16 mask;
  explicit Lanes(size_t n) : mask(static_cast<__mmask16>((1u << n) - 1u)) {}
};
using VecF = __m512;
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
inline VecF zero_f() {
  return _mm512_setzero_ps();
}
inline VecF bcast(float x) {
  return _mm512_set1_ps(x);
}
inline VecF mul_f(VecF a, VecF b) {
  return _mm512_mul_ps(a, b);
}
inline VecF add_f(VecF a, VecF b) {
  return _mm512_add_ps(a, b);
}
inline void add_to(float* p, VecF v, Lanes lanes) {
  _mm512_mask_storeu_ps(p, lanes.mask, _mm512_add_ps(_mm512_maskz_loadu_ps(lanes.mask, p), v));
}
#else
constexpr size_t kLanes = 8;
struct Lanes {  // the first n of 8 lanes
  __m256i mask;
  explicit Lanes(size_t n)
      : mask(_mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)),
                                _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7))) {}
};
using VecF = __m256;
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
inline VecF zero_f() {
  return _mm256_setzero_ps();
}
inline VecF bcast(float x) {
  return _mm256_set1_ps(x);
}
inline VecF mul_f(VecF a, VecF b) {
  return _mm256_mul_ps(a, b);
}
inline VecF add_f(VecF a, VecF b) {
  return _mm256_add_ps(a, b);
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

// Queries j0 .. j0 + NQ - 1 over rows 0 .. nr - 1 (nr <= kLanes).
template <size_t NQ>
void rows_pass(float* out, size_t stride, const float* qk, size_t j0, size_t wide,
               const uint8_t* low, size_t row_bytes, size_t nr) {
  const Lanes lanes(nr);
  VecF sums[NQ];
  for (size_t j = 0; j < NQ; ++j) sums[j] = zero_f();
  for (size_t m = 0; 16 * m < wide; ++m) {
    VecI words = chunk(low, row_bytes, m, nr, lanes);
    const size_t k_end = std::min(wide, 16 * m + 16);
    for (size_t k = 16 * m; k < k_end; ++k) {
      const VecF codes = codes_of(words);
      for (size_t j = 0; j < NQ; ++j) {
        sums[j] = add_f(sums[j], mul_f(bcast(qk[(j0 + j) * wide + k]), codes));
      }
      words = next_code(words);
    }
  }
  for (size_t j = 0; j < NQ; ++j) add_to(out + (j0 + j) * stride, sums[j], lanes);
}

#endif  // SNAPKV_KIVIMIX_SIMD

}  // namespace

void kivimix_wide_dot(float* out, size_t stride, const float* qk, size_t n_q, size_t wide,
                      const uint8_t* low, size_t row_bytes, size_t n) {
#if SNAPKV_KIVIMIX_SIMD
  for (size_t r0 = 0; r0 < n; r0 += kLanes) {
    const size_t nr = std::min(kLanes, n - r0);
    const uint8_t* rows = low + r0 * row_bytes;
    size_t j0 = 0;
    for (; j0 + 4 <= n_q; j0 += 4)
      rows_pass<4>(out + r0, stride, qk, j0, wide, rows, row_bytes, nr);
    switch (n_q - j0) {
      case 3:
        rows_pass<3>(out + r0, stride, qk, j0, wide, rows, row_bytes, nr);
        break;
      case 2:
        rows_pass<2>(out + r0, stride, qk, j0, wide, rows, row_bytes, nr);
        break;
      case 1:
        rows_pass<1>(out + r0, stride, qk, j0, wide, rows, row_bytes, nr);
        break;
      default:
        break;
    }
  }
#else
  kivimix_wide_dot_scalar(out, stride, qk, n_q, wide, low, row_bytes, n);
#endif
}

}  // namespace snapkv::SNAPKV_ISA
