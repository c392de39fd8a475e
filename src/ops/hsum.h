// Internal to ops/, for the kernel files compiled per ISA level (util/isa.h): the horizontal sum
// of 8 fp32 lanes that every AVX2 kernel of ops/ ends with (dot_simd.cpp, gemm_simd.cpp), in one
// lane order: ((l0 + l4) + (l1 + l5)) + ((l2 + l6) + (l3 + l7)). The kernels hold each other bit
// for bit (e.g. the K-quant gemv equals the F32 gemv on the dequantized weights,
// tests/model/kquant_model_test.cpp) only because they share this order. It lives in the level's
// namespace so that no two levels share its symbol.
#pragma once

#include "util/isa.h"

#if defined(__AVX2__)
#include <immintrin.h>

namespace snapkv::SNAPKV_ISA {

inline float hsum(__m256 v) {
  __m128 lo = _mm256_castps256_ps128(v);
  const __m128 hi = _mm256_extractf128_ps(v, 1);
  lo = _mm_add_ps(lo, hi);             // s0..s3 = l0+l4 .. l3+l7
  __m128 shuf = _mm_movehdup_ps(lo);   // s1 s1 s3 s3
  __m128 sums = _mm_add_ps(lo, shuf);  // s0+s1 . s2+s3 .
  shuf = _mm_movehl_ps(shuf, sums);    // s2+s3 in lane 0
  sums = _mm_add_ss(sums, shuf);       // (s0+s1) + (s2+s3)
  return _mm_cvtss_f32(sums);
}

}  // namespace snapkv::SNAPKV_ISA
#endif
