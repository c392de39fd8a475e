// Softmax and the bulk exp behind it, compiled once per ISA level (kernels/isa.h). The AVX2 path
// (exp8) performs the IEEE operations of the portable exp_approx (exp_approx.cpp) in the same order
// (no FMA contraction: CMakeLists.txt builds every target with -ffp-contract=off), so the bulk
// results are bit-identical to the scalar ones at every level and tests compare them exactly. The
// AVX-512 path (exp16) does the same on sixteen lanes, its 2^n in one exact step (see exp16).
// exp8_fma / exp16_fma are exp_fma's operations (fused multiply-adds, rounded once each: the same
// bits as std::fma), behind exp_scale_shift_sum. The NEON path (exp4, exp4_fma) is exp8 / exp8_fma
// on four lanes, with the scalar clamp's comparisons (NaN stays NaN, as in exp_approx).
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/exp_constants.h"
#include "kernels/isa.h"
#include "kernels/ops_kernels.h"

// GCC 12's AVX-512 intrinsics start from _mm512_undefined_*(), a self-initialised variable that
// -W(maybe-)uninitialized reports wherever they inline; silenced for the header's lines only.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#if defined(__AVX2__)
#include <immintrin.h>
#endif
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#if defined(SNAPKV_NEON_KERNELS)
#include <arm_neon.h>
#endif

namespace snapkv::SNAPKV_ISA {
namespace {

using namespace ops_internal;  // the exp constants

#if defined(SNAPKV_NEON_KERNELS)
// std::min(std::max(x, kLow), kHigh) lane by lane, with std::max / std::min's comparisons.
float32x4_t clamp4(float32x4_t x) {
  const float32x4_t low = vdupq_n_f32(kLow), high = vdupq_n_f32(kHigh);
  const float32x4_t m = vbslq_f32(vcltq_f32(x, low), low, x);
  return vbslq_f32(vcltq_f32(high, m), high, m);
}

// exp8_finish on four lanes: p * 2^n1 * 2^n2, n1 = n / 2 truncated, then 0 below kLow and +inf
// above kHigh.
float32x4_t exp4_finish(float32x4_t p, float32x4_t n, float32x4_t x) {
  const int32x4_t ni = vcvtq_s32_f32(n);
  const int32x4_t sign = vreinterpretq_s32_u32(vshrq_n_u32(vreinterpretq_u32_s32(ni), 31));
  const int32x4_t n1 = vshrq_n_s32(vaddq_s32(ni, sign), 1);
  const int32x4_t n2 = vsubq_s32(ni, n1);
  const int32x4_t bias = vdupq_n_s32(127);
  const float32x4_t s1 = vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(n1, bias), 23));
  const float32x4_t s2 = vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(n2, bias), 23));
  const float32x4_t y = vmulq_f32(vmulq_f32(p, s1), s2);
  const uint32x4_t under = vcltq_f32(x, vdupq_n_f32(kLow));
  const uint32x4_t over = vcgtq_f32(x, vdupq_n_f32(kHigh));
  const float32x4_t with_inf = vbslq_f32(over, vdupq_n_f32(HUGE_VALF), y);
  return vreinterpretq_f32_u32(vbicq_u32(vreinterpretq_u32_f32(with_inf), under));
}

// exp_approx on four lanes: the same operations in the same order.
float32x4_t exp4(float32x4_t x) {
  const float32x4_t xc = clamp4(x);
  const float32x4_t n =
      vrndmq_f32(vaddq_f32(vmulq_f32(xc, vdupq_n_f32(kLog2e)), vdupq_n_f32(0.5f)));
  const float32x4_t r = vsubq_f32(vsubq_f32(xc, vmulq_f32(n, vdupq_n_f32(kLn2Hi))),
                                  vmulq_f32(n, vdupq_n_f32(kLn2Lo)));
  float32x4_t p = vdupq_n_f32(kP0);
  p = vaddq_f32(vmulq_f32(p, r), vdupq_n_f32(kP1));
  p = vaddq_f32(vmulq_f32(p, r), vdupq_n_f32(kP2));
  p = vaddq_f32(vmulq_f32(p, r), vdupq_n_f32(kP3));
  p = vaddq_f32(vmulq_f32(p, r), vdupq_n_f32(kP4));
  p = vaddq_f32(vmulq_f32(p, r), vdupq_n_f32(kP5));
  p = vaddq_f32(vaddq_f32(vmulq_f32(vmulq_f32(p, r), r), r), vdupq_n_f32(1.0f));
  return exp4_finish(p, n, x);
}

