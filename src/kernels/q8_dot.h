// Activations quantized to 8 bits and integer dot products against quantized weight rows (the
// kernel layer's q8 family), the decode/prefill path that ops/gemm.cpp takes under
// GemmPrecision::q8.
//
// Promises:
//  - Two activation layouts (plain structs pinned by static_assert): BlockQ8_0 (gemm.h: one fp16
//    scale + 32 int8, the pair for Q8_0 / Q4_0 weights) and BlockQ8_K (one fp32 scale + 256 int8
//    + the 16 sums of each run of 16, the pair for Q4_K / Q5_K / Q6_K weights).
//  - quantize_act_*: round to nearest (ties to even). Q8_0: d = amax / 127, q = rint(x / d), the
//    stored scale is fp16(d). Q8_K: d = max / -127 with max the value of largest magnitude (its
//    sign kept), q = rint(x / d) clamped to 127, so every |q| <= 127. Per element
//    |x - D * q| <= |d| * (1/2 + 300 u) + 127 * |D - d| (D the stored scale, u = 2^-24; D == d for
//    Q8_K); an all-zero block gets scale 0 and q = 0 (never a division by zero), and so does a
//    block whose amax is below 127 / FLT_MAX (~3.7e-37, where 1 / d overflows): there the error
//    is |x| <= amax instead. A block holding a
//    NaN or an infinity gets a NaN scale, so every dot with it is NaN (the float path would give
//    NaN or an infinity): non-finite activations are not rejected, they propagate as NaN. A Q8_0
//    block whose amax exceeds 127 * 65504 (fp16's largest) stores an infinite scale, also
//    propagating as a non-finite result; Q8_K has an fp32 scale and no such limit.
//  - dot_<weight>_<act>(w, a, n): n elements (a multiple of the block size), the sum over blocks of
//    (weight scale * activation scale) * (integer dot of the codes). Each has a scalar reference
//    (*_ref) that the fast kernel equals bit for bit: the integer part is exact in both, and the
//    float operations after it are the same ones in the same order, with explicit fma:
//      Q8_0 / Q4_0: one running sum from 0, block after block: sum = fma(dw * da, s, sum) with s
//        the integer dot of the block's 32 codes (dw * da rounded to fp32 first).
//      K-quants: per super-block the exact int32 sums, then sum = fma(dw * da, sumi, sum) and,
//        for Q4_K / Q5_K, sum = fma(-(dmin * da), summ, sum) with summ = sum_s m_s * bsum_s.
//  - Fast paths: AVX2 (maddubs/madd), and AVX-512 VNNI (dpbusd) when the compiler targets it; on
//  arm64 NEON (smull + pairwise adds, sdot with the dot product), the
//    Q8_0 activation quantizer included. All give the same integers. Plain #if guards, a scalar
//    fallback.
// Leaves out: Q2_K / Q3_K weights (they stay on gemm.cpp's float path), F16 / BF16 / F32 weights.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/isa_tables.h"
#include "snapkv/util/quant_blocks.h"

