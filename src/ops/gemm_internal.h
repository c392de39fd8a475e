// Internal to ops/: gemm.cpp's and gemm_q8.cpp's shared pieces: the products with quantized
// activations (over the kernel layer's integer dots, kernels/q8_dot.h) and the F16 decode matvec
// through a chosen variant (kernels/ops_kernels.h F16GemvKernel).
#pragma once

#include <cstddef>
#include <vector>

#include "kernels/ops_kernels.h"
#include "kernels/q8_dot.h"
#include "snapkv/ops/gemm.h"

namespace snapkv::ops_internal {

// gemm_q8.cpp: out [n_tokens][rows] = x [n_tokens][cols] W^T with quantized activations when
// w.type has an integer kernel (Q8_0, Q4_0, Q4_K, Q5_K, Q6_K); returns false, touching nothing,
// for any other type. The view must be valid (validate_weight).
bool matmul_q8(float* out, const float* x, const WeightMatrix& w, size_t n_tokens);

// One activation row quantized for the integer kernels (gemm_q8.cpp), shared by several products
// of the same input (gemm.cpp gemv_multi): prepare() quantizes x for the activation layout of
// `type` (Q8_0 blocks for Q8_0 / Q4_0, Q8_K for the K-quants) once; a second call for the same
// layout is a no-op. The vectors keep their capacity between uses.
struct Q8Activations {
  std::vector<BlockQ8_0> q8_0;
  std::vector<BlockQ8_K> q8_K;
  size_t q8_0_cols = 0, q8_K_cols = 0;  // 0: not prepared
  void reset() { q8_0_cols = q8_K_cols = 0; }
  void prepare(const float* x, size_t cols, WeightType type);
};
// True for the weight types matmul_q8 handles.
bool has_q8_kernel(WeightType type);
// out [r1 - r0] = rows [r0, r1) of w against the prepared activations: the bits of
// matmul_q8(.., n_tokens = 1) for those rows.
void gemv_q8_rows(float* out, const Q8Activations& act, const WeightMatrix& w, size_t r0,
                  size_t r1);

// gemm.cpp: rows per parallel task of a product with `cols` columns.
size_t rows_per_task(size_t rows, size_t cols);

F16GemvKernel f16_gemv_kernel();  // gemm.cpp

// gemm.cpp: gemv (out [rows] = W x, threaded over rows) of an F16 matrix through `kernel` at the
// active level; gemv itself takes kDefaultF16GemvKernel. Throws for another weight type.
void gemv_f16(float* out, const float* x, const WeightMatrix& w, F16GemvKernel kernel);

}  // namespace snapkv::ops_internal
