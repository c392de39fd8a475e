// The engine with 8-bit quantized activations (ops/gemm.h GemmPrecision::q8 for decode and
// prefill) against its own f32 path (weights decoded to fp32) on the same quantized weights.
//
// Models: the architecture fixtures (tests/model/data/arch/: llama3, qwen2, qwen3, logits of
// realistic size, top-1/top-2 margins chosen by tools/make_arch_fixtures.py) with every 2-D weight
// re-encoded in-process to Q8_0 or Q4_0, or to Q4_K / Q5_K / Q6_K where the row length is a
// multiple of 256 (Q8_0 elsewhere, as llama.cpp's mixes fall back).
//
// Bound: quantizing the activations entering one product moves each output by at most
// sum_i |w_i| * d_i / 2 <= (1/254) * sum_i |w_i| * amax_block(i) (q8_dot.h): a relative
// perturbation of at most rho = 1/254 of the block maximum of that product's input. The longest
// chain from the embedding to the logits has n_products = 4 * n_layers + 1 such products (q/k/v,
// attention output, gate/up, down; the output head), so to first order the logits move by at most
// n_products * rho * max|logit| * G, with G the amplification of a relative input error by the
// rest of the network (softmax, SiLU, RMSNorm; not bounded a priori for random weights).
// Measured on these six cases: max|dlogit| / (n_products * rho * max|logit|) = 0.63 .. 2.08;
// the test asserts G = 4 (twice the largest measured ratio) and records the ratios.
// Greedy tokens: the fixtures' top-1/top-2 margins (0.06 .. 0.95, chosen for fp16 K/V rounding,
// a 20x smaller perturbation) are below that bound at several steps, so a token may flip there;
// the test requires identical tokens wherever the f32 margin exceeds twice the measured deviation
// of that step (where a flip would contradict the deviation), and records how many flipped.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "snapkv/gguf/gguf.h"
#include "snapkv/kv/core/config.h"
#include "snapkv/model/llama.h"
#include "snapkv/model/sampler.h"
#include "snapkv/ops/gemm.h"

