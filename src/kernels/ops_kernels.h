// The ops family of the kernel registry: the kernels compiled once per ISA level behind the public
// functions of ops/dot.h, softmax.h, quant_blocks.h and gemm.h (dot_simd.cpp, softmax_simd.cpp,
// quant_blocks_simd.cpp, gemm_simd.cpp; see kernels/isa.h). Each entry has the contract of the
// public function of the same name; gemv_rows / dequantize_rows take an already validated matrix.
#pragma once

#include <cstddef>

#include "kernels/isa_tables.h"
#include "snapkv/kernels/weights.h"
#include "snapkv/util/fp16.h"
#include "snapkv/util/quant_blocks.h"

namespace snapkv {
// The scalar references of the dot kernels (contracts in snapkv/ops/dot.h; dot_ref.cpp).
float dot_scalar(const float* a, const float* b, size_t n);
float dot_f16_scalar(const float* a, const fp16_t* b, size_t n);
void axpy_scalar(float* y, float alpha, const float* x, size_t n);
void axpy_f16_scalar(float* y, float alpha, const fp16_t* x, size_t n);
}  // namespace snapkv

namespace snapkv::ops_internal {
// The F16 decode matvec's variants (gemm_simd.cpp), all with the bits of the per-row dot_f16:
//   per_row        one row at a time (dot_f16)
//   rows           kF16RowsInFlight rows at once, sharing the loads of x
//   rows_prefetch  rows, plus a software prefetch of the next group of rows
//   row_acc8       one row at a time (the matrix read as one stream) with eight FMA chains: its
//                  own summation order (gemm_simd.cpp dot_f16_row_acc8), the same at both SIMD
//                  levels; widths that are not a multiple of 64 take per_row
//   row_acc8_prefetch  row_acc8 plus a software prefetch 2 KiB ahead in the stream
//   by_width       per_row for rows of at most kF16LongRowCols columns, rows_prefetch for longer
//                  ones (x of a long row, 4 bytes a column, outgrows half the 32 KiB L1 data
//                  cache, and one row at a time then re-reads it from L2 for every row; four rows
//                  in flight read it once per four rows)
// (per_row, rows, rows_prefetch and by_width give the bits of the per-row dot_f16; at the scalar
// level all are per_row)
// gemv and gemv_multi use f16_gemv_kernel(): kDefaultF16GemvKernel, or the one named by the
// environment variable SNAPKV_F16_GEMV (per_row, rows, rows_prefetch, row_acc8,
// row_acc8_prefetch, by_width; read once, anything else throws std::invalid_argument), to compare
// them over a whole decode; bench_gemv_decode times all six in one run. The default is by_width,
// its threshold set by the L1 argument above (docs/KERNELS.md, GEMV: what was measured).
enum class F16GemvKernel { per_row, rows, rows_prefetch, row_acc8, row_acc8_prefetch, by_width };
inline constexpr size_t kF16RowsInFlight = 4;
inline constexpr size_t kF16LongRowCols = 4096;  // by_width: longer rows take rows_prefetch
inline constexpr F16GemvKernel kDefaultF16GemvKernel = F16GemvKernel::by_width;
}  // namespace snapkv::ops_internal

#define SNAPKV_OPS_KERNELS_DECLARE(NS)                                                       \
  namespace snapkv::NS {                                                                     \
  float dot(const float* a, const float* b, size_t n);                                       \
  float dot_f16(const float* a, const fp16_t* b, size_t n);                                  \
  void axpy(float* y, float alpha, const float* x, size_t n);                                \
  void axpy_f16(float* y, float alpha, const fp16_t* x, size_t n);                           \
  void exp_n(float* y, const float* x, size_t n);                                            \
  float max_value(const float* x, size_t n);                                                 \
  float exp_shift_sum(float* x, size_t n, float shift);                                      \
  float exp_scale_shift_sum(float* x, size_t n, float scale, float shift);                   \
  void softmax(float* x, size_t n);                                                          \
  void decode_block(float* out, const BlockQ4_0& b);                                         \
  void decode_block(float* out, const BlockQ2_K& b);                                         \
  void decode_block(float* out, const BlockQ3_K& b);                                         \
  void decode_block(float* out, const BlockQ4_K& b);                                         \
  void decode_block(float* out, const BlockQ5_K& b);                                         \
  void decode_block(float* out, const BlockQ6_K& b);                                         \
  /* out [row_end - row_begin] = rows [row_begin, row_end) of w times x */                   \
  void gemv_rows(float* out, const float* x, const WeightMatrix& w, size_t row_begin,        \
                 size_t row_end);                                                            \
  void dequantize_rows(float* out, const WeightMatrix& w, size_t row_begin, size_t row_end); \
  /* gemv_rows of an F16 matrix through the given variant */                                 \
  void gemv_rows_f16(float* out, const float* x, const WeightMatrix& w, size_t row_begin,    \
                     size_t row_end, ops_internal::F16GemvKernel kernel);                    \
  }

SNAPKV_ISA_DECLARE(SNAPKV_OPS_KERNELS_DECLARE)

namespace snapkv::kernels {

using ops_internal::F16GemvKernel;

// The ops family of the registry (kernels/registry.h).
struct OpsKernels {
  float (*dot)(const float*, const float*, size_t);
  float (*dot_f16)(const float*, const fp16_t*, size_t);
  void (*axpy)(float*, float, const float*, size_t);
  void (*axpy_f16)(float*, float, const fp16_t*, size_t);
  void (*exp_n)(float*, const float*, size_t);
  float (*max_value)(const float*, size_t);
  float (*exp_shift_sum)(float*, size_t, float);
  float (*exp_scale_shift_sum)(float*, size_t, float, float);
  void (*softmax)(float*, size_t);
  void (*decode_q4_0)(float*, const BlockQ4_0&);
  void (*decode_q2_K)(float*, const BlockQ2_K&);
  void (*decode_q3_K)(float*, const BlockQ3_K&);
  void (*decode_q4_K)(float*, const BlockQ4_K&);
  void (*decode_q5_K)(float*, const BlockQ5_K&);
  void (*decode_q6_K)(float*, const BlockQ6_K&);
  void (*gemv_rows)(float*, const float*, const WeightMatrix&, size_t, size_t);
  void (*dequantize_rows)(float*, const WeightMatrix&, size_t, size_t);
  void (*gemv_rows_f16)(float*, const float*, const WeightMatrix&, size_t, size_t, F16GemvKernel);
};

}  // namespace snapkv::kernels

#define SNAPKV_OPS_KERNELS_ENTRY(NS)                                                   \
  kernels::OpsKernels {                                                                \
    &NS::dot, &NS::dot_f16, &NS::axpy, &NS::axpy_f16, &NS::exp_n, &NS::max_value,      \
        &NS::exp_shift_sum, &NS::exp_scale_shift_sum, &NS::softmax, &NS::decode_block, \
        &NS::decode_block, &NS::decode_block, &NS::decode_block, &NS::decode_block,    \
        &NS::decode_block, &NS::gemv_rows, &NS::dequantize_rows, &NS::gemv_rows_f16    \
  }
