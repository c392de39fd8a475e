// The inputs the benchmark programs build the same way: deterministic noise and weight matrices
// stored in one of the weight types (GGUF encodings, ops/gemm.h WeightType).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "snapkv/gguf/quant.h"
#include "snapkv/ops/gemm.h"

namespace snapkv_bench {

// [n] values in [-scale, scale) from a 64-bit LCG seeded by `seed` (the same values for the same
// seed on every machine).
inline std::vector<float> noise(size_t n, uint64_t seed, float scale = 1.0f) {
  std::vector<float> out(n);
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 7;
  for (float& x : out) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x = static_cast<float>(static_cast<double>(s >> 11) * 0x1.0p-52 - 1.0) * scale;
  }
  return out;
}

// Scale of the weights and activations of the matrix-product benchmarks.
inline constexpr float kMatrixScale = 0.05f;

// A [rows][cols] weight matrix of noise(rows * cols, seed, kMatrixScale) stored as `type`, row by
// row (gguf::quantize_row): [rows][weight_row_bytes(type, cols)] bytes.
inline std::vector<uint8_t> encoded_weights(snapkv::WeightType type, size_t rows, size_t cols,
                                            uint64_t seed = 1) {
  const auto file_type = snapkv::gguf::tensor_type_from_name(snapkv::to_string(type));
  const size_t row_bytes = snapkv::weight_row_bytes(type, cols);
  std::vector<uint8_t> bytes(rows * row_bytes);
  const std::vector<float> m = noise(rows * cols, seed, kMatrixScale);
  for (size_t r = 0; r < rows; ++r) {
    snapkv::gguf::quantize_row(bytes.data() + r * row_bytes, m.data() + r * cols, *file_type, cols);
  }
  return bytes;
}

}  // namespace snapkv_bench