namespace snapkv {
namespace {

const std::string kArch = std::string(SNAPKV_SOURCE_DIR) + "/tests/model/data/arch/";

// The file with every 2-D weight whose rows fit `type`'s blocks stored as `type` (Q8_0 for rows
// that fit only 32-element blocks); 1-D tensors (norms, biases, rope_freqs) stay as they are.
gguf::File requantized(const gguf::File& f, gguf::TensorType type) {
  gguf::Writer w;
  for (const gguf::KeyValue& kv : f.metadata()) w.set(kv.key, kv.value);
  const bool k_quant = type != gguf::TensorType::q8_0 && type != gguf::TensorType::q4_0;
  for (const gguf::TensorInfo& t : f.tensors()) {
    const auto n_cols = static_cast<size_t>(t.ne[0]);
    std::vector<float> values(static_cast<size_t>(t.n_elements()));
    for (int64_t r = 0; r < t.n_rows(); ++r) {
      gguf::dequantize_row(values.data() + static_cast<size_t>(r) * n_cols, t.row(r), t.type,
                           n_cols);
    }
    gguf::TensorType stored = gguf::TensorType::f32;
    if (t.n_dims() == 2 && n_cols % 32 == 0) {
      stored = (!k_quant || n_cols % 256 == 0) ? type : gguf::TensorType::q8_0;
    }
    w.add_tensor_f32(t.name, stored, t.ne, values);
  }
  return gguf::File::from_bytes(w.to_bytes());
}

struct Trace {
  std::vector<float> logits;    // [1 + steps][n_vocab]: after the prompt, then after each step
  std::vector<int32_t> greedy;  // argmax after the prompt and after each step
};

// Prefill then decode, feeding `feed` (teacher forcing: both precisions see the same tokens).
Trace run_model(const LlamaModel& model, GemmPrecision precision,
                const std::vector<int32_t>& prompt, const std::vector<int32_t>& feed) {
  const GemmPrecision gv = gemv_precision(), mm = matmul_precision();
  set_gemm_precision(precision);
  const size_t n_vocab = model.config().n_vocab;
  LlamaSession session(model, CacheConfig{}, SessionOptions{16});
  Trace out;
  out.logits = session.prefill(prompt);
  for (size_t s = 0;; ++s) {
    out.greedy.push_back(argmax(std::span<const float>(out.logits).last(n_vocab)));
    if (s == feed.size()) break;
    const std::vector<float> step = session.decode(feed[s]);
    out.logits.insert(out.logits.end(), step.begin(), step.end());
  }
  set_gemm_precision(gv, mm);
  return out;
}

struct Case {
  const char* arch;
  gguf::TensorType type;
};

class Q8ActivationModel : public ::testing::TestWithParam<Case> {};

TEST_P(Q8ActivationModel, LogitsWithinChainBound) {
  const Case c = GetParam();
  std::ifstream in(kArch + c.arch + "/reference.json");
  const nlohmann::json ref = nlohmann::json::parse(in);
  const auto prompt = ref.at("prompt").get<std::vector<int32_t>>();
  const auto greedy = ref.at("greedy").get<std::vector<int32_t>>();
  const LlamaModel model(
      requantized(LlamaModel::load(kArch + c.arch + "/model.gguf").file(), c.type));
  const std::vector<int32_t> feed(greedy.begin(), greedy.end() - 1);
  const Trace f32 = run_model(model, GemmPrecision::f32, prompt, feed);
  const Trace q8 = run_model(model, GemmPrecision::q8, prompt, feed);
  ASSERT_EQ(f32.logits.size(), q8.logits.size());
  const size_t n_vocab = model.config().n_vocab;
  double max_diff = 0.0, max_abs = 0.0;
  for (size_t i = 0; i < f32.logits.size(); ++i) {
    max_diff = std::max(max_diff, std::fabs(static_cast<double>(f32.logits[i]) - q8.logits[i]));
    max_abs = std::max(max_abs, std::fabs(static_cast<double>(f32.logits[i])));
  }
  const double n_products = 4.0 * static_cast<double>(model.config().n_layers) + 1.0;
  const double chain = n_products * max_abs / 254.0;
  EXPECT_LE(max_diff, 4.0 * chain);
  // Greedy tokens, step by step (row s: after the prompt for s = 0, then after decode step s).
  size_t flips = 0;
  for (size_t s = 0; s < f32.greedy.size(); ++s) {
    const float* a = f32.logits.data() + s * n_vocab;
    const float* b = q8.logits.data() + s * n_vocab;
    std::vector<float> sorted(a, a + n_vocab);
    std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<>());
    double step_diff = 0.0;
    for (size_t v = 0; v < n_vocab; ++v) {
      step_diff = std::max(step_diff, std::fabs(static_cast<double>(a[v]) - b[v]));
    }
    if (f32.greedy[s] != q8.greedy[s]) ++flips;
    if (static_cast<double>(sorted[0] - sorted[1]) > 2.0 * step_diff) {
      EXPECT_EQ(f32.greedy[s], q8.greedy[s]) << "step " << s;
    }
  }
  RecordProperty("max_abs_dlogit", std::to_string(max_diff));
  RecordProperty("max_abs_logit", std::to_string(max_abs));
  RecordProperty("dlogit_over_chain", std::to_string(max_diff / chain));
  RecordProperty("greedy_flips", std::to_string(flips));
  std::printf("%s %s: max|dlogit| %.4g, max|logit| %.4g, ratio to chain %.3g, flips %zu of %zu\n",
              c.arch, gguf::tensor_type_name(c.type).data(), max_diff, max_abs, max_diff / chain,
              flips, f32.greedy.size());
}

INSTANTIATE_TEST_SUITE_P(Archs, Q8ActivationModel,
                         ::testing::Values(Case{"llama3", gguf::TensorType::q8_0},
                                           Case{"llama3", gguf::TensorType::q4_0},
                                           Case{"llama3", gguf::TensorType::q4_K},
                                           Case{"qwen2", gguf::TensorType::q5_K},
                                           Case{"qwen3", gguf::TensorType::q6_K},
                                           Case{"qwen2", gguf::TensorType::q8_0}),
                         [](const auto& param_info) {
                           return std::string(param_info.param.arch) + "_" +
                                  std::string(gguf::tensor_type_name(param_info.param.type));
                         });

}  // namespace
}  // namespace snapkv
