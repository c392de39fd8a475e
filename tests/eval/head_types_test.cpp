// Measuring head types (eval/head_types.h): on a hand-made attention pattern the heads whose
// queries look only at recent rows get a retrieval score near 0 and are classed streaming, the
// heads whose queries fetch one distant row score near 1; every score equals a direct double
// computation of the mass outside the streaming window; on the tiny model the measurement is the
// same for the same seed, scores lie in [0, 1], and its prompts end with the task's question.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "eval/tiny_model.h"
#include "snapkv/eval/head_types.h"
#include "snapkv/kv/core/head_types.h"

namespace snapkv::eval {
namespace {

constexpr size_t kHeads = 4, kKv = 4, kD = 8, kN = 100, kW = 4, kSink = 2, kRecent = 16;

// Head h of 0..3: even heads' queries match the keys of the last 12 positions (streaming), odd
// heads' queries match the key at position 40 (a needle: retrieval).
struct Pattern {
  std::vector<float> k, v, q;  // [kKv][kN][kD], [kKv][kN][kD], [kHeads][kW][kD]
};

Pattern pattern() {
  Pattern p;
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 0.1f);
  p.k.resize(kKv * kN * kD);
  p.v.resize(kKv * kN * kD);
  p.q.resize(kHeads * kW * kD);
  for (float& x : p.k) x = nd(rng);
  for (float& x : p.v) x = nd(rng);
  for (float& x : p.q) x = nd(rng);
  for (size_t h = 0; h < kKv; ++h) {
    if (h % 2 == 0) {
      for (size_t t = kN - 12; t < kN; ++t) p.k[(h * kN + t) * kD + 0] += 6.0f;
    } else {
      p.k[(h * kN + 40) * kD + 1] += 6.0f;
    }
  }
  for (size_t h = 0; h < kHeads; ++h) {
    for (size_t r = 0; r < kW; ++r) p.q[(h * kW + r) * kD + (h % 2 == 0 ? 0 : 1)] += 6.0f;
  }
  return p;
}

LayerCache open_prompt(const Pattern& p) {
  CacheConfig c;
  c.policy = PolicyKind::snapkv;
  c.query_source = QuerySource::queries;
  c.window = kW;
  LayerCache cache(CacheDims{kHeads, kKv, kD}, c, 0, 1);
  const Tensor3 k{p.k.data(), kKv, kN, kD}, v{p.v.data(), kKv, kN, kD};
  const Tensor3 q{p.q.data(), kHeads, kW, kD};
  cache.update(k, v, &q, UpdateKind::prefill);
  return cache;
}

// The reference: for query r of head h (position kN - kW + r), softmax over 0..pos of q.k/sqrt(d)
// in double from the cache's own (fp16-rounded) keys, mass outside [0, sinks) and the recent rows.
double reference(const LayerCache& cache, const Pattern& p, size_t h) {
  std::vector<float> keys(kN * kD);
  cache.read_keys(h, keys.data());  // one query head per KV head here
  double total = 0.0;
  for (size_t r = 0; r < kW; ++r) {
    const size_t pos = kN - kW + r;
    std::vector<double> e(pos + 1);
    double z = 0.0, top = -1e300;
    for (size_t j = 0; j <= pos; ++j) {
      double s = 0.0;
      for (size_t c = 0; c < kD; ++c) s += double(p.q[(h * kW + r) * kD + c]) * keys[j * kD + c];
      e[j] = s / std::sqrt(double(kD));
      top = std::max(top, e[j]);
    }
    for (double& x : e) z += (x = std::exp(x - top));
    double out = 0.0;
    for (size_t j = kSink; j + kRecent <= pos; ++j) out += e[j] / z;
    total += out;
  }
  return total / kW;
}

TEST(HeadTypesMeasure, RecentOnlyHeadsAreClassedStreaming) {
  const Pattern p = pattern();
  const LayerCache cache = open_prompt(p);
  const std::vector<double> m = layer_outside_mass(cache, kSink, kRecent);
  ASSERT_EQ(m.size(), kHeads);
  std::vector<float> scores(kHeads);
  for (size_t h = 0; h < kHeads; ++h) {
    EXPECT_NEAR(m[h], reference(cache, p, h), 1e-6) << "head " << h;
    scores[h] = static_cast<float>(m[h]);
    if (h % 2 == 0) {
      EXPECT_LT(m[h], 0.05) << "streaming head " << h;
    } else {
      EXPECT_GT(m[h], 0.9) << "retrieval head " << h;
    }
  }
  EXPECT_EQ(streaming_heads(scores, 0.5), (std::vector<uint8_t>{1, 0, 1, 0}));
}

TEST(HeadTypesMeasure, NeedsTheWindowQueries) {
  CacheConfig c;
  c.policy = PolicyKind::full;
  LayerCache cache(CacheDims{kHeads, kKv, kD}, c, 0, 1);
  const Pattern p = pattern();
  cache.update(Tensor3{p.k.data(), kKv, kN, kD}, Tensor3{p.v.data(), kKv, kN, kD}, nullptr,
               UpdateKind::prefill);
  EXPECT_THROW(layer_outside_mass(cache, kSink, kRecent), std::invalid_argument);
}

TEST(HeadTypesMeasure, TinyModelIsDeterministic) {
  const LlamaModel model = LlamaModel::load(test::tiny_model_path());
  const Tokenizer tok = Tokenizer::from_gguf(model.file());
  HeadTypesOptions o;
  o.contexts = {1024};
  o.samples_per_task = 1;
  o.queries = 8;
  o.prefill_chunk = 64;
  const auto prompts = head_types_prompts(tok, o);
  ASSERT_EQ(prompts.size(), 6u);
  const HeadTypes a = find_head_types(model, tok, o), b = find_head_types(model, tok, o);
  ASSERT_EQ(a.scores().size(), model.config().n_layers * model.config().n_kv_heads);
  for (size_t i = 0; i < a.scores().size(); ++i) {
    EXPECT_EQ(a.scores()[i], b.scores()[i]);
    EXPECT_GE(a.scores()[i], 0.0f);
    EXPECT_LE(a.scores()[i], 1.0f);
  }
  o.recent = 2000;  // the window covers every prompt: nothing is outside it
  const HeadTypes none = find_head_types(model, tok, o);
  for (const float s : none.scores()) EXPECT_EQ(s, 0.0f);
  o.contexts = {4096};
  EXPECT_THROW(find_head_types(model, tok, o), std::invalid_argument);
}

}  // namespace
}  // namespace snapkv::eval