// exp_fma on four lanes (vfmaq / vfmsq are fused: std::fma's bits).
float32x4_t exp4_fma(float32x4_t x) {
  const float32x4_t xc = clamp4(x);
  const float32x4_t n = vrndnq_f32(vmulq_f32(xc, vdupq_n_f32(kLog2e)));
  float32x4_t r = vfmsq_f32(xc, n, vdupq_n_f32(kLn2Hi));
  r = vfmsq_f32(r, n, vdupq_n_f32(kLn2Lo));
  float32x4_t p = vfmaq_f32(vdupq_n_f32(kP1), vdupq_n_f32(kP0), r);
  p = vfmaq_f32(vdupq_n_f32(kP2), p, r);
  p = vfmaq_f32(vdupq_n_f32(kP3), p, r);
  p = vfmaq_f32(vdupq_n_f32(kP4), p, r);
  p = vfmaq_f32(vdupq_n_f32(kP5), p, r);
  p = vaddq_f32(vfmaq_f32(r, p, vmulq_f32(r, r)), vdupq_n_f32(1.0f));
  return exp4_finish(p, n, x);
}
#endif

#if defined(__AVX2__)
// The end of exp8 and exp8_fma: p * 2^n as p * 2^n1 * 2^n2 with n1 = n / 2 truncated toward zero
// (as C++ int division; the first product exact, one rounding in the second), then 0 where
// x < kLow and +inf where x > kHigh.
__m256 exp8_finish(__m256 p, __m256 n, __m256 x) {
  const __m256i ni = _mm256_cvttps_epi32(n);
  const __m256i n1 = _mm256_srai_epi32(_mm256_add_epi32(ni, _mm256_srli_epi32(ni, 31)), 1);
  const __m256i n2 = _mm256_sub_epi32(ni, n1);
  const __m256i bias = _mm256_set1_epi32(127);
  const __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
  const __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
  const __m256 y = _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
  const __m256 under = _mm256_cmp_ps(x, _mm256_set1_ps(kLow), _CMP_LT_OQ);
  const __m256 over = _mm256_cmp_ps(x, _mm256_set1_ps(kHigh), _CMP_GT_OQ);
  return _mm256_andnot_ps(under, _mm256_blendv_ps(y, _mm256_set1_ps(HUGE_VALF), over));
}

__m256 exp8(__m256 x) {
  const __m256 xc = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(kLow)), _mm256_set1_ps(kHigh));
  const __m256 n = _mm256_floor_ps(
      _mm256_add_ps(_mm256_mul_ps(xc, _mm256_set1_ps(kLog2e)), _mm256_set1_ps(0.5f)));
  const __m256 r = _mm256_sub_ps(_mm256_sub_ps(xc, _mm256_mul_ps(n, _mm256_set1_ps(kLn2Hi))),
                                 _mm256_mul_ps(n, _mm256_set1_ps(kLn2Lo)));
  __m256 p = _mm256_set1_ps(kP0);
  p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(kP1));
  p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(kP2));
  p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(kP3));
  p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(kP4));
  p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(kP5));
  p = _mm256_add_ps(_mm256_add_ps(_mm256_mul_ps(_mm256_mul_ps(p, r), r), r), _mm256_set1_ps(1.0f));
  return exp8_finish(p, n, x);
}
#endif

