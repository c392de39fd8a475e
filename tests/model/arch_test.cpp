// The engine on every architecture (llama with Llama 3.1 rope_freqs and tied output, llama with
// linear RoPE scaling, qwen2, qwen3) against the float64 numpy references of
// tools/make_arch_fixtures.py (tests/model/data/arch/<name>/), loaded memory-mapped from the
// committed GGUF files; plus the named errors of unsupported architectures and RoPE scalings.
//
// Tolerances (derived from each fixture's reference.json):
//  - prompt logits in one chunk (no fp16 cache read back): tol32 = 2 * n_dot * eps32 * max|logit|,
//    the a-priori bound n*eps*sum|a_i b_i| of the longest dot product (n_dot terms) at the
//    logits' scale, doubled for the chain of layers (as golden_test.cpp);
//  - anything that reads rows back from the fp16 cache (chunked prefill, decode): the measured
//    deviation of the reference with K/V rounded to fp16 (max_diff_kv16); a partial rounding stays
//    within twice that, plus tol32;
//  - greedy tokens identical: the script chose a prompt whose every top-1/top-2 margin exceeds
//    3 * max_diff_kv16 + 10 * tol32 (checked again here), so a correct engine cannot flip a token.
// The mutation tests show the bounds are tight enough to catch a missing feature: dropping
// rope_freqs.weight or the linear scaling factor moves the logits far past tol32.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "snapkv/kv/core/config.h"
#include "snapkv/model/llama.h"
#include "snapkv/model/sampler.h"
#include "snapkv/util/error.h"
#include "snapkv/util/npy.h"

namespace snapkv {
namespace {

constexpr double kEps32 = std::numeric_limits<float>::epsilon();

std::string arch_dir(const std::string& name) {
  return std::string(SNAPKV_SOURCE_DIR) + "/tests/model/data/arch/" + name;
}

struct Fixture {
  std::string name, arch;
  std::vector<int32_t> prompt, greedy;
  std::vector<double> margins_kv16;
  std::vector<float> logits;  // [T + N][V]
  double max_abs_logit = 0, max_diff_kv16 = 0;
  size_t n_dot = 0, n_vocab = 0, head_dim = 0, n_kv_heads = 0;
  bool tied = false, rope_freqs = false;
  double linear_scaling = 1.0;

