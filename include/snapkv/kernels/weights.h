// Weight matrices as the kernels read them: the weight types (F32, F16, BF16, Q8_0, Q4_0 and the
// K-quants Q2_K..Q6_K; block layouts in util/quant_blocks.h) and a non-owning row-major view.
// Promises: the row size of every type (block size times block bytes), checked against the block
// size. Leaves out: the products over them (ops/gemm.h) and the file they come from (gguf).
#pragma once

#include <cstddef>

namespace snapkv {

enum class WeightType { f32, f16, q8_0, bf16, q4_0, q2_K, q3_K, q4_K, q5_K, q6_K };

// Non-owning view of a row-major weight matrix [rows][cols] in one of the supported formats. Row r
// starts at data + r * row_bytes(). For a block type, cols must be a multiple of its block size
// (32 for Q8_0 / Q4_0, 256 for the K-quants). (In ggml terms:
// ne[0] = cols, ne[1] = rows.)
struct WeightMatrix {
  WeightType type = WeightType::f32;
  const void* data = nullptr;
  size_t rows = 0;
  size_t cols = 0;

  size_t row_bytes() const;
  size_t total_bytes() const { return rows * row_bytes(); }
};

// Bytes of one row of `cols` elements; throws std::invalid_argument when cols is not a multiple
// of the type's block size.
size_t weight_row_bytes(WeightType type, size_t cols);
// Elements per block: 1 (f32, f16, bf16), 32 (q8_0, q4_0) or 256 (q2_K .. q6_K).
size_t weight_block_size(WeightType type);
// "f32", "f16", "q8_0", "bf16", "q4_0", "q2_K" ... (ggml's spelling).
const char* to_string(WeightType type);

}  // namespace snapkv
