// Matrix products against weight matrices that stay in their stored format (F32, F16, BF16, Q8_0,
// Q4_0 and the K-quants Q2_K..Q6_K; block layouts in util/quant_blocks.h). The weights are used in
// place (e.g. straight from a memory-mapped GGUF file): encoded rows are dequantized inside the
// kernels, a block or a tile at a time, never copied whole to fp32.
//
//   matmul: out[t][r] = sum_c W[r][c] * x[t][c]   (x [n_tokens][cols], out [n_tokens][rows])
//     n_tokens >= kGemmMinTokens: tiles of weight rows are spread over snapkv::parallel_for; each
//     task dequantizes its tile into a small fp32 scratch, then runs a single-threaded
//     cblas_sgemm (OpenBLAS) into its columns of out; smaller n_tokens go through the threaded
//     GEMV. One thread pool: OpenBLAS is pinned to one thread (set_blas_threads below).
//   gemv:   out[r] = sum_c W[r][c] * x[c], rows spread over snapkv::parallel_for, F16C/AVX2 inner
//     loops with a scalar fallback; block types decode one block into registers-sized scratch
//     (decode_block) and dot it with x in fp32. F16 rows (the decode of an F16 model) go through
//     the per-row F16C dot, or four rows at once for rows longer than 4096 columns (both with the
//     per-row dot's bits; src/kernels/ops_kernels.h F16GemvKernel::by_width; SNAPKV_F16_GEMV picks
//     another variant to compare against).
//   GemmPrecision::q8 (the default for gemv, and for matmul on Q8_0 / Q4_0): for Q8_0, Q4_0,
//     Q4_K, Q5_K and Q6_K weights x is quantized to 8 bits once per product and the rows are
//     dotted with it in integer arithmetic (src/kernels/q8_dot.h), as llama.cpp does; Q8_0 / Q4_0
//     products of several tokens run register-tiled kernels; see GemmPrecision below.
// Each fast kernel has a scalar reference (*_ref) accumulating in double, which tests hold it to.
// This file knows nothing about files, models or caches.
#pragma once

#include <cstddef>
#include <cstdint>

#include "snapkv/kernels/weights.h"
#include "snapkv/ops/quant_blocks.h"
#include "snapkv/util/fp16.h"

