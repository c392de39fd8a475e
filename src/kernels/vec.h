// The kernels' vector layer, for the files compiled once per ISA level (kernels/isa.h): fixed-width
// fp32 vectors and the few operations the kernels share, written once per level, so a kernel is
// written once against them and its level picks the instructions.
//   F4 (4 lanes), F8 (8 lanes) and, at the avx512 level, F16 (16 lanes); VecF is the level's widest
//   and kLanes its lane count (avx512: F16, 16; avx2: F8, 8; neon / neon_dot: F4, 4). At the NEON
//   levels F8 is a pair of 4-lane registers (lanes 0-3, 4-7), so a kernel written on F8 performs
//   there the operations it performs at avx2, lane for lane.
//   load<V>, load_h<V> (binary16 -> fp32, exact), zero<V>, set1<V>, bcast<V> (one float from
//   memory to every lane), store, add, mul, fma(a, b, c) = a * b + c (fused, one rounding);
//   fma_bcast<NQ> (acc[j] += coef[j * stride] * x over a group's queries, kernels/unroll.h);
//   fold (F16 -> F8: lane l + lane l+8; the identity on F8, and on F4 at NEON); hsum (the sum of
//   an F8's lanes, in one fixed order, below);
//   hsum4 (four F8 (x86) or F4 (NEON) vectors to the F4 of their sums); prefetch_t2.
// SNAPKV_VEC is defined (1) at the levels that have the layer, with SNAPKV_VEC_X86 where the level
// targets AVX2+FMA+F16C (SNAPKV_VEC_AVX512 too where it adds AVX-512 F/BW/DQ/VL) and
// SNAPKV_VEC_NEON at the neon levels; the scalar level has none and runs each kernel's scalar
// reference. A new level adds its block below (the types, then each
// operation for each type) and its flags in CMakeLists.txt (SNAPKV_ISA_LEVELS).
// hsum's order, ((l0 + l4) + (l1 + l5)) + ((l2 + l6) + (l3 + l7)), is the one every AVX2 kernel of
// the ops family ends with (dot_simd.cpp, gemm_simd.cpp); the NEON levels keep those kernels'
// 8-lane accumulators as pairs of 4-lane registers (Acc16: AVX2's acc0 and acc1) and end with the
// same sum, so they give the AVX2 level's bits. The kernels hold each other bit for bit (e.g. the
// K-quant gemv equals the F32 gemv on the dequantized weights, tests/model/kquant_model_test.cpp)
// only because they share this order.
// Everything lives in the level's namespace, so no two levels share a symbol.
// Leaves out: integer vectors, masks, gathers and shuffles (each kernel its own intrinsics), and
// the unpacking of quantized codes (kernels/kivi/kivi_simd.h).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/isa.h"
#include "kernels/unroll.h"
#include "snapkv/util/fp16.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
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
#define SNAPKV_VEC 1
#define SNAPKV_VEC_X86 1
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512DQ__) && defined(__AVX512VL__)
#define SNAPKV_VEC_AVX512 1
#endif
#elif defined(SNAPKV_NEON_KERNELS)
#include <arm_neon.h>
#define SNAPKV_VEC 1
#define SNAPKV_VEC_NEON 1
#endif

