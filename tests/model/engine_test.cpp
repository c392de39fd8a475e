// Engine behaviour beyond the golden logits: every policy equals full when nothing is evicted, the
// SnapKV query mode gets real queries, and every bad model file or request is a named error.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

#include "model/golden_util.h"
#include "plain_config.h"
#include "snapkv/kv/core/config.h"
#include "snapkv/model/llama.h"
#include "snapkv/model/random_model.h"
#include "snapkv/model/sampler.h"
#include "snapkv/util/error.h"

namespace snapkv {
namespace {

namespace fs = std::filesystem;
using test::golden;
using test::load_model;

struct RunResult {
  std::vector<float> prompt_logits;  // [T][V]
  std::vector<float> decode_logits;  // [steps][V]
  std::vector<int32_t> tokens;
};

RunResult run(const LlamaModel& model, const CacheConfig& config, size_t chunk, size_t steps) {
  LlamaSession session(model, config, SessionOptions{chunk});
  RunResult r;
  std::vector<float> logits = session.prefill(golden().prompt, &r.prompt_logits);
  for (size_t s = 0; s < steps; ++s) {
    r.tokens.push_back(argmax(logits));
    logits = session.decode(r.tokens.back());
    r.decode_logits.insert(r.decode_logits.end(), logits.begin(), logits.end());
  }
  return r;
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(Engine, EveryPolicyEqualsFullWhenBudgetCoversPrompt) {
  const LlamaModel model = load_model(gguf::TensorType::f32);
  const size_t steps = 4;
  for (size_t chunk : {size_t{7}, size_t{4096}}) {
    CacheConfig full;
    full.policy = PolicyKind::full;
    const RunResult reference = run(model, full, chunk, steps);
    for (PolicyKind policy : {PolicyKind::snapkv, PolicyKind::streaming, PolicyKind::random,
                              PolicyKind::knorm, PolicyKind::chunkkv}) {
      for (ChunkMode mode : {ChunkMode::every_chunk, ChunkMode::end_of_prompt}) {
        CacheConfig config = full;
        config.policy = policy;
        config.chunk_mode = mode;
        config.budget = golden().prompt.size() + steps;  // nothing to evict, ever
        const RunResult r = run(model, config, chunk, steps);
        const std::string what = std::string(to_string(policy)) + "/" +
                                 std::string(to_string(mode)) + " chunk " + std::to_string(chunk);
        EXPECT_TRUE(bitwise_equal(r.prompt_logits, reference.prompt_logits)) << what;
        EXPECT_TRUE(bitwise_equal(r.decode_logits, reference.decode_logits)) << what;
        EXPECT_EQ(r.tokens, reference.tokens) << what;
      }
    }
  }
}

TEST(Engine, SnapKvQueryModeEvictsToBudget) {
  // query_source = queries makes the cache throw if a prefill update lacks q_window: this runs the
  // engine's query path for both chunk modes and a chunk size smaller than the window.
  const LlamaModel model = load_model(gguf::TensorType::f32);
  CacheConfig full;
  full.policy = PolicyKind::full;
  const RunResult reference = run(model, full, 4096, 2);
  for (ChunkMode mode : {ChunkMode::every_chunk, ChunkMode::end_of_prompt}) {
    for (size_t chunk : {size_t{5}, size_t{4096}}) {
      CacheConfig config;
      config.policy = PolicyKind::snapkv;
      config.query_source = QuerySource::queries;
      config.chunk_mode = mode;
      config.budget = 16;
      config.window = 8;
      config.n_sink = 2;
      LlamaSession session(model, config, SessionOptions{chunk});
      std::vector<float> logits = session.prefill(golden().prompt);
      for (const LayerCache& cache : session.caches()) {
        EXPECT_EQ(cache.size(), 16u);
        EXPECT_EQ(cache.offset(), golden().prompt.size());
        EXPECT_GE(cache.compressions(), 1u);
      }
      logits = session.decode(argmax(logits));
      EXPECT_EQ(session.caches()[0].size(), 17u);  // decode appends
      // Eviction did change the computation (the test above is not vacuous).
      EXPECT_FALSE(std::equal(logits.begin(), logits.end(),
                              reference.decode_logits.begin() + model.config().n_vocab));
    }
  }
}

TEST(Engine, RequestErrors) {
  const LlamaModel model = load_model(gguf::TensorType::f32);
  CacheConfig config;
  {
    LlamaSession session(model, config);
    EXPECT_THROW(session.decode(1), std::invalid_argument);  // before prefill
    const std::vector<int32_t> empty;
    EXPECT_THROW(session.prefill(empty), std::invalid_argument);
    const std::vector<int32_t> bad = {1, 300};
    EXPECT_THROW(session.prefill(bad), std::invalid_argument);
  }
  {
    LlamaSession session(model, config);
    const std::vector<int32_t> too_long(model.config().n_ctx + 1, 5);
    try {
      session.prefill(too_long);
      FAIL() << "over-long prompt accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("context"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(LlamaSession(model, config, SessionOptions{0}), std::invalid_argument);
}

// Rebuilds a GGUF from a parsed file, letting `edit` change metadata and tensors on the way.
struct Rebuild {
  std::string drop_key;
  std::string drop_tensor;
  std::string reshape_tensor;  // gets ne {ne0, ne1 - 1} with matching bytes
  std::string extra_tensor;
};
Rebuild edit_field(std::string Rebuild::*field, std::string name) {
  Rebuild r;
  r.*field = std::move(name);
  return r;
}

gguf::File rebuild(const gguf::File& src, const Rebuild& edit,
                   std::vector<std::pair<std::string, gguf::Value>> set = {}) {
  gguf::Writer w;
  for (const auto& kv : src.metadata()) {
    if (kv.key != edit.drop_key && kv.key != gguf::kKeyAlignment) w.set(kv.key, kv.value);
  }
  for (auto& [key, value] : set) w.set(key, value);
  for (const auto& t : src.tensors()) {
    if (t.name == edit.drop_tensor) continue;
    std::vector<int64_t> ne = t.ne;
    uint64_t bytes = t.n_bytes;
    if (t.name == edit.reshape_tensor) {
      ne[1] -= 1;
      bytes = gguf::tensor_n_bytes(t.type, ne);
    }
    w.add_tensor(t.name, t.type, ne, std::span<const uint8_t>(t.data, bytes));
  }
  if (!edit.extra_tensor.empty()) {
    const std::vector<float> v(64, 1.0f);
    w.add_tensor_f32(edit.extra_tensor, gguf::TensorType::f32, {64}, v);
  }
  return gguf::File::from_bytes(w.to_bytes());
}

void expect_model_error(gguf::File file, const std::string& needle) {
  try {
    LlamaModel model(std::move(file));
    FAIL() << "accepted a bad model, expected an error mentioning " << needle;
  } catch (const RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(Engine, BadModelFilesAreNamedErrors) {
  const gguf::File src =
      gguf::File::from_bytes(convert_export(test::golden_dir(), gguf::TensorType::f16).to_bytes());
  expect_model_error(rebuild(src, edit_field(&Rebuild::drop_key, "llama.block_count")),
                     "llama.block_count");
  expect_model_error(
      rebuild(src, edit_field(&Rebuild::drop_key, "llama.attention.layer_norm_rms_epsilon")),
      "layer_norm_rms_epsilon");
  expect_model_error(
      rebuild(src, Rebuild{}, {{"general.architecture", gguf::Value(std::string("gpt2"))}}),
      "general.architecture");
  expect_model_error(
      rebuild(src, Rebuild{}, {{"llama.attention.head_count_kv", gguf::Value(uint32_t{3})}}),
      "head_count_kv");
  expect_model_error(rebuild(src, Rebuild{}, {{"llama.vocab_size", gguf::Value(uint32_t{301})}}),
                     "llama.vocab_size");
  expect_model_error(
      rebuild(src, Rebuild{}, {{"llama.block_count", gguf::Value(std::string("two"))}}),
      "llama.block_count");
  expect_model_error(rebuild(src, edit_field(&Rebuild::drop_tensor, "blk.1.ffn_up.weight")),
                     "blk.1.ffn_up.weight");
  expect_model_error(rebuild(src, edit_field(&Rebuild::reshape_tensor, "blk.0.attn_k.weight")),
                     "blk.0.attn_k.weight");
  expect_model_error(rebuild(src, edit_field(&Rebuild::extra_tensor, "rope_freqs.weight")),
                     "rope_freqs.weight");
  // Three layers declared, two present: the first missing tensor is named.
  expect_model_error(rebuild(src, Rebuild{}, {{"llama.block_count", gguf::Value(uint32_t{3})}}),
                     "blk.2.attn_norm.weight");
  // A well-formed rebuild still loads (the edits above are what fails).
  EXPECT_NO_THROW(LlamaModel(rebuild(src, Rebuild{})));
}

TEST(Engine, ConvertErrorsNameTheProblem) {
  const fs::path dir = test::temp_export_copy("convert_errors");
  auto expect_convert_error = [&](const std::string& needle) {
    try {
      convert_export(dir.string(), gguf::TensorType::f32);
      FAIL() << "convert accepted a bad export, expected " << needle;
    } catch (const RuntimeError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  fs::rename(dir / "tensors" / "blk.0.ffn_gate.weight.npy", dir / "gate.npy");
  expect_convert_error("blk.0.ffn_gate.weight");
  // The wrong tensor under the right name: shapes are compared.
  fs::copy_file(dir / "tensors" / "blk.0.ffn_down.weight.npy",
                dir / "tensors" / "blk.0.ffn_gate.weight.npy");
  expect_convert_error("wrong numpy shape");
  fs::copy_file(dir / "gate.npy", dir / "tensors" / "blk.0.ffn_gate.weight.npy",
                fs::copy_options::overwrite_existing);
  fs::copy_file(dir / "tensors" / "output_norm.weight.npy", dir / "tensors" / "extra.npy");
  expect_convert_error("extra.npy");
  fs::remove(dir / "tensors" / "extra.npy");
  EXPECT_NO_THROW(convert_export(dir.string(), gguf::TensorType::q8_0));
  {
    std::ofstream cfg(dir / "config.json");
    cfg << R"({"architecture": "llama", "context_length": 256})";
  }
  expect_convert_error("embedding_length");
  EXPECT_THROW(convert_export(dir.string(), gguf::TensorType::q4_0), std::invalid_argument);
  fs::remove_all(dir);
}

TEST(Engine, ConvertWritesLinearRopeScaling) {
  // Without rope_scaling_factor no scaling key is written; with it, the keys llama.cpp reads.
  const auto plain_bytes = convert_export(test::golden_dir(), gguf::TensorType::f32).to_bytes();
  const gguf::File plain = gguf::File::from_bytes(plain_bytes);
  EXPECT_FALSE(plain.has_key("llama.rope.scaling.type"));
  EXPECT_FALSE(plain.has_key("llama.rope.scaling.factor"));
  EXPECT_EQ(LlamaModel(gguf::File::from_bytes(plain_bytes)).config().rope_freq_scale, 1.0);

  const fs::path dir = test::temp_export_copy("convert_rope_scaling");
  std::string text;
  {
    std::ifstream in(dir / "config.json");
    text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  const size_t brace = text.find('{');
  ASSERT_NE(brace, std::string::npos);
  auto write_config = [&](const std::string& factor) {
    std::ofstream out(dir / "config.json", std::ios::trunc);
    out << text.substr(0, brace + 1) << "\"rope_scaling_factor\": " << factor << ", "
        << text.substr(brace + 1);
  };
  write_config("2.0");
  const auto scaled_bytes = convert_export(dir.string(), gguf::TensorType::f32).to_bytes();
  const gguf::File scaled = gguf::File::from_bytes(scaled_bytes);
  EXPECT_EQ(scaled.get_string("llama.rope.scaling.type"), "linear");
  EXPECT_EQ(scaled.get_f32("llama.rope.scaling.factor"), 2.0f);
  EXPECT_EQ(LlamaModel(gguf::File::from_bytes(scaled_bytes)).config().rope_freq_scale, 0.5);
  write_config("-1");
  try {
    convert_export(dir.string(), gguf::TensorType::f32);
    FAIL() << "convert accepted rope_scaling_factor -1";
  } catch (const RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find("rope_scaling_factor"), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace snapkv

namespace snapkv {
namespace {

TEST(RandomModel, BuildsLoadsAndRuns) {
  for (gguf::TensorType type :
       {gguf::TensorType::f32, gguf::TensorType::f16, gguf::TensorType::q8_0}) {
    RandomModelSpec spec;
    spec.n_layers = 2;
    spec.n_embd = 64;
    spec.n_heads = 4;
    spec.n_kv_heads = 2;
    spec.n_ff = 96;
    spec.n_vocab = 50;
    spec.n_ctx = 64;
    spec.type = type;
    const LlamaModel model(make_random_model(spec));
    EXPECT_EQ(model.weight_bytes(), spec.weight_bytes());
    EXPECT_EQ(model.config().n_ctx, 64u);
    CacheConfig config = test::plain_config();
    config.budget = 8;
    LlamaSession session(model, config, SessionOptions{16});
    std::vector<int32_t> prompt(40);
    for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>(i % 50);
    const auto logits = session.decode(argmax(session.prefill(prompt)));
    for (float v : logits) ASSERT_TRUE(std::isfinite(v));
    EXPECT_EQ(session.caches()[1].size(), 9u);
  }
  RandomModelSpec bad;
  bad.n_heads = 3;
  EXPECT_THROW(bad.validate(), std::invalid_argument);
  bad = RandomModelSpec{};
  bad.type = gguf::TensorType::q8_0;
  bad.n_ff = 100;
  EXPECT_THROW(bad.validate(), std::invalid_argument);
}

}  // namespace
}  // namespace snapkv