namespace snapkv {

// Token counts at or above this use the dequantize-tile + sgemm path.
inline constexpr size_t kGemmMinTokens = 4;

// Checks the view (non-null data, rows/cols > 0, cols a multiple of the block size); throws
// std::invalid_argument naming `what`.
void validate_weight(const WeightMatrix& w, const char* what);

// How quantized weights of type Q8_0, Q4_0, Q4_K, Q5_K or Q6_K meet the activations (every other
// type always takes the f32 path):
//   f32: each weight block is decoded to fp32 and dotted with the fp32 activations (gemv), or a
//        tile of rows is decoded and multiplied by sgemm (matmul). Bit-exact with the F32 kernels
//        on the dequantized weights.
//   q8:  each activation row is quantized once per product to 8 bits (Q8_0 blocks for Q8_0 / Q4_0
//        weights, Q8_K super-blocks for the K-quants, as llama.cpp does) and the weights are
//        dotted with it in integer arithmetic (src/kernels/q8_dot.h). Adds the activation rounding:
//        |error| <= sum_i |w_i| * (activation scale of i's block) / 2 (+ fp32 rounding).
//   fastest: per weight type, whichever of the two was measured faster (bench_matmul_precision,
//        interleaved runs on one machine): q8 for gemv and for matmul on Q8_0 / Q4_0 (the
//        register-tiled integer kernels), f32 for matmul on the K-quants (their per-pair integer
//        dots lose to dequantize + sgemm when many tokens share each weight row).
enum class GemmPrecision { f32, q8, fastest };
const char* to_string(GemmPrecision p);  // "f32" / "q8" / "fastest"
// The precision `fastest` resolves to for a product with n_tokens rows of activations (gemv: 1);
// f32 and q8 resolve to themselves.
GemmPrecision resolve_precision(GemmPrecision p, WeightType type, size_t n_tokens);

// The precision that gemv / matmul use when none is given. Initially the value of the environment
// variable SNAPKV_GEMM_PRECISION ("f32", "q8" or "fastest"; anything else throws
// std::invalid_argument on the first call) or, when unset, kDefaultGemvPrecision for gemv and
// kDefaultMatmulPrecision for matmul's multi-token path. set_gemm_precision sets them
// (process-wide, thread-safe).
inline constexpr GemmPrecision kDefaultGemvPrecision = GemmPrecision::q8;
inline constexpr GemmPrecision kDefaultMatmulPrecision = GemmPrecision::fastest;
void set_gemm_precision(GemmPrecision p);  // both
void set_gemm_precision(GemmPrecision gemv, GemmPrecision matmul);
GemmPrecision gemv_precision();
GemmPrecision matmul_precision();

// Decodes rows [row_begin, row_end) into out [row_end - row_begin][cols] (fast and reference).
void dequantize_rows(float* out, const WeightMatrix& w, size_t row_begin, size_t row_end);
void dequantize_rows_ref(float* out, const WeightMatrix& w, size_t row_begin, size_t row_end);

// out [rows] = W [rows][cols] x [cols]; threaded over rows.
void gemv(float* out, const float* x, const WeightMatrix& w);
void gemv(float* out, const float* x, const WeightMatrix& w, GemmPrecision precision);
// Several products of one input, in one parallel region (a decode step's Q / K / V, or gate / up):
// outs[i] [ws[i].rows] = ws[i] x for i < count (at most 8), x [cols] with cols the width of every
// ws[i] (checked). Each output has the bits of gemv(outs[i], x, ws[i]) under gemv_precision(); a
// quantized activation row is made once per layout and shared. Saves the count - 1 thread-pool
// round trips of separate calls.
void gemv_multi(float* const* outs, const float* x, const WeightMatrix* ws, size_t count);
// out [n_tokens][rows] = x [n_tokens][cols] W^T. Under q8 every token row is quantized once and
// the integer dots run over tiles of weight rows x tokens.
void matmul(float* out, const float* x, const WeightMatrix& w, size_t n_tokens);
void matmul(float* out, const float* x, const WeightMatrix& w, size_t n_tokens,
            GemmPrecision precision);
// Reference: dequantize with the scalar decoder, accumulate in double.
void matmul_ref(float* out, const float* x, const WeightMatrix& w, size_t n_tokens);

// OpenBLAS's own thread count. matmul and sgemm_nt thread over parallel_for (util/parallel.h)
// and expect 1: they pin it to 1 at their first call, and the CLI's --threads sets 1. A larger
// count only adds OpenBLAS's pthread workers, which spin beside ours on the same cores (and
// concurrent multi-threaded calls serialise on OpenBLAS's level-3 lock). A no-op when
// !blas_allowed().
void set_blas_threads(int n);
int blas_threads();  // OpenBLAS's current thread count

// c [m][ldc] (first n columns) = alpha * a [m][k] b^T, b [n][k]: cblas_sgemm when allowed, else
// rows spread over parallel_for with fp32 dot products.
void sgemm_nt(float* c, const float* a, const float* b, size_t m, size_t n, size_t k, float alpha,
              size_t ldc);

// False when the process runs under an address-space limit (RLIMIT_AS, `ulimit -v`): OpenBLAS
// (Debian's 0.3.21 pthread build) gives every thread a 128 MiB buffer and retries forever when it
// cannot map one, so under a limit every BLAS call, and each OpenBLAS worker thread, can spin
// without end. Then matmul and sgemm_nt use their own loops (slower prefill, same contract) and
// set_blas_threads does nothing. The worker threads OpenBLAS starts when it is loaded are outside
// our reach: run with OPENBLAS_NUM_THREADS=1 under a limit (the `snapkv` command re-executes itself
// with it set).
bool blas_allowed();

}  // namespace snapkv