#if defined(__AVX512F__)
// exp8's operations on sixteen lanes, with one shortcut: 2^n applied by scalef. p * 2^n1 is exact
// (|p| < 2 and |n1| <= 64 keep it normal), so exp8's p * 2^n1 * 2^n2 rounds once, to the nearest
// float of p * 2^n, which is what scalef returns: the same bits (tests/ops/softmax_test.cpp holds
// every level to exp_approx).
__m512 exp16(__m512 x) {
  const __m512 xc = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(kLow)), _mm512_set1_ps(kHigh));
  const __m512 n = _mm512_roundscale_ps(
      _mm512_add_ps(_mm512_mul_ps(xc, _mm512_set1_ps(kLog2e)), _mm512_set1_ps(0.5f)),
      _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
  const __m512 r = _mm512_sub_ps(_mm512_sub_ps(xc, _mm512_mul_ps(n, _mm512_set1_ps(kLn2Hi))),
                                 _mm512_mul_ps(n, _mm512_set1_ps(kLn2Lo)));
  __m512 p = _mm512_set1_ps(kP0);
  p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(kP1));
  p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(kP2));
  p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(kP3));
  p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(kP4));
  p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(kP5));
  p = _mm512_add_ps(_mm512_add_ps(_mm512_mul_ps(_mm512_mul_ps(p, r), r), r), _mm512_set1_ps(1.0f));
  const __m512 y = _mm512_scalef_ps(p, n);
  const __mmask16 under = _mm512_cmp_ps_mask(x, _mm512_set1_ps(kLow), _CMP_LT_OQ);
  const __mmask16 over = _mm512_cmp_ps_mask(x, _mm512_set1_ps(kHigh), _CMP_GT_OQ);
  const __m512 with_inf = _mm512_mask_blend_ps(over, y, _mm512_set1_ps(HUGE_VALF));
  return _mm512_maskz_mov_ps(static_cast<__mmask16>(~under), with_inf);
}
#endif

#if defined(__AVX2__) && !defined(__AVX512F__)
// exp_fma (exp_approx.cpp) on eight lanes: the same operations, 2^n applied as in exp8.
__m256 exp8_fma(__m256 x) {
  const __m256 xc = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(kLow)), _mm256_set1_ps(kHigh));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(kLog2e)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2Hi), xc);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2Lo), r);
  __m256 p = _mm256_fmadd_ps(_mm256_set1_ps(kP0), r, _mm256_set1_ps(kP1));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP2));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP3));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP4));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP5));
  p = _mm256_add_ps(_mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r), _mm256_set1_ps(1.0f));
  return exp8_finish(p, n, x);
}
#endif

#if defined(__AVX512F__)
// exp_fma on sixteen lanes, 2^n by scalef (one rounding of p * 2^n, as exp16).
__m512 exp16_fma(__m512 x) {
  const __m512 xc = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(kLow)), _mm512_set1_ps(kHigh));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(xc, _mm512_set1_ps(kLog2e)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kLn2Hi), xc);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kLn2Lo), r);
  __m512 p = _mm512_fmadd_ps(_mm512_set1_ps(kP0), r, _mm512_set1_ps(kP1));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kP2));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kP3));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kP4));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kP5));
  p = _mm512_add_ps(_mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r), _mm512_set1_ps(1.0f));
  const __mmask16 under = _mm512_cmp_ps_mask(x, _mm512_set1_ps(kLow), _CMP_LT_OQ);
  const __mmask16 over = _mm512_cmp_ps_mask(x, _mm512_set1_ps(kHigh), _CMP_GT_OQ);
  const __m512 y = _mm512_maskz_scalef_ps(static_cast<__mmask16>(~under), p, n);
  return _mm512_mask_blend_ps(over, y, _mm512_set1_ps(HUGE_VALF));
}
#endif

}  // namespace