#if SNAPKV_VEC
namespace snapkv::SNAPKV_ISA {

// The value-producing operations, one explicit specialisation per type below.
template <class V>
V load(const float* p);
template <class V>
V load_h(const fp16_t* p);
template <class V>
V zero();
template <class V>
V set1(float x);
template <class V>
V bcast(const float* p);

#if SNAPKV_VEC_X86

using F4 = __m128;
using F8 = __m256;

template <>
inline F4 load<F4>(const float* p) {
  return _mm_loadu_ps(p);
}
template <>
inline F4 zero<F4>() {
  return _mm_setzero_ps();
}
template <>
inline F4 set1<F4>(float x) {
  return _mm_set1_ps(x);
}
template <>
inline F4 bcast<F4>(const float* p) {
  return _mm_broadcast_ss(p);
}
inline void store(float* p, F4 v) {
  _mm_storeu_ps(p, v);
}
inline F4 add(F4 a, F4 b) {
  return _mm_add_ps(a, b);
}
inline F4 mul(F4 a, F4 b) {
  return _mm_mul_ps(a, b);
}
inline F4 fma(F4 a, F4 b, F4 c) {
  return _mm_fmadd_ps(a, b, c);
}

template <>
inline F8 load<F8>(const float* p) {
  return _mm256_loadu_ps(p);
}
template <>
inline F8 load_h<F8>(const fp16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
template <>
inline F8 zero<F8>() {
  return _mm256_setzero_ps();
}
template <>
inline F8 set1<F8>(float x) {
  return _mm256_set1_ps(x);
}
template <>
inline F8 bcast<F8>(const float* p) {
  return _mm256_broadcast_ss(p);
}
inline void store(float* p, F8 v) {
  _mm256_storeu_ps(p, v);
}
inline F8 add(F8 a, F8 b) {
  return _mm256_add_ps(a, b);
}
inline F8 mul(F8 a, F8 b) {
  return _mm256_mul_ps(a, b);
}
inline F8 fma(F8 a, F8 b, F8 c) {
  return _mm256_fmadd_ps(a, b, c);
}
inline F8 fold(F8 v) {
  return v;
}

inline float hsum(F8 v) {
  __m128 lo = _mm256_castps256_ps128(v);
  const __m128 hi = _mm256_extractf128_ps(v, 1);
  lo = _mm_add_ps(lo, hi);             // s0..s3 = l0+l4 .. l3+l7
  __m128 shuf = _mm_movehdup_ps(lo);   // s1 s1 s3 s3
  __m128 sums = _mm_add_ps(lo, shuf);  // s0+s1 . s2+s3 .
  shuf = _mm_movehl_ps(shuf, sums);    // s2+s3 in lane 0
  sums = _mm_add_ss(sums, shuf);       // (s0+s1) + (s2+s3)
  return _mm_cvtss_f32(sums);
}

// [sum(a), sum(b), sum(c), sum(d)] (an hadd tree: its own order, not hsum's).
inline F4 hsum4(F8 a, F8 b, F8 c, F8 d) {
  const __m256 abcd = _mm256_hadd_ps(_mm256_hadd_ps(a, b), _mm256_hadd_ps(c, d));
  return _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1));
}

inline void prefetch_t2(const void* p) {
  _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T2);
}

#if SNAPKV_VEC_AVX512
using F16 = __m512;
using VecF = F16;

template <>
inline F16 load<F16>(const float* p) {
  return _mm512_loadu_ps(p);
}
template <>
inline F16 load_h<F16>(const fp16_t* p) {
  // the zero-masked forms here and in fold: GCC 12's unmasked ones start from
  // _mm512_undefined_ps, which -Wmaybe-uninitialized reports
  return _mm512_maskz_cvtph_ps(0xFFFF, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
template <>
inline F16 zero<F16>() {
  return _mm512_setzero_ps();
}
template <>
inline F16 set1<F16>(float x) {
  return _mm512_set1_ps(x);
}
template <>
inline F16 bcast<F16>(const float* p) {
  return _mm512_set1_ps(*p);
}
inline void store(float* p, F16 v) {
  _mm512_storeu_ps(p, v);
}
inline F16 add(F16 a, F16 b) {
  return _mm512_add_ps(a, b);
}
inline F16 mul(F16 a, F16 b) {
  return _mm512_mul_ps(a, b);
}
inline F16 fma(F16 a, F16 b, F16 c) {
  return _mm512_fmadd_ps(a, b, c);
}
inline F8 fold(F16 v) {  // lanes 0..7 + lanes 8..15
  const __m256d lo = _mm512_maskz_extractf64x4_pd(0xFF, _mm512_castps_pd(v), 0);
  const __m256d hi = _mm512_maskz_extractf64x4_pd(0xFF, _mm512_castps_pd(v), 1);
  return _mm256_add_ps(_mm256_castpd_ps(lo), _mm256_castpd_ps(hi));
}
#else
using VecF = F8;
#endif

#elif SNAPKV_VEC_NEON

using F4 = float32x4_t;
using F8 = float32x4x2_t;  // lanes 0-3 in val[0], 4-7 in val[1]
using VecF = F4;

template <>
inline F4 load<F4>(const float* p) {
  return vld1q_f32(p);
}
template <>
inline F4 load_h<F4>(const fp16_t* p) {
  return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p)));
}
template <>
inline F4 zero<F4>() {
  return vdupq_n_f32(0.0f);
}
template <>
inline F4 set1<F4>(float x) {
  return vdupq_n_f32(x);
}
template <>
inline F4 bcast<F4>(const float* p) {
  return vld1q_dup_f32(p);
}
inline void store(float* p, F4 v) {
  vst1q_f32(p, v);
}
inline F4 add(F4 a, F4 b) {
  return vaddq_f32(a, b);
}
inline F4 mul(F4 a, F4 b) {
  return vmulq_f32(a, b);
}
inline F4 fma(F4 a, F4 b, F4 c) {
  return vfmaq_f32(c, a, b);
}
inline F4 fold(F4 v) {
  return v;
}

