// Matrix products against weight matrices that stay in their stored format (F32, F16, Q8_0).
// The weights are used in place (e.g. straight from a memory-mapped GGUF file): F16 and Q8_0 rows
// are dequantized inside the kernels, a tile at a time, never copied whole to fp32.
//
//   matmul: out[t][r] = sum_c W[r][c] * x[t][c]   (x [n_tokens][cols], out [n_tokens][rows])
//     n_tokens >= kGemmMinTokens: a tile of rows is dequantized into a small fp32 scratch, then
//     cblas_sgemm (OpenBLAS); smaller n_tokens go through the threaded GEMV.
//   gemv:   out[r] = sum_c W[r][c] * x[c], rows spread over snapkv::parallel_for, F16C/AVX2 inner
//     loops with a scalar fallback.
// Each fast kernel has a scalar reference (*_ref) accumulating in double, which tests hold it to.
// This file knows nothing about files, models or caches.
#pragma once

#include <cstddef>
#include <cstdint>

#include "snapkv/util/fp16.h"

namespace snapkv {

enum class WeightType { f32, f16, q8_0 };

// Q8_0 as ggml stores it: 32 weights share one fp16 scale, value = d * qs[j].
inline constexpr size_t kQ8BlockSize = 32;
struct BlockQ8_0 {
  fp16_t d;
  int8_t qs[kQ8BlockSize];
};
static_assert(sizeof(BlockQ8_0) == 34, "Q8_0 block must be 34 bytes as in ggml");

// Token counts at or above this use the dequantize-tile + sgemm path.
inline constexpr size_t kGemmMinTokens = 4;

// Non-owning view of a row-major weight matrix [rows][cols] in one of the supported formats. Row r
// starts at data + r * row_bytes(). For Q8_0, cols must be a multiple of 32. (In ggml terms:
// ne[0] = cols, ne[1] = rows.)
struct WeightMatrix {
  WeightType type = WeightType::f32;
  const void* data = nullptr;
  size_t rows = 0;
  size_t cols = 0;

  size_t row_bytes() const;
  size_t total_bytes() const { return rows * row_bytes(); }
};

// Bytes of one row of `cols` elements; throws std::invalid_argument for Q8_0 with cols % 32 != 0.
size_t weight_row_bytes(WeightType type, size_t cols);
const char* to_string(WeightType type);

// Checks the view (non-null data, rows/cols > 0, Q8_0 alignment); throws std::invalid_argument
// naming `what`.
void validate_weight(const WeightMatrix& w, const char* what);

// Decodes rows [row_begin, row_end) into out [row_end - row_begin][cols] (fast and reference).
void dequantize_rows(float* out, const WeightMatrix& w, size_t row_begin, size_t row_end);
void dequantize_rows_ref(float* out, const WeightMatrix& w, size_t row_begin, size_t row_end);

// out [rows] = W [rows][cols] x [cols]; threaded over rows.
void gemv(float* out, const float* x, const WeightMatrix& w);
// out [n_tokens][rows] = x [n_tokens][cols] W^T.
void matmul(float* out, const float* x, const WeightMatrix& w, size_t n_tokens);
// Reference: dequantize with the scalar decoder, accumulate in double.
void matmul_ref(float* out, const float* x, const WeightMatrix& w, size_t n_tokens);

// Quantizes n floats (n % 32 == 0) to Q8_0 as ggml does: d = amax / 127 stored as fp16,
// qs = round(x / d) (half away from zero), d = 0 for an all-zero block. For tests and tools.
void quantize_q8_0(BlockQ8_0* out, const float* x, size_t n);

// Threads used by OpenBLAS inside matmul (the parallel_for count is set in util/parallel.h).
void set_blas_threads(int n);
int blas_threads();  // OpenBLAS's current thread count

}  // namespace snapkv