float exp_scale_shift_sum(float* x, size_t n, float scale, float shift) {
  alignas(64) float partial[16] = {};
  size_t i = 0;
#if defined(__AVX512F__)
  const __m512 vscale = _mm512_set1_ps(scale), vshift = _mm512_set1_ps(shift);
  __m512 acc = _mm512_setzero_ps();
  for (; i + 16 <= n; i += 16) {
    const __m512 e = exp16_fma(_mm512_fmsub_ps(_mm512_loadu_ps(x + i), vscale, vshift));
    _mm512_storeu_ps(x + i, e);
    acc = _mm512_add_ps(acc, e);
  }
  if (i < n) {  // the tail's lanes; the others add +0 (a partial sum is >= +0: unchanged)
    const auto m = static_cast<__mmask16>((1u << (n - i)) - 1u);
    const __m512 e = _mm512_maskz_mov_ps(
        m, exp16_fma(_mm512_fmsub_ps(_mm512_maskz_loadu_ps(m, x + i), vscale, vshift)));
    _mm512_mask_storeu_ps(x + i, m, e);
    acc = _mm512_add_ps(acc, e);
    i = n;
  }
  _mm512_store_ps(partial, acc);
#elif defined(__AVX2__)
  const __m256 vscale = _mm256_set1_ps(scale), vshift = _mm256_set1_ps(shift);
  __m256 lo = _mm256_setzero_ps(), hi = lo;  // partial sums 0..7 and 8..15
  for (; i + 16 <= n; i += 16) {
    const __m256 a = exp8_fma(_mm256_fmsub_ps(_mm256_loadu_ps(x + i), vscale, vshift));
    const __m256 b = exp8_fma(_mm256_fmsub_ps(_mm256_loadu_ps(x + i + 8), vscale, vshift));
    _mm256_storeu_ps(x + i, a);
    _mm256_storeu_ps(x + i + 8, b);
    lo = _mm256_add_ps(lo, a);
    hi = _mm256_add_ps(hi, b);
  }
  _mm256_store_ps(partial, lo);
  _mm256_store_ps(partial + 8, hi);
#elif defined(SNAPKV_NEON_KERNELS)
  const float32x4_t vscale = vdupq_n_f32(scale), vshift = vdupq_n_f32(-shift);
  float32x4_t acc[4] = {vdupq_n_f32(0.0f), vdupq_n_f32(0.0f), vdupq_n_f32(0.0f),
                        vdupq_n_f32(0.0f)};  // partial sums 4k..4k+3
  for (; i + 16 <= n; i += 16) {
    for (size_t k = 0; k < 4; ++k) {
      const float32x4_t e = exp4_fma(vfmaq_f32(vshift, vld1q_f32(x + i + 4 * k), vscale));
      vst1q_f32(x + i + 4 * k, e);
      acc[k] = vaddq_f32(acc[k], e);
    }
  }
  for (size_t k = 0; k < 4; ++k) vst1q_f32(partial + 4 * k, acc[k]);
#endif
  for (; i < n; ++i) {  // i % 16 is the partial sum of element i (the body ended at a multiple)
    x[i] = exp_fma(std::fma(x[i], scale, -shift));
    partial[i % 16] += x[i];
  }
  for (size_t w = 8; w >= 1; w /= 2) {
    for (size_t l = 0; l < w; ++l) partial[l] += partial[l + w];
  }
  return partial[0];
}

void exp_n(float* y, const float* x, size_t n) {
  size_t i = 0;
#if defined(__AVX512F__)
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, exp16(_mm512_loadu_ps(x + i)));
#endif
#if defined(__AVX2__)
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, exp8(_mm256_loadu_ps(x + i)));
#endif
#if defined(SNAPKV_NEON_KERNELS)
  for (; i + 4 <= n; i += 4) vst1q_f32(y + i, exp4(vld1q_f32(x + i)));
#endif
  for (; i < n; ++i) y[i] = exp_approx(x[i]);
}

