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

class LlamaFixture : public ::testing::TestWithParam<const char*> {};

TEST_P(LlamaFixture, DequantizationMatchesLlamaCppBitwise) {
  const std::string stem = kDir + "tiny-" + GetParam();
  const File file = File::open(stem + ".gguf");
  const NpyArray want = read_npy(stem + ".rows.npy", 3);
  const NpyArray want_types = read_npy(stem + ".types.npy", 1);
  const size_t n_cols = want.shape[2];
  ASSERT_EQ(want.shape[1], 3u);

  size_t k = 0;  // index among the 2-D tensors, in file order
  for (const TensorInfo& t : file.tensors()) {
    if (t.ne.size() != 2) continue;
    ASSERT_LT(k, want.shape[0]) << "more matrices in the file than in the fixture";
    SCOPED_TRACE(t.name + " (" + std::string(tensor_type_name(t.type)) + ")");
    EXPECT_EQ(static_cast<int32_t>(t.type), static_cast<int32_t>(want_types.data[k]));
    ASSERT_EQ(static_cast<size_t>(t.ne[0]), n_cols);
    const auto wt = weight_type_of(t.type);
    ASSERT_TRUE(wt.has_value());
    const WeightMatrix w{*wt, t.data, static_cast<size_t>(t.ne[1]), n_cols};
    const size_t rows[3] = {0, 1, static_cast<size_t>(t.ne[1]) - 1};
    std::vector<float> ours(n_cols), fast(n_cols), x(n_cols), y(w.rows);
    for (size_t c = 0; c < n_cols; ++c) x[c] = std::sin(0.37f * static_cast<float>(c)) + 0.25f;
    gemv(y.data(), x.data(), w, GemmPrecision::f32);  // q8: tests/ops/q8_dot_test.cpp
    for (size_t j = 0; j < 3; ++j) {
      const float* theirs = want.data.data() + (k * 3 + j) * n_cols;
      dequantize_row(ours.data(), t.row(static_cast<int64_t>(rows[j])), t.type, n_cols);
      dequantize_rows(fast.data(), w, rows[j], rows[j] + 1);
      for (size_t c = 0; c < n_cols; ++c) {
        ASSERT_EQ(std::memcmp(&ours[c], &theirs[c], sizeof(float)), 0)
            << "row " << rows[j] << " col " << c << ": ours " << ours[c] << " llama.cpp "
            << theirs[c];
        ASSERT_EQ(std::memcmp(&fast[c], &theirs[c], sizeof(float)), 0)
            << "fast path, row " << rows[j] << " col " << c;
      }
      // gemv over the quantized row vs the double product of llama.cpp's values:
      // |err| <= n * eps * sum |w x| (fp32 accumulation, a-priori bound).
      double exact = 0.0, abs_sum = 0.0;
      for (size_t c = 0; c < n_cols; ++c) {
        exact += static_cast<double>(theirs[c]) * x[c];
        abs_sum += std::fabs(static_cast<double>(theirs[c]) * x[c]);
      }
      const double bound =
          static_cast<double>(n_cols) * std::numeric_limits<float>::epsilon() * abs_sum;
      EXPECT_LE(std::fabs(y[rows[j]] - exact), bound) << "gemv row " << rows[j];
    }
    ++k;
  }
  EXPECT_EQ(k, want.shape[0]) << "fewer matrices in the file than in the fixture";
}

INSTANTIATE_TEST_SUITE_P(Ftypes, LlamaFixture, ::testing::ValuesIn(kFtypes),
                         [](const auto& param_info) { return std::string(param_info.param); });

// The fixtures must exercise every type this project claims to read from llama.cpp's files.
TEST(LlamaFixtures, CoverEveryQuantizedType) {
  std::set<int32_t> seen;
  for (const char* ftype : kFtypes) {
    const NpyArray types = read_npy(kDir + "tiny-" + ftype + ".types.npy", 1);
    for (float t : types.data) seen.insert(static_cast<int32_t>(t));
  }
  for (TensorType t : {TensorType::q4_0, TensorType::q8_0, TensorType::q2_K, TensorType::q3_K,
                       TensorType::q4_K, TensorType::q5_K, TensorType::q6_K, TensorType::bf16}) {
    EXPECT_EQ(seen.count(static_cast<int32_t>(t)), 1u) << tensor_type_name(t);
  }
}

}  // namespace
}  // namespace snapkv::gguf
