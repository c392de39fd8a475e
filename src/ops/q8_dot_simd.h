// Shared by the per-ISA integer dot kernels (q8_dot_simd.cpp: Q8_0 / Q4_0 weights,
// q8_dot_kquants_simd.cpp: K-quant weights, q8_act_simd.cpp: the activation quantizer), which are
// compiled once per ISA level (util/isa.h; the public entry points and their dispatch are in
// q8_dot.cpp): which fast path the level takes, and the helpers more than one of them uses.
// Everything here has internal linkage (an anonymous namespace), so no level shares another's.
#pragma once

#include <cstdint>

#include "ops/q8_dot.h"
#include "util/isa.h"

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

#include "ops/hsum.h"
#define SNAPKV_Q8_AVX2 1
#endif
#if SNAPKV_Q8_AVX2 && defined(__AVX512VNNI__) && defined(__AVX512VL__)
#define SNAPKV_Q8_VNNI 1
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

}  // namespace
}  // namespace snapkv::SNAPKV_ISA
