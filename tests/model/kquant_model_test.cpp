// The engine on files quantized by llama.cpp's llama-quantize (tests/gguf/data/kquant/: Q4_K_M,
// Q5_K_M, Q6_K, Q2_K, Q3_K_M, Q4_0 and BF16 mixes of a one-layer random Llama; Q8_0's gemv applies
// the block scale after the block's sum, a different rounding, and is covered by the golden tests).
// Each file loads, and its prefill + decode logits equal those of an F32 twin holding our
// dequantization of the same weights: the kernels decode a block (or a tile) to the exact same fp32
// weights and accumulate in the same order as the F32 kernels (2 x 8-lane accumulators over the row
// for gemv, sgemm on the dequantized tile for matmul), so the logits agree bit for bit. (Our
// dequantization itself is held to llama.cpp's in tests/gguf/gguf_llama_fixtures_test.cpp.)
// Runs under GemmPrecision::f32 (the default decode path, q8, quantizes the activations and is
// compared with this one in q8_activation_model_test.cpp).
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "snapkv/gguf/gguf.h"
#include "snapkv/kv/core/config.h"
#include "snapkv/model/llama.h"
#include "snapkv/ops/gemm.h"

namespace snapkv {
namespace {

const std::string kDir = std::string(SNAPKV_SOURCE_DIR) + "/tests/gguf/data/kquant/";

// The same file with every tensor stored as F32 (values = our dequantization).
gguf::File f32_twin(const gguf::File& f) {
  gguf::Writer w;
  for (const gguf::KeyValue& kv : f.metadata()) w.set(kv.key, kv.value);
  for (const gguf::TensorInfo& t : f.tensors()) {
    const auto n_cols = static_cast<size_t>(t.ne[0]);
    std::vector<float> values(static_cast<size_t>(t.n_elements()));
    for (int64_t r = 0; r < t.n_rows(); ++r) {
      gguf::dequantize_row(values.data() + static_cast<size_t>(r) * n_cols, t.row(r), t.type,
                           n_cols);
    }
    w.add_tensor_f32(t.name, gguf::TensorType::f32, t.ne, values);
  }
  return gguf::File::from_bytes(w.to_bytes());
}

std::vector<float> run(const LlamaModel& model, size_t n_decode) {
  LlamaSession session(model, CacheConfig{}, SessionOptions{8});
  const std::vector<int32_t> prompt = {1, 17, 200, 3, 45, 99, 128, 7, 250, 31, 64};
  std::vector<float> all = session.prefill(prompt);
  for (size_t s = 0; s < n_decode; ++s) {
    const std::vector<float> logits = session.decode(static_cast<int32_t>((s * 37 + 5) % 256));
    all.insert(all.end(), logits.begin(), logits.end());
  }
  return all;
}

class KQuantModel : public ::testing::TestWithParam<const char*> {};

TEST_P(KQuantModel, LogitsEqualThoseOfTheF32Twin) {
  struct F32Precision {  // for this test, restored on every exit
    GemmPrecision gv = gemv_precision(), mm = matmul_precision();
    F32Precision() { set_gemm_precision(GemmPrecision::f32); }
    ~F32Precision() { set_gemm_precision(gv, mm); }
  } f32_precision;
  const LlamaModel quantized = LlamaModel::load(kDir + "tiny-" + GetParam() + ".gguf");
  const LlamaModel twin(f32_twin(quantized.file()));
  EXPECT_LT(quantized.weight_bytes(), twin.weight_bytes());
  const std::vector<float> a = run(quantized, 5), b = run(twin, 5);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(std::memcmp(&a[i], &b[i], sizeof(float)), 0)
        << "logit " << i << ": quantized " << a[i] << " f32 twin " << b[i];
  }
}

INSTANTIATE_TEST_SUITE_P(Ftypes, KQuantModel,
                         ::testing::Values("Q4_K_M", "Q5_K_M", "Q6_K", "Q2_K", "Q3_K_M", "Q4_0",
                                           "BF16"),
                         [](const auto& param_info) { return std::string(param_info.param); });

}  // namespace
}  // namespace snapkv
