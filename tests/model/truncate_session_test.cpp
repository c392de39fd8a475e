// LlamaSession::truncated: a stored prompt cut to its first n tokens, then extended by other
// tokens, is the session that prefilled those first n tokens alone and extended them alike.
// With prefill_chunk 1 (and a window of 1, which the last chunk holds) every row of either
// session comes from a forward of that one token over the same earlier rows, so the two must agree
// bit for bit: every cached row, the logits of the extension and of the decode steps after it. The
// source session is unchanged (it still decodes as its clone does); compressed caches and bad
// lengths are refused.
#include <gtest/gtest.h>

#include <cstring>
#include <stdexcept>
#include <vector>

#include "model/golden_util.h"
#include "plain_config.h"
#include "snapkv/model/llama.h"

namespace snapkv {
namespace {

using test::load_model;

// n token ids in [0, n_vocab), spread by a fixed rule from `seed`.
std::vector<int32_t> tokens(size_t n, size_t seed, size_t n_vocab) {
  std::vector<int32_t> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = static_cast<int32_t>((seed + 37 * i + i * i) % n_vocab);
  return t;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

void expect_same_caches(const LlamaSession& a, const LlamaSession& b) {
  ASSERT_EQ(a.n_past(), b.n_past());
  for (size_t l = 0; l < a.caches().size(); ++l) {
    const LayerCache &ca = a.caches()[l], &cb = b.caches()[l];
    for (size_t h = 0; h < ca.dims().n_kv_heads; ++h) {
      ASSERT_EQ(ca.size(h), cb.size(h));
      std::vector<float> ka(ca.size(h) * ca.dims().head_dim), kb(ka.size());
      ca.read_keys(h, ka.data());
      cb.read_keys(h, kb.data());
      EXPECT_TRUE(same_bits(ka, kb)) << "keys of layer " << l << " head " << h;
      ca.read_values(h, ka.data());
      cb.read_values(h, kb.data());
      EXPECT_TRUE(same_bits(ka, kb)) << "values of layer " << l << " head " << h;
    }
  }
}

TEST(TruncateSession, CutThenExtendedEqualsThePrefixPrefilledAlone) {
  for (const gguf::TensorType type : {gguf::TensorType::q8_0, gguf::TensorType::f32}) {
    SCOPED_TRACE(type == gguf::TensorType::q8_0 ? "q8_0" : "f32");
    const LlamaModel model = load_model(type);
    CacheConfig config = test::plain_config();
    config.policy = PolicyKind::full;
    config.window = 1;  // a prefill's last chunk holds the window: one token, as every other
    const SessionOptions one_by_one{1};
    const std::vector<int32_t> stored = tokens(40, 11, model.config().n_vocab);
    std::vector<int32_t> diverging =
        tokens(9, 5, model.config().n_vocab);  // after the first n tokens of `stored`
    constexpr size_t n = 23;

    LlamaSession source(model, config, one_by_one);
    source.prefill(stored);
    const LlamaSession untouched = source.clone();
    LlamaSession cut = source.truncated(n);
    LlamaSession alone(model, config, one_by_one);
    alone.prefill(std::span<const int32_t>(stored).first(n));
    expect_same_caches(cut, alone);

    EXPECT_TRUE(same_bits(cut.extend(diverging), alone.extend(diverging)));
    EXPECT_TRUE(same_bits(cut.decode(7), alone.decode(7)));
    expect_same_caches(cut, alone);
    // The source still holds its whole prompt and decodes as before.
    expect_same_caches(source, untouched);
    LlamaSession u = untouched.clone();
    EXPECT_TRUE(same_bits(source.decode(9), u.decode(9)));
  }
}

TEST(TruncateSession, RefusesWhatCannotBeCut) {
  const LlamaModel model = load_model(gguf::TensorType::q8_0);
  CacheConfig full = test::plain_config();
  full.policy = PolicyKind::full;
  const std::vector<int32_t> prompt = tokens(30, 3, model.config().n_vocab);
  LlamaSession s(model, full);
  EXPECT_THROW((void)s.truncated(5), std::invalid_argument);  // nothing prefilled yet
  s.prefill(prompt);
  EXPECT_THROW((void)s.truncated(0), std::invalid_argument);
  EXPECT_THROW((void)s.truncated(prompt.size() + 1), std::invalid_argument);
  EXPECT_EQ(s.truncated(prompt.size()).n_past(), prompt.size());
  CacheConfig snapkv = test::plain_config();
  snapkv.budget = 12;
  LlamaSession compressed(model, snapkv);
  compressed.prefill(prompt);
  EXPECT_THROW((void)compressed.truncated(5), std::invalid_argument);
}

}  // namespace
}  // namespace snapkv
