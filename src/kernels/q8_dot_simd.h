// Shared by the per-ISA integer dot kernels (q8_dot_simd.cpp: Q8_0 / Q4_0 weights,
// q8_dot_kquants_simd.cpp: K-quant weights, q8_act_simd.cpp: the activation quantizer), which are
// compiled once per ISA level (kernels/isa.h; the public entry points and their dispatch are in
// q8_dot.cpp): which fast path the level takes, and the helpers more than one of them uses.
// Everything here has internal linkage (an anonymous namespace), so no level shares another's.
#pragma once

#include <cstdint>

#include "kernels/isa.h"
#include "kernels/q8_dot.h"

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

#include "kernels/vec.h"
#define SNAPKV_Q8_AVX2 1
#endif
#if SNAPKV_Q8_AVX2 && defined(__AVX512VNNI__) && defined(__AVX512VL__)
#define SNAPKV_Q8_VNNI 1
#endif
#if defined(SNAPKV_NEON_KERNELS)
#include <arm_neon.h>
#define SNAPKV_Q8_NEON 1
#endif

namespace snapkv::SNAPKV_ISA {
namespace {

inline float half(fp16_t h) {
#if defined(__F16C__)
  return _cvtsh_ss(h);  // exact, like fp16_to_fp32
#else
  return fp16_to_fp32(h);
#endif
}

#if SNAPKV_Q8_AVX2
inline __m256i load256(const void* p) {
  return _mm256_loadu_si256(static_cast<const __m256i*>(p));
}
#endif

#if SNAPKV_Q8_NEON
// acc + 4 int32 lanes, lane l = sum_{k < 4} x[4l + k] * y[4l + k] (signed bytes): one sdot with
// the dot-product extension (neon_dot), else widening multiplies and two pairwise adds (neon).
// Exact for codes in [-128, 127]: a product fits int16 (|p| <= 2^14), a lane int32.
inline int32x4_t dot4_i8(int32x4_t acc, int8x16_t x, int8x16_t y) {
#if defined(__ARM_FEATURE_DOTPROD)
  return vdotq_s32(acc, x, y);
#else
  const int32x4_t lo = vpaddlq_s16(vmull_s8(vget_low_s8(x), vget_low_s8(y)));
  const int32x4_t hi = vpaddlq_s16(vmull_high_s8(x, y));
  return vaddq_s32(acc, vpaddq_s32(lo, hi));
#endif
}
#endif

}  // namespace
}  // namespace snapkv::SNAPKV_ISA