template <>
inline F8 load<F8>(const float* p) {
  return {{vld1q_f32(p), vld1q_f32(p + 4)}};
}
template <>
inline F8 load_h<F8>(const fp16_t* p) {
  const float16x8_t h = vreinterpretq_f16_u16(vld1q_u16(p));
  return {{vcvt_f32_f16(vget_low_f16(h)), vcvt_high_f32_f16(h)}};
}
template <>
inline F8 zero<F8>() {
  return {{vdupq_n_f32(0.0f), vdupq_n_f32(0.0f)}};
}
template <>
inline F8 set1<F8>(float x) {
  return {{vdupq_n_f32(x), vdupq_n_f32(x)}};
}
template <>
inline F8 bcast<F8>(const float* p) {
  const F4 b = vld1q_dup_f32(p);
  return {{b, b}};
}
inline void store(float* p, const F8& v) {
  vst1q_f32(p, v.val[0]);
  vst1q_f32(p + 4, v.val[1]);
}
inline F8 add(const F8& a, const F8& b) {
  return {{vaddq_f32(a.val[0], b.val[0]), vaddq_f32(a.val[1], b.val[1])}};
}
inline F8 mul(const F8& a, const F8& b) {
  return {{vmulq_f32(a.val[0], b.val[0]), vmulq_f32(a.val[1], b.val[1])}};
}
inline F8 fma(const F8& a, const F8& b, const F8& c) {
  return {{vfmaq_f32(c.val[0], a.val[0], b.val[0]), vfmaq_f32(c.val[1], a.val[1], b.val[1])}};
}

// The sum of 8 lanes (lo = l0..l3, hi = l4..l7) in hsum's order.
inline float hsum(F4 lo, F4 hi) {
  const float32x4_t s = vaddq_f32(lo, hi);  // s0..s3 = l0+l4 .. l3+l7
  return (vgetq_lane_f32(s, 0) + vgetq_lane_f32(s, 1)) +
         (vgetq_lane_f32(s, 2) + vgetq_lane_f32(s, 3));
}
inline float hsum(const F8& v) {
  return hsum(v.val[0], v.val[1]);
}

// Two AVX2 8-lane accumulators as four NEON registers: v[0], v[1] = acc0 lanes 0-3, 4-7;
// v[2], v[3] = acc1 lanes 0-3, 4-7.
struct Acc16 {
  float32x4_t v[4] = {vdupq_n_f32(0.0f), vdupq_n_f32(0.0f), vdupq_n_f32(0.0f), vdupq_n_f32(0.0f)};
};
// hsum(acc0 + acc1).
inline float hsum(const Acc16& acc) {
  return hsum(vaddq_f32(acc.v[0], acc.v[2]), vaddq_f32(acc.v[1], acc.v[3]));
}

// [sum(a), sum(b), sum(c), sum(d)] (pairwise adds: their own order, not hsum's).
inline F4 hsum4(F4 a, F4 b, F4 c, F4 d) {
  return vpaddq_f32(vpaddq_f32(a, b), vpaddq_f32(c, d));
}

inline void prefetch_t2(const void* p) {
  __builtin_prefetch(p, 0, 1);
}

#endif  // SNAPKV_VEC_NEON

constexpr size_t kLanes = sizeof(VecF) / sizeof(float);

// acc[j] += coef[j * stride] * x for j < NQ (a group's queries, each its own accumulator).
template <int NQ, class V>
inline void fma_bcast(V (&acc)[NQ], const float* coef, size_t stride, V x) {
  unroll<NQ>([&](auto j) { acc[j] = fma(bcast<V>(coef + j * stride), x, acc[j]); });
}

}  // namespace snapkv::SNAPKV_ISA
#endif  // SNAPKV_VEC