namespace snapkv::ops_internal {

// Q8_K: 256 activations, x ~= d * qs[i]; bsums[j] = sum of qs[16 j .. 16 j + 15]. 292 bytes.
struct BlockQ8_K {
  float d;
  int8_t qs[kQK_K];
  int16_t bsums[kQK_K / 16];
};
static_assert(sizeof(BlockQ8_K) == 292, "Q8_K block must be 292 bytes as in ggml");

// x [n] -> out [n / 32] (n a multiple of 32) and out [n / 256] (n a multiple of 256).
void quantize_act_q8_0(BlockQ8_0* out, const float* x, size_t n);
// The scalar loop that quantize_act_q8_0 (the active ISA level's copy) equals byte for byte.
void quantize_act_q8_0_ref(BlockQ8_0* out, const float* x, size_t n);
void quantize_act_q8_K(BlockQ8_K* out, const float* x, size_t n);

// Weight row w [n / block] against quantized activations a [n / block].
float dot_q8_0_q8_0(const BlockQ8_0* w, const BlockQ8_0* a, size_t n);
float dot_q4_0_q8_0(const BlockQ4_0* w, const BlockQ8_0* a, size_t n);
float dot_q4_K_q8_K(const BlockQ4_K* w, const BlockQ8_K* a, size_t n);
float dot_q5_K_q8_K(const BlockQ5_K* w, const BlockQ8_K* a, size_t n);
float dot_q6_K_q8_K(const BlockQ6_K* w, const BlockQ8_K* a, size_t n);

float dot_q8_0_q8_0_ref(const BlockQ8_0* w, const BlockQ8_0* a, size_t n);
float dot_q4_0_q8_0_ref(const BlockQ4_0* w, const BlockQ8_0* a, size_t n);
float dot_q4_K_q8_K_ref(const BlockQ4_K* w, const BlockQ8_K* a, size_t n);
float dot_q5_K_q8_K_ref(const BlockQ5_K* w, const BlockQ8_K* a, size_t n);
float dot_q6_K_q8_K_ref(const BlockQ6_K* w, const BlockQ8_K* a, size_t n);

// Products of several weight rows with one or several activation rows (decode, decode batches,
// prefill): out [n_tokens][ldo] (the first n_rows columns of each row written),
// out[t * ldo + r] = dot_<weight>_q8_0(w + r * n / 32, a + t * n / 32, n) bit for bit: w holds
// n_rows rows of n / 32 blocks back to back, a n_tokens rows. The fast kernel (AVX2 / VNNI) puts
// the integer sums of 8 weight rows in the lanes of one vector, up to 8 activation rows at a time
// (docs/KERNELS.md), and runs each pair's float operations in the order of dot_*; the reference
// calls the reference dot per pair.
void gemm_q8_0_q8_0(float* out, size_t ldo, const BlockQ8_0* w, size_t n_rows, const BlockQ8_0* a,
                    size_t n_tokens, size_t n);
void gemm_q4_0_q8_0(float* out, size_t ldo, const BlockQ4_0* w, size_t n_rows, const BlockQ8_0* a,
                    size_t n_tokens, size_t n);
// The K-quants: the same contract with Q8_K activations (n / 256 blocks per row), the pair dots
// in a loop (one dispatch per call instead of one per pair); their reference is dot_*_ref per pair.
void gemm_q4_K_q8_K(float* out, size_t ldo, const BlockQ4_K* w, size_t n_rows, const BlockQ8_K* a,
                    size_t n_tokens, size_t n);
void gemm_q5_K_q8_K(float* out, size_t ldo, const BlockQ5_K* w, size_t n_rows, const BlockQ8_K* a,
                    size_t n_tokens, size_t n);
void gemm_q6_K_q8_K(float* out, size_t ldo, const BlockQ6_K* w, size_t n_rows, const BlockQ8_K* a,
                    size_t n_tokens, size_t n);
void gemm_q8_0_q8_0_ref(float* out, size_t ldo, const BlockQ8_0* w, size_t n_rows,
                        const BlockQ8_0* a, size_t n_tokens, size_t n);
void gemm_q4_0_q8_0_ref(float* out, size_t ldo, const BlockQ4_0* w, size_t n_rows,
                        const BlockQ8_0* a, size_t n_tokens, size_t n);

// Which SIMD path the dot kernels of this build use: "avx512vnni", "avx2" or "scalar".
const char* q8_dot_isa();

}  // namespace snapkv::ops_internal

