// Row sizes and names of the weight types (snapkv/kernels/weights.h).
#include "snapkv/kernels/weights.h"

#include <cstdint>
#include <string>

#include "snapkv/util/error.h"
#include "snapkv/util/quant_blocks.h"

namespace snapkv {

size_t weight_block_size(WeightType type) {
  switch (type) {
    case WeightType::f32:
    case WeightType::f16:
    case WeightType::bf16:
      return 1;
    case WeightType::q8_0:
      return kQ8BlockSize;
    case WeightType::q4_0:
      return kQ4_0BlockSize;
    case WeightType::q2_K:
    case WeightType::q3_K:
    case WeightType::q4_K:
    case WeightType::q5_K:
    case WeightType::q6_K:
      return kQK_K;
  }
  throw_invalid("gemm", "unknown weight type", std::to_string(static_cast<int>(type)),
                "f32, f16, bf16, q8_0, q4_0, q2_K, q3_K, q4_K, q5_K or q6_K");
}

size_t weight_row_bytes(WeightType type, size_t cols) {
  const size_t bs = weight_block_size(type);
  if (cols % bs != 0) {
    throw_invalid("gemm",
                  std::string(to_string(type)) + " row length not a multiple of the block size",
                  std::to_string(cols), "a multiple of " + std::to_string(bs));
  }
  switch (type) {
    case WeightType::f32:
      return cols * sizeof(float);
    case WeightType::f16:
    case WeightType::bf16:
      return cols * sizeof(uint16_t);
    case WeightType::q8_0:
      return cols / bs * sizeof(BlockQ8_0);
    case WeightType::q4_0:
      return cols / bs * sizeof(BlockQ4_0);
    case WeightType::q2_K:
      return cols / bs * sizeof(BlockQ2_K);
    case WeightType::q3_K:
      return cols / bs * sizeof(BlockQ3_K);
    case WeightType::q4_K:
      return cols / bs * sizeof(BlockQ4_K);
    case WeightType::q5_K:
      return cols / bs * sizeof(BlockQ5_K);
    case WeightType::q6_K:
      return cols / bs * sizeof(BlockQ6_K);
  }
  return 0;  // unreachable: weight_block_size threw
}

size_t WeightMatrix::row_bytes() const {
  return weight_row_bytes(type, cols);
}

const char* to_string(WeightType type) {
  switch (type) {
    case WeightType::f32:
      return "f32";
    case WeightType::f16:
      return "f16";
    case WeightType::q8_0:
      return "q8_0";
    case WeightType::bf16:
      return "bf16";
    case WeightType::q4_0:
      return "q4_0";
    case WeightType::q2_K:
      return "q2_K";
    case WeightType::q3_K:
      return "q3_K";
    case WeightType::q4_K:
      return "q4_K";
    case WeightType::q5_K:
      return "q5_K";
    case WeightType::q6_K:
      return "q6_K";
  }
  return "?";
}

}  // namespace snapkv
