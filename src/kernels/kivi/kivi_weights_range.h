// The exact range check of the weights that the AVX-512 integer value kernels run when the
// cheap check on their loads fails: kivi_q8_values_simd.cpp (2-bit rows, weights in [0, 2^64])
// and kivi_q16_values_simd.cpp (4-bit rows, [0, 2^100]); out of range, both leave `out`
// untouched and the float kernel runs. Included by those ISA files after <immintrin.h>, at levels
// with AVX-512F; the function has internal linkage in the level's namespace, so no level shares
// another's copy (kernels/isa.h).
#pragma once

#include <cstddef>

#include "kernels/isa.h"

#if defined(__AVX512F__)
namespace snapkv::SNAPKV_ISA {
namespace {

// Every w[j * w_stride + r] (j < n_q, r < n_rows) in [0, hi] (-0 included), none NaN.
inline bool weights_in_range(const float* w, size_t w_stride, size_t n_q, size_t n_rows, float hi) {
  const __m512 lo_v = _mm512_setzero_ps(), hi_v = _mm512_set1_ps(hi);
  for (size_t j = 0; j < n_q; ++j) {
    for (size_t r = 0; r < n_rows; r += 16) {
      const auto m = static_cast<__mmask16>(n_rows - r >= 16 ? 0xFFFFu : (1u << (n_rows - r)) - 1u);
      const __m512 x = _mm512_maskz_loadu_ps(m, w + j * w_stride + r);
      // NaN fails both ordered compares
      const __mmask16 ok =
          _mm512_cmp_ps_mask(x, lo_v, _CMP_GE_OQ) & _mm512_cmp_ps_mask(x, hi_v, _CMP_LE_OQ);
      if ((ok & m) != m) return false;
    }
  }
  return true;
}

}  // namespace
}  // namespace snapkv::SNAPKV_ISA
#endif