// The q8 family of the kernel registry (kernels/registry.h): each level's integer kernels
// (q8_dot_simd.cpp, q8_dot_kquants_simd.cpp, q8_act_simd.cpp).
#define SNAPKV_Q8_DOT_DECLARE(NS)                                                    \
  namespace snapkv::NS {                                                             \
  using ops_internal::BlockQ8_K;                                                     \
  float dot_q8_0_q8_0(const BlockQ8_0* w, const BlockQ8_0* a, size_t n);             \
  float dot_q4_0_q8_0(const BlockQ4_0* w, const BlockQ8_0* a, size_t n);             \
  float dot_q4_K_q8_K(const BlockQ4_K* w, const BlockQ8_K* a, size_t n);             \
  float dot_q5_K_q8_K(const BlockQ5_K* w, const BlockQ8_K* a, size_t n);             \
  float dot_q6_K_q8_K(const BlockQ6_K* w, const BlockQ8_K* a, size_t n);             \
  float dot_q8_0_q8_0_ref(const BlockQ8_0* w, const BlockQ8_0* a, size_t n);         \
  float dot_q4_0_q8_0_ref(const BlockQ4_0* w, const BlockQ8_0* a, size_t n);         \
  float dot_q4_K_q8_K_ref(const BlockQ4_K* w, const BlockQ8_K* a, size_t n);         \
  float dot_q5_K_q8_K_ref(const BlockQ5_K* w, const BlockQ8_K* a, size_t n);         \
  float dot_q6_K_q8_K_ref(const BlockQ6_K* w, const BlockQ8_K* a, size_t n);         \
  void gemm_q8_0_q8_0(float* out, size_t ldo, const BlockQ8_0* w, size_t n_rows,     \
                      const BlockQ8_0* a, size_t n_tokens, size_t n);                \
  void gemm_q4_0_q8_0(float* out, size_t ldo, const BlockQ4_0* w, size_t n_rows,     \
                      const BlockQ8_0* a, size_t n_tokens, size_t n);                \
  void gemm_q8_0_q8_0_ref(float* out, size_t ldo, const BlockQ8_0* w, size_t n_rows, \
                          const BlockQ8_0* a, size_t n_tokens, size_t n);            \
  void gemm_q4_0_q8_0_ref(float* out, size_t ldo, const BlockQ4_0* w, size_t n_rows, \
                          const BlockQ8_0* a, size_t n_tokens, size_t n);            \
  void gemm_q4_K_q8_K(float* out, size_t ldo, const BlockQ4_K* w, size_t n_rows,     \
                      const BlockQ8_K* a, size_t n_tokens, size_t n);                \
  void gemm_q5_K_q8_K(float* out, size_t ldo, const BlockQ5_K* w, size_t n_rows,     \
                      const BlockQ8_K* a, size_t n_tokens, size_t n);                \
  void gemm_q6_K_q8_K(float* out, size_t ldo, const BlockQ6_K* w, size_t n_rows,     \
                      const BlockQ8_K* a, size_t n_tokens, size_t n);                \
  void quantize_act_q8_0(BlockQ8_0* out, const float* x, size_t n);                  \
  const char* q8_dot_isa();                                                          \
  }

SNAPKV_ISA_DECLARE(SNAPKV_Q8_DOT_DECLARE)

namespace snapkv::kernels {

using ops_internal::BlockQ8_K;

// The q8 family of the registry (kernels/registry.h).
struct Q8DotKernels {
  float (*q8_0)(const BlockQ8_0*, const BlockQ8_0*, size_t);
  float (*q4_0)(const BlockQ4_0*, const BlockQ8_0*, size_t);
  float (*q4_K)(const BlockQ4_K*, const BlockQ8_K*, size_t);
  float (*q5_K)(const BlockQ5_K*, const BlockQ8_K*, size_t);
  float (*q6_K)(const BlockQ6_K*, const BlockQ8_K*, size_t);
  void (*gemm_q8_0)(float*, size_t, const BlockQ8_0*, size_t, const BlockQ8_0*, size_t, size_t);
  void (*gemm_q4_0)(float*, size_t, const BlockQ4_0*, size_t, const BlockQ8_0*, size_t, size_t);
  void (*gemm_q4_K)(float*, size_t, const BlockQ4_K*, size_t, const BlockQ8_K*, size_t, size_t);
  void (*gemm_q5_K)(float*, size_t, const BlockQ5_K*, size_t, const BlockQ8_K*, size_t, size_t);
  void (*gemm_q6_K)(float*, size_t, const BlockQ6_K*, size_t, const BlockQ8_K*, size_t, size_t);
  void (*quantize_q8_0)(BlockQ8_0*, const float*, size_t);
  const char* (*isa)();
};

}  // namespace snapkv::kernels

#define SNAPKV_Q8_DOT_ENTRY(NS)                                                            \
  kernels::Q8DotKernels {                                                                  \
    &NS::dot_q8_0_q8_0, &NS::dot_q4_0_q8_0, &NS::dot_q4_K_q8_K, &NS::dot_q5_K_q8_K,        \
        &NS::dot_q6_K_q8_K, &NS::gemm_q8_0_q8_0, &NS::gemm_q4_0_q8_0, &NS::gemm_q4_K_q8_K, \
        &NS::gemm_q5_K_q8_K, &NS::gemm_q6_K_q8_K, &NS::quantize_act_q8_0, &NS::q8_dot_isa  \
  }