  double tol32() const { return 2.0 * static_cast<double>(n_dot) * kEps32 * max_abs_logit; }
  double tol_kv16() const { return 2.0 * max_diff_kv16 + tol32(); }
  std::string path() const { return arch_dir(name) + "/model.gguf"; }
};

const Fixture& fixture(const std::string& name) {
  static std::vector<std::pair<std::string, Fixture>> cache;
  for (const auto& [n, f] : cache) {
    if (n == name) return f;
  }
  Fixture f;
  std::ifstream in(arch_dir(name) + "/reference.json");
  const nlohmann::json j = nlohmann::json::parse(in);
  f.name = name;
  f.arch = j.at("arch").get<std::string>();
  f.prompt = j.at("prompt").get<std::vector<int32_t>>();
  f.greedy = j.at("greedy").get<std::vector<int32_t>>();
  f.margins_kv16 = j.at("greedy_margins_kv16").get<std::vector<double>>();
  f.max_abs_logit = j.at("max_abs_logit").get<double>();
  f.max_diff_kv16 = j.at("max_diff_kv16").get<double>();
  f.n_dot = j.at("n_dot_max").get<size_t>();
  f.n_vocab = j.at("n_vocab").get<size_t>();
  f.head_dim = j.at("head_dim").get<size_t>();
  f.n_kv_heads = j.at("n_kv_heads").get<size_t>();
  f.tied = j.at("tied_output").get<bool>();
  f.rope_freqs = j.at("rope_freqs").get<bool>();
  f.linear_scaling = j.at("linear_scaling").get<double>();
  f.logits = read_npy(arch_dir(name) + "/logits.npy", 2).data;
  cache.emplace_back(name, std::move(f));
  return cache.back().second;
}

const std::vector<std::string>& all_fixtures() {
  static const std::vector<std::string> names = {"llama3", "llama2_linear", "qwen2", "qwen3"};
  return names;
}

double max_abs_diff(const float* a, const float* b, size_t n) {
  double m = 0.0;
  for (size_t i = 0; i < n; ++i) {
    m = std::max(m, std::fabs(static_cast<double>(a[i]) - static_cast<double>(b[i])));
  }
  return m;
}

CacheConfig full_config() {
  CacheConfig c;
  c.policy = PolicyKind::full;
  c.window = 1;  // no extension of the last prefill chunk
  return c;
}

std::vector<float> prompt_logits(const LlamaModel& model, const Fixture& f, size_t chunk) {
  LlamaSession session(model, full_config(), SessionOptions{chunk});
  std::vector<float> all;
  session.prefill(f.prompt, &all);
  return all;
}

TEST(Arch, ConfigReadFromTheFile) {
  for (const std::string& name : all_fixtures()) {
    const Fixture& f = fixture(name);
    const LlamaModel model = LlamaModel::load(f.path());
    const LlamaConfig& c = model.config();
    EXPECT_EQ(std::string(c.arch_name()), f.arch) << name;
    EXPECT_EQ(c.head_dim, f.head_dim) << name;
    EXPECT_EQ(c.n_kv_heads, f.n_kv_heads) << name;
    EXPECT_EQ(c.n_vocab, f.n_vocab) << name;
    EXPECT_EQ(model.weights().tied_output, f.tied) << name;
    EXPECT_EQ(model.weights().rope_freqs != nullptr, f.rope_freqs) << name;
    EXPECT_DOUBLE_EQ(c.rope_freq_scale, 1.0 / f.linear_scaling) << name;
    EXPECT_EQ(model.rope_params().kind, f.arch == "llama" ? RopeKind::norm : RopeKind::neox);
    const LlamaLayerWeights& l0 = model.weights().layers[0];
    EXPECT_EQ(l0.bq != nullptr && l0.bk != nullptr && l0.bv != nullptr, f.arch == "qwen2") << name;
    EXPECT_EQ(l0.q_norm != nullptr && l0.k_norm != nullptr, f.arch == "qwen3") << name;
  }
  // qwen3's head_dim comes from attention.key_length, not n_embd / n_heads.
  const LlamaConfig q3 = LlamaModel::load(fixture("qwen3").path()).config();
  EXPECT_NE(q3.head_dim, q3.n_embd / q3.n_heads);
}

TEST(Arch, PromptLogitsMatchFloat64Reference) {
  for (const std::string& name : all_fixtures()) {
    const Fixture& f = fixture(name);
    const LlamaModel model = LlamaModel::load(f.path());
    const auto all = prompt_logits(model, f, 4096);
    ASSERT_EQ(all.size(), f.prompt.size() * f.n_vocab) << name;
    const double err = max_abs_diff(all.data(), f.logits.data(), all.size());
    EXPECT_LE(err, f.tol32()) << name << ": max |engine - float64 reference|";
    RecordProperty("max_abs_err_" + name, std::to_string(err));
    // Chunked prefill reads earlier chunks back from the fp16 cache.
    const auto chunked = prompt_logits(model, f, 5);
    const double err_chunked = max_abs_diff(chunked.data(), f.logits.data(), all.size());
    EXPECT_LE(err_chunked, f.tol_kv16()) << name << ": chunked prefill";
  }
}

TEST(Arch, GreedyTokensAndDecodeLogitsMatchReference) {
  for (const std::string& name : all_fixtures()) {
    const Fixture& f = fixture(name);
    // The fixture's own promise, re-checked: no token can flip within the bounds below.
    ASSERT_GT(*std::min_element(f.margins_kv16.begin(), f.margins_kv16.end()),
              3.0 * f.max_diff_kv16 + 10.0 * f.tol32())
        << name;
    const LlamaModel model = LlamaModel::load(f.path());
    LlamaSession session(model, full_config());
    std::vector<float> logits = session.prefill(f.prompt);
    std::vector<int32_t> generated;
    double worst = 0.0;
    for (size_t s = 0; s < f.greedy.size(); ++s) {
      generated.push_back(argmax(logits));
      logits = session.decode(generated.back());
      const float* ref = f.logits.data() + (f.prompt.size() + s) * f.n_vocab;
      worst = std::max(worst, max_abs_diff(logits.data(), ref, f.n_vocab));
    }
    EXPECT_EQ(generated, f.greedy) << name;
    EXPECT_LE(worst, f.tol_kv16()) << name << ": decode logits";
    RecordProperty("max_abs_err_decode_" + name, std::to_string(worst));
  }
}

// ---- llama.cpp's own logits (tools/llama_cpp_logits.py) ---------------------------------------

// llama.cpp (Feb 2025, CPU, F32 K/V cache) ran the llama and qwen2 fixtures; its logits and greedy
// tokens are committed next to them. Both llama.cpp and our engine are held to the float64
// reference within tol32 (prompt rows, no fp16 read-back on either side) so, by the triangle
// inequality, |engine - llama.cpp| <= 2 * tol32 on prompt rows; decode rows read our fp16 cache:
// tol_kv16 + tol32. Greedy tokens must be llama.cpp's.
TEST(Arch, LogitsMatchLlamaCpp) {
  for (const char* name : {"llama3", "llama2_linear", "qwen2"}) {
    const Fixture& f = fixture(name);
    const auto lc = read_npy(arch_dir(name) + "/logits_llamacpp.npy", 2);
    ASSERT_EQ(lc.data.size(), f.logits.size()) << name;
    std::ifstream in(arch_dir(name) + "/llamacpp.json");
    const auto lc_greedy = nlohmann::json::parse(in).at("greedy").get<std::vector<int32_t>>();
    const size_t T = f.prompt.size(), V = f.n_vocab;
    const double lc_dev = max_abs_diff(lc.data.data(), f.logits.data(), f.logits.size());
    EXPECT_LE(lc_dev, f.tol32()) << name << ": llama.cpp vs float64 reference";

    const LlamaModel model = LlamaModel::load(f.path());
    LlamaSession session(model, full_config());
    std::vector<float> all;
    std::vector<float> logits = session.prefill(f.prompt, &all);
    const double err_prompt = max_abs_diff(all.data(), lc.data.data(), T * V);
    EXPECT_LE(err_prompt, 2.0 * f.tol32()) << name << ": prompt logits vs llama.cpp";
    std::vector<int32_t> generated;
    double err_decode = 0.0;
    for (size_t s = 0; s < lc_greedy.size(); ++s) {
      generated.push_back(argmax(logits));
      logits = session.decode(generated.back());
      err_decode =
          std::max(err_decode, max_abs_diff(logits.data(), lc.data.data() + (T + s) * V, V));
    }
    EXPECT_EQ(generated, lc_greedy) << name;
    EXPECT_LE(err_decode, f.tol_kv16() + f.tol32()) << name << ": decode logits vs llama.cpp";
    RecordProperty(std::string("max_abs_diff_llamacpp_prompt_") + name, std::to_string(err_prompt));
    RecordProperty(std::string("max_abs_diff_llamacpp_decode_") + name, std::to_string(err_decode));
    std::printf(
        "[ llama.cpp ] %-14s prompt max|engine - llama.cpp| %.3e (bound %.3e), decode %.3e "
        "(bound %.3e), llama.cpp vs float64 %.3e\n",
        name, err_prompt, 2.0 * f.tol32(), err_decode, f.tol_kv16() + f.tol32(), lc_dev);
  }
}

// ---- GGUF edits: the mutation controls and the named errors ------------------------------------

struct Edit {
  std::vector<std::string> drop_keys, drop_tensors;
  std::vector<std::pair<std::string, gguf::Value>> set;
  std::vector<std::pair<std::string, size_t>> extra_f32;  // name, length (all ones)
};

gguf::File rebuild(const std::string& path, const Edit& edit) {
  const gguf::File src = gguf::File::open(path);
  gguf::Writer w;
  auto dropped = [](const std::vector<std::string>& list, const std::string& name) {
    return std::find(list.begin(), list.end(), name) != list.end();
  };
  for (const auto& kv : src.metadata()) {
    if (!dropped(edit.drop_keys, kv.key) && kv.key != gguf::kKeyAlignment) w.set(kv.key, kv.value);
  }
  for (const auto& [key, value] : edit.set) w.set(key, value);
  for (const auto& t : src.tensors()) {
    if (dropped(edit.drop_tensors, t.name)) continue;
    w.add_tensor(t.name, t.type, t.ne, std::span<const uint8_t>(t.data, t.n_bytes));
  }
  for (const auto& [name, n] : edit.extra_f32) {
    const std::vector<float> ones(n, 1.0f);
    w.add_tensor_f32(name, gguf::TensorType::f32, {static_cast<int64_t>(n)}, ones);
  }
  return gguf::File::from_bytes(w.to_bytes());
}

// The weights read into huge pages (SNAPKV_WEIGHTS=huge) and the memory map (the default) give
// the same bits: same prompt and decode logits on every fixture; the copy sits on a 2 MiB
// boundary.
TEST(Arch, HugePageCopyAndMapGiveIdenticalLogits) {
  if (std::getenv("SNAPKV_WEIGHTS") == nullptr) {
    EXPECT_EQ(LlamaModel::weight_storage(), gguf::File::Storage::mapped);
  }
  for (const std::string& name : all_fixtures()) {
    const Fixture& f = fixture(name);
    const LlamaModel mapped = LlamaModel::load(f.path(), gguf::File::Storage::mapped);
    const LlamaModel copied = LlamaModel::load(f.path(), gguf::File::Storage::huge_page_copy);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(copied.file().bytes()) % (size_t{2} << 20), 0u) << name;
    EXPECT_NE(copied.file().bytes(), mapped.file().bytes()) << name;
    std::vector<float> logits[2];
    std::vector<float> prompt_rows[2];
    const LlamaModel* models[2] = {&mapped, &copied};
    for (int m = 0; m < 2; ++m) {
      LlamaSession session(*models[m], full_config());
      std::vector<float> last = session.prefill(f.prompt, &prompt_rows[m]);
      for (int s = 0; s < 3; ++s) {
        last = session.decode(argmax(last));
        logits[m].insert(logits[m].end(), last.begin(), last.end());
      }
    }
    EXPECT_EQ(prompt_rows[0], prompt_rows[1]) << name;
    EXPECT_EQ(logits[0], logits[1]) << name;
  }
}

TEST(Arch, RebuildWithoutEditsIsIdentical) {
  // The harness of the mutation tests: an unedited rebuild gives the reference logits.
  const Fixture& f = fixture("llama3");
  const LlamaModel model(rebuild(f.path(), Edit{}));
  const auto all = prompt_logits(model, f, 4096);
  EXPECT_LE(max_abs_diff(all.data(), f.logits.data(), all.size()), f.tol32());
}

TEST(Arch, DroppingRopeFreqsOrScalingIsCaught) {
  // Without the frequency factors (or the linear scaling) the logits leave the bound by far: the
  // reference comparison above really checks that both are applied.
  {
    const Fixture& f = fixture("llama3");
    const LlamaModel model(rebuild(f.path(), Edit{{}, {"rope_freqs.weight"}, {}, {}}));
    EXPECT_EQ(model.weights().rope_freqs, nullptr);
    const auto all = prompt_logits(model, f, 4096);
    EXPECT_GT(max_abs_diff(all.data(), f.logits.data(), all.size()), 100.0 * f.tol32());
  }
  {
    const Fixture& f = fixture("llama2_linear");
    const LlamaModel model(rebuild(f.path(), Edit{{"llama.rope.scaling.factor"}, {}, {}, {}}));
    EXPECT_DOUBLE_EQ(model.config().rope_freq_scale, 1.0);
    const auto all = prompt_logits(model, f, 4096);
    EXPECT_GT(max_abs_diff(all.data(), f.logits.data(), all.size()), 100.0 * f.tol32());
  }
}

void expect_error(gguf::File file, const std::vector<std::string>& needles) {
  try {
    LlamaModel model(std::move(file));
    FAIL() << "accepted a bad model, expected an error mentioning " << needles.front();
  } catch (const RuntimeError& e) {
    for (const std::string& needle : needles) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  }
}

TEST(Arch, UnsupportedArchitectureListsTheSupportedOnes) {
  const std::string path = fixture("qwen2").path();
  for (const char* arch : {"gemma2", "phi3", "qwen2moe"}) {
    expect_error(
        rebuild(path, Edit{{}, {}, {{"general.architecture", gguf::Value(std::string(arch))}}, {}}),
        {"general.architecture", std::string("'") + arch + "'", "llama, qwen2, qwen3"});
  }
  expect_error(rebuild(path, Edit{{"general.architecture"}, {}, {}, {}}),
               {"general.architecture", "absent", "llama, qwen2, qwen3"});
}

TEST(Arch, UnsupportedRopeScalingIsANamedError) {
  const std::string path = fixture("llama2_linear").path();
  for (const char* type : {"yarn", "longrope", "dynamic"}) {
    expect_error(
        rebuild(path,
                Edit{{}, {}, {{"llama.rope.scaling.type", gguf::Value(std::string(type))}}, {}}),
        {"llama.rope.scaling.type", std::string("'") + type + "'", "'linear'"});
  }
  expect_error(
      rebuild(path, Edit{{}, {}, {{"llama.rope.scaling.attn_factor", gguf::Value(1.5f)}}, {}}),
      {"llama.rope.scaling.attn_factor"});
  expect_error(rebuild(path, Edit{{}, {}, {{"llama.rope.scaling.factor", gguf::Value(-2.0f)}}, {}}),
               {"llama.rope.scaling.factor"});
  // "none" switches the factor off; the older rope.scale_linear key is read when the new is absent.
  {
    const LlamaModel none(rebuild(
        path, Edit{{}, {}, {{"llama.rope.scaling.type", gguf::Value(std::string("none"))}}, {}}));
    EXPECT_DOUBLE_EQ(none.config().rope_freq_scale, 1.0);
    const LlamaModel old_key(
        rebuild(path, Edit{{"llama.rope.scaling.type", "llama.rope.scaling.factor"},
                           {},
                           {{"llama.rope.scale_linear", gguf::Value(2.0f)}},
                           {}}));
    EXPECT_DOUBLE_EQ(old_key.config().rope_freq_scale, 0.5);
  }
}

TEST(Arch, ArchitectureSpecificTensorsAreChecked) {
  // qwen2 needs its biases, qwen3 its q/k norms; llama refuses qwen3's norms; a llama file may
  // carry rope_freqs only with n_rot/2 entries; qwen models never read rope_freqs.
  expect_error(rebuild(fixture("qwen2").path(), Edit{{}, {"blk.1.attn_k.bias"}, {}, {}}),
               {"blk.1.attn_k.bias", "missing"});
  expect_error(rebuild(fixture("qwen3").path(), Edit{{}, {"blk.0.attn_q_norm.weight"}, {}, {}}),
               {"blk.0.attn_q_norm.weight", "missing"});
  expect_error(
      rebuild(fixture("llama3").path(), Edit{{}, {}, {}, {{"blk.0.attn_q_norm.weight", 32}}}),
      {"blk.0.attn_q_norm.weight", "not used by architecture llama"});
  expect_error(rebuild(fixture("llama3").path(),
                       Edit{{}, {"rope_freqs.weight"}, {}, {{"rope_freqs.weight", 8}}}),
               {"rope_freqs.weight"});
  {
    // A zero frequency factor would divide an angle by zero: refused at load, by name.
    const gguf::File src = gguf::File::open(fixture("llama3").path());
    const gguf::TensorInfo& t = src.get_tensor("rope_freqs.weight");
    std::vector<float> factors(static_cast<size_t>(t.n_elements()));
    std::memcpy(factors.data(), t.data, t.n_bytes);
    factors[3] = 0.0f;
    gguf::Writer w;
    for (const auto& kv : src.metadata()) {
      if (kv.key != gguf::kKeyAlignment) w.set(kv.key, kv.value);
    }
    for (const auto& ti : src.tensors()) {
      if (ti.name == "rope_freqs.weight") {
        w.add_tensor_f32(ti.name, gguf::TensorType::f32, ti.ne, factors);
      } else {
        w.add_tensor(ti.name, ti.type, ti.ne, std::span<const uint8_t>(ti.data, ti.n_bytes));
      }
    }
    expect_error(gguf::File::from_bytes(w.to_bytes()), {"rope_freqs.weight", "entry 3"});
  }
  expect_error(rebuild(fixture("qwen2").path(), Edit{{}, {}, {}, {{"rope_freqs.weight", 16}}}),
               {"rope_freqs.weight", "not used by architecture qwen2"});
  // key_length and value_length must agree; mixture-of-experts files are refused by name.
  expect_error(
      rebuild(fixture("qwen3").path(),
              Edit{{}, {}, {{"qwen3.attention.value_length", gguf::Value(uint32_t{32})}}, {}}),
      {"qwen3.attention.value_length"});
  expect_error(rebuild(fixture("llama3").path(),
                       Edit{{}, {}, {{"llama.expert_count", gguf::Value(uint32_t{8})}}, {}}),
               {"llama.expert_count", "mixture of experts"});
  // A missing key names the architecture's own prefix.
  expect_error(rebuild(fixture("qwen3").path(), Edit{{"qwen3.block_count"}, {}, {}, {}}),
               {"[qwen3]", "qwen3.block_count"});
}

// ---- The cache library on Llama 3 and Qwen 3 ---------------------------------------------------

TEST(Arch, SnapKvWithKiviRunsOnLlama3AndQwen3) {
  for (const char* name : {"llama3", "qwen3"}) {
    const Fixture& f = fixture(name);
    const LlamaModel model = LlamaModel::load(f.path());
    CacheConfig config;
    config.policy = PolicyKind::snapkv;
    config.codec = CodecKind::kivi2;
    config.kivi_group = 8;
    config.kivi_residual = 8;  // the 48-token prompt really gets quantized
    config.budget = 24;
    config.window = 8;
    config.n_sink = 4;
    config.pool = PoolKind::max;
    config.kernel = 3;
    config.query_source = QuerySource::queries;
    config.validate();

    CacheConfig full = config;
    full.policy = PolicyKind::full;
    LlamaSession reference(model, full);
    LlamaSession session(model, config);
    const std::vector<float> ref_logits = reference.prefill(f.prompt);
    std::vector<float> logits = session.prefill(f.prompt);
    // The prompt's logits are computed before anything is evicted (one chunk: fresh K/V).
    EXPECT_EQ(logits, ref_logits) << name;
    for (const LayerCache& cache : session.caches()) {
      ASSERT_EQ(cache.size(), config.budget) << name;
      EXPECT_EQ(cache.offset(), f.prompt.size()) << name;
      for (size_t h = 0; h < f.n_kv_heads; ++h) {
        const auto pos = cache.positions(h);
        ASSERT_EQ(pos.size(), config.budget);
        EXPECT_TRUE(std::is_sorted(pos.begin(), pos.end())) << name;
        for (size_t s = 0; s < config.n_sink; ++s) EXPECT_EQ(pos[s], static_cast<int64_t>(s));
      }
    }
    // Decode appends at the true positions and keeps every new row.
    for (size_t s = 0; s < 4; ++s) {
      logits = session.decode(argmax(logits));
      for (float v : logits) ASSERT_TRUE(std::isfinite(v)) << name;
    }
    // KIVI packs the residual when the next rows arrive: after the first decode step the 24 kept
    // prompt rows are 2-bit codes (1/8 of fp16) plus fp16 (scale, zero) per group of 8 (1/4 of
    // fp16), 0.375 of their fp16 size, and the 4 decoded rows are fp16: (24 * 0.375 + 4) / 28 =
    // 0.46 of an fp16 cache of the kept rows.
    const CacheStats stats = session.cache_stats();
    const size_t kept_fp16 = f.n_kv_heads * f.head_dim * 2 * sizeof(uint16_t) *
                             (config.budget + 4) * session.caches().size();
    EXPECT_LT(static_cast<double>(stats.bytes_stored), 0.5 * static_cast<double>(kept_fp16))
        << name;
    EXPECT_EQ(session.n_past(), f.prompt.size() + 4);
    EXPECT_EQ(session.caches().front().size(), config.budget + 4);
  }
}

// Every cache method unchanged on every architecture: each policy (fp16 rows) and each codec
// (SnapKV selection) prefills the fixture's prompt, compresses it to the budget and decodes a few
// steps; the cache holds what the method promises (budget rows per KV head, sinks first, sorted
// positions, the decoded rows appended) and the logits stay finite. Accuracy per method is the
// eval layer's business; this checks that no method depends on one architecture's shapes
// (qwen3's head_dim 64 != n_embd / n_heads, GQA groups, NEOX RoPE).
TEST(Arch, EveryPolicyAndCodecRunsOnEveryArchitecture) {
  const std::vector<PolicyKind> policies = {
      PolicyKind::full,  PolicyKind::snapkv,  PolicyKind::streaming, PolicyKind::random,
      PolicyKind::knorm, PolicyKind::chunkkv, PolicyKind::keydiff,   PolicyKind::expected_attention,
      PolicyKind::kvzip};
  const std::vector<CodecKind> codecs = {CodecKind::fp16,     CodecKind::kivi2,  CodecKind::kivi4,
                                         CodecKind::kivi2r,   CodecKind::kivi4r, CodecKind::kitty,
                                         CodecKind::zipcache, CodecKind::gear};
  std::vector<CacheConfig> configs;
  for (PolicyKind p : policies) {
    CacheConfig c;
    c.policy = p;
    configs.push_back(c);
  }
  for (CodecKind k : codecs) {
    CacheConfig c;
    c.codec = k;
    configs.push_back(c);
  }
  for (const std::string& name : all_fixtures()) {
    const Fixture& f = fixture(name);
    const LlamaModel model = LlamaModel::load(f.path());
    for (CacheConfig config : configs) {
      config.budget = 24;
      config.window = 8;
      config.kernel = 3;
      config.kivi_group = 8;
      config.kivi_residual = 8;
      config.validate();
      const std::string what = name + " " + std::string(to_string(config.policy)) + "/" +
                               std::string(to_string(config.codec));
      LlamaSession session(model, config);
      std::vector<float> logits = session.prefill(f.prompt);
      const size_t kept = config.policy == PolicyKind::full ? f.prompt.size() : config.budget;
      for (const LayerCache& cache : session.caches()) {
        ASSERT_EQ(cache.size(), kept) << what;
        for (size_t h = 0; h < f.n_kv_heads; ++h) {
          const auto pos = cache.positions(h);
          ASSERT_EQ(pos.size(), kept) << what;
          EXPECT_TRUE(std::is_sorted(pos.begin(), pos.end())) << what;
          for (size_t s = 0; s < config.n_sink; ++s) {
            EXPECT_EQ(pos[s], static_cast<int64_t>(s)) << what;
          }
        }
      }
      for (size_t s = 0; s < 3; ++s) {
        logits = session.decode(argmax(logits));
        for (float v : logits) ASSERT_TRUE(std::isfinite(v)) << what;
      }
      EXPECT_EQ(session.caches().front().size(), kept + 3) << what;
      EXPECT_EQ(session.n_past(), f.prompt.size() + 3) << what;
    }
  }
}

}  // namespace
}  // namespace snapkv