float max_value(const float* x, size_t n) {
  size_t i = 0;
  float m = x[0];
#if defined(__AVX512F__)
  if (n >= 16) {  // max is exact: any grouping gives the same value
    __m512 vm = _mm512_loadu_ps(x);
    for (i = 16; i + 16 <= n; i += 16) vm = _mm512_max_ps(vm, _mm512_loadu_ps(x + i));
    m = std::max(m, _mm512_reduce_max_ps(vm));
  }
#endif
#if defined(__AVX2__)
  if (n - i >= 8) {
    __m256 vm = _mm256_loadu_ps(x + i);
    for (i += 8; i + 8 <= n; i += 8) vm = _mm256_max_ps(vm, _mm256_loadu_ps(x + i));
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, vm);
    for (const float v : lanes) m = std::max(m, v);
  }
#endif
#if defined(SNAPKV_NEON_KERNELS)
  if (n - i >= 4) {
    float32x4_t vm = vld1q_f32(x + i);
    for (i += 4; i + 4 <= n; i += 4) vm = vmaxq_f32(vm, vld1q_f32(x + i));
    m = std::max(m, vmaxvq_f32(vm));
  }
#endif
  for (; i < n; ++i) m = std::max(m, x[i]);
  return m;
}

float exp_shift_sum(float* x, size_t n, float shift) {
  alignas(32) float partial[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  size_t i = 0;
#if defined(__AVX2__)
  const __m256 vshift = _mm256_set1_ps(shift);
  __m256 acc = _mm256_setzero_ps();
#if defined(__AVX512F__)
  // Sixteen at a time, summed as two groups of eight in order: the same eight partial sums.
  const __m512 vshift16 = _mm512_set1_ps(shift);
  for (; i + 16 <= n; i += 16) {
    const __m512 e = exp16(_mm512_sub_ps(_mm512_loadu_ps(x + i), vshift16));
    _mm512_storeu_ps(x + i, e);
    acc = _mm256_add_ps(acc, _mm512_castps512_ps256(e));
    acc = _mm256_add_ps(acc, _mm512_extractf32x8_ps(e, 1));
  }
#endif
  for (; i + 8 <= n; i += 8) {
    const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), vshift));
    _mm256_storeu_ps(x + i, e);
    acc = _mm256_add_ps(acc, e);
  }
  _mm256_store_ps(partial, acc);
#elif defined(SNAPKV_NEON_KERNELS)
  const float32x4_t vshift = vdupq_n_f32(shift);
  float32x4_t lo = vdupq_n_f32(0.0f), hi = lo;  // partial sums 0..3 and 4..7
  for (; i + 8 <= n; i += 8) {
    const float32x4_t a = exp4(vsubq_f32(vld1q_f32(x + i), vshift));
    const float32x4_t b = exp4(vsubq_f32(vld1q_f32(x + i + 4), vshift));
    vst1q_f32(x + i, a);
    vst1q_f32(x + i + 4, b);
    lo = vaddq_f32(lo, a);
    hi = vaddq_f32(hi, b);
  }
  vst1q_f32(partial, lo);
  vst1q_f32(partial + 4, hi);
#else
  for (; i + 8 <= n; i += 8) {
    for (size_t j = 0; j < 8; ++j) {
      const float e = exp_approx(x[i + j] - shift);
      x[i + j] = e;
      partial[j] += e;
    }
  }
#endif
  float sum = 0.0f;
  for (; i < n; ++i) {
    const float e = exp_approx(x[i] - shift);
    x[i] = e;
    sum += e;
  }
  for (const float p : partial) sum += p;
  return sum;
}

void softmax(float* x, size_t n) {
  if (n == 0) return;
  const float sum = exp_shift_sum(x, n, max_value(x, n));
  const float inv = 1.0f / sum;  // sum >= 1: the maximum contributes exp(0) = 1
  for (size_t k = 0; k < n; ++k) x[k] *= inv;
}

}  // namespace snapkv::SNAPKV_ISA
