// The shared generation loop on the shipped tiny model: greedy tokens equal a hand-written
// arg-max loop; stop strings cut the text at their first match and the streamed pieces always
// join to the returned text; max_tokens, cancellation and log-probabilities.
#include "snapkv/model/generation.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "chat_model_util.h"
#include "snapkv/model/llama.h"
#include "snapkv/model/tokenizer.h"

namespace snapkv {
namespace {

struct Fixture {
  LlamaModel model = LlamaModel::load(testing::tiny_model_path());
  Tokenizer tokenizer = Tokenizer::from_gguf(model.file());
  std::vector<int32_t> prompt = tokenizer.encode("Once upon a time, there was a little");

  LlamaSession session() const { return LlamaSession(model, CacheConfig{}); }
};

const Fixture& fixture() {
  static const Fixture f;
  return f;
}

// The greedy continuation by hand: arg-max, stop at an end token, n tokens at most.
std::vector<int32_t> greedy_by_hand(size_t n) {
  const Fixture& f = fixture();
  LlamaSession s = f.session();
  std::vector<float> logits = s.prefill(f.prompt);
  std::vector<int32_t> out;
  while (out.size() < n) {
    const int32_t t = argmax(logits);
    if (f.tokenizer.is_eog(t)) break;
    out.push_back(t);
    if (out.size() == n) break;
    logits = s.decode(t);
  }
  return out;
}

GenerationResult run(const GenerationConfig& g, std::string* streamed = nullptr,
                     size_t cancel_after = 0) {
  const Fixture& f = fixture();
  LlamaSession s = f.session();
  std::vector<float> logits = s.prefill(f.prompt);
  size_t calls = 0;
  return generate(s, std::move(logits), f.tokenizer, g, f.prompt, [&](const GenerationPiece& p) {
    if (streamed != nullptr) streamed->append(p.text);
    return cancel_after == 0 || ++calls < cancel_after;
  });
}

TEST(Generation, GreedyEqualsTheArgmaxLoopAndStreamsTheSameText) {
  GenerationConfig g;
  g.max_tokens = 24;
  std::string streamed;
  const GenerationResult r = run(g, &streamed);
  EXPECT_EQ(r.tokens, greedy_by_hand(24));
  EXPECT_EQ(streamed, r.text);
  EXPECT_EQ(r.text, fixture().tokenizer.decode(r.tokens).substr(0, r.text.size()));
  if (r.tokens.size() == 24) {
    EXPECT_EQ(r.finish, FinishReason::length);
    EXPECT_EQ(r.decode_steps, 23u);
  }
}

TEST(Generation, StopStringCutsAtTheFirstMatch) {
  GenerationConfig g;
  g.max_tokens = 24;
  const GenerationResult full = run(g);
  ASSERT_GT(full.text.size(), 12u) << "the tiny model's greedy text is too short for this test";
  // A stop string from the middle of the greedy text, spanning token boundaries or not.
  const std::string stop = full.text.substr(8, 4);
  g.stop = {"never appears \x01", stop};
  std::string streamed;
  const GenerationResult r = run(g, &streamed);
  EXPECT_EQ(r.finish, FinishReason::stop);
  EXPECT_EQ(r.text, full.text.substr(0, full.text.find(stop)));
  EXPECT_EQ(streamed, r.text);
  // The token that completed the stop string is the last one kept.
  ASSERT_LE(r.tokens.size(), full.tokens.size());
  EXPECT_TRUE(std::equal(r.tokens.begin(), r.tokens.end(), full.tokens.begin()));
  const std::string upto = fixture().tokenizer.decode(r.tokens);
  EXPECT_NE(upto.find(stop), std::string::npos);
  std::vector<int32_t> fewer(r.tokens.begin(), r.tokens.end() - 1);
  EXPECT_EQ(fixture().tokenizer.decode(fewer).find(stop), std::string::npos);
}

TEST(Generation, HeldBackTextIsReleasedWhenNoStopStringCompletes) {
  GenerationConfig g;
  g.max_tokens = 24;
  const GenerationResult full = run(g);
  ASSERT_GT(full.text.size(), 4u);
  // The text's last two bytes followed by a byte that never comes: held back, then released.
  g.stop = {full.text.substr(full.text.size() - 2) + "\x01"};
  std::string streamed;
  const GenerationResult r = run(g, &streamed);
  EXPECT_EQ(r.text, full.text);
  EXPECT_EQ(streamed, full.text);
}

TEST(Generation, CancelAndLogprobs) {
  GenerationConfig g;
  g.max_tokens = 24;
  g.top_logprobs = 3;
  const GenerationResult r = run(g, nullptr, 2);
  EXPECT_EQ(r.finish, FinishReason::cancelled);
  EXPECT_EQ(r.tokens.size(), 2u);
  ASSERT_EQ(r.details.size(), 2u);
  for (const GeneratedToken& t : r.details) {
    ASSERT_EQ(t.top.size(), 3u);
    EXPECT_EQ(t.top[0].id, t.id);  // greedy: the chosen token is the most likely
    EXPECT_EQ(t.top[0].logprob, t.logprob);
    EXPECT_LE(t.logprob, 0.0);
    EXPECT_GE(t.top[0].logprob, t.top[1].logprob);
    EXPECT_GE(t.top[1].logprob, t.top[2].logprob);
    double mass = 0;
    for (const TokenLogprob& a : t.top) mass += std::exp(a.logprob);
    EXPECT_LE(mass, 1.0 + 1e-9);
  }
}

TEST(Generation, RejectsBadConfigs) {
  GenerationConfig g;
  g.max_tokens = 0;
  EXPECT_THROW(g.validate(), std::invalid_argument);
  g = {};
  g.stop = {""};
  EXPECT_THROW(g.validate(), std::invalid_argument);
  g = {};
  g.top_logprobs = 21;
  EXPECT_THROW(g.validate(), std::invalid_argument);
  g = {};
  g.sampler.min_p = -0.1f;
  EXPECT_THROW(g.validate(), std::invalid_argument);
}

}  // namespace
}  // namespace snapkv
