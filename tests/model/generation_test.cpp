// The shared generation loop on the shipped tiny model: greedy tokens equal a hand-written
// arg-max loop; stop strings cut the text at their first match and the streamed pieces always
// join to the returned text; max_tokens, cancellation and log-probabilities.
#include "snapkv/model/generation.h"

#include <gtest/gtest.h>

#include <cmath>
#include <optional>
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

// A scheduler's loop: three sequences, each with its own prompt and config, sampled by their own
// Generator and decoded together by LlamaSession::decode_batch (three rows: fewer than
// kGemmMinTokens, so the products have decode()'s bits), give each exactly generate()'s result
// and stream exactly its pieces.
TEST(Generation, InterleavedGeneratorsEqualGenerateAlone) {
  const Fixture& f = fixture();
  std::vector<GenerationConfig> configs(3);
  configs[0].max_tokens = 24;
  configs[0].stop = {"."};
  configs[1].max_tokens = 9;
  configs[1].sampler.temperature = 0.9f;
  configs[1].sampler.seed = 7;
  configs[1].top_logprobs = 2;
  configs[2].max_tokens = 30;
  configs[2].sampler.temperature = 0.7f;
  configs[2].sampler.top_k = 20;
  configs[2].sampler.seed = 3;
  const std::vector<std::vector<int32_t>> prompts = {
      f.prompt, f.tokenizer.encode("The dog"), f.tokenizer.encode("She went to the park and")};
  std::vector<GenerationResult> alone;
  std::vector<std::string> alone_streamed(3), together_streamed(3);
  for (size_t i = 0; i < 3; ++i) {
    LlamaSession s = f.session();
    std::vector<float> logits = s.prefill(prompts[i]);
    alone.push_back(generate(s, std::move(logits), f.tokenizer, configs[i], prompts[i],
                             [&, i](const GenerationPiece& p) {
                               alone_streamed[i].append(p.text);
                               return true;
                             }));
  }
  std::vector<LlamaSession> sessions;
  std::vector<std::vector<float>> logits;
  std::vector<Generator> gens;
  for (size_t i = 0; i < 3; ++i) {
    sessions.push_back(f.session());
    logits.push_back(sessions[i].prefill(prompts[i]));
    gens.emplace_back(f.tokenizer, configs[i], f.model.config().n_ctx, prompts[i],
                      [&, i](const GenerationPiece& p) {
                        together_streamed[i].append(p.text);
                        return true;
                      });
  }
  const size_t V = f.model.config().n_vocab;
  while (true) {
    std::vector<LlamaSession*> step;
    std::vector<int32_t> tokens;
    std::vector<size_t> who;
    for (size_t i = 0; i < 3; ++i) {
      if (gens[i].done()) continue;
      if (const std::optional<int32_t> t = gens[i].step(logits[i], sessions[i].n_past())) {
        step.push_back(&sessions[i]);
        tokens.push_back(*t);
        who.push_back(i);
      }
    }
    if (step.empty()) break;
    const std::vector<float> all = LlamaSession::decode_batch(step, tokens);
    for (size_t b = 0; b < who.size(); ++b) {
      logits[who[b]].assign(all.begin() + static_cast<std::ptrdiff_t>(b * V),
                            all.begin() + static_cast<std::ptrdiff_t>((b + 1) * V));
    }
  }
  for (size_t i = 0; i < 3; ++i) {
    const GenerationResult r = gens[i].finish();
    EXPECT_EQ(r.tokens, alone[i].tokens) << i;
    EXPECT_EQ(r.text, alone[i].text) << i;
    EXPECT_EQ(r.finish, alone[i].finish) << i;
    EXPECT_EQ(r.end_token, alone[i].end_token) << i;
    EXPECT_EQ(r.decode_steps, alone[i].decode_steps) << i;
    ASSERT_EQ(r.details.size(), alone[i].details.size()) << i;
    for (size_t k = 0; k < r.details.size(); ++k) {
      EXPECT_EQ(r.details[k].logprob, alone[i].details[k].logprob) << i;
    }
    EXPECT_EQ(together_streamed[i], alone_streamed[i]) << i;
    EXPECT_EQ(together_streamed[i], r.text) << i;
  }
  // The three really differ in how they ended.
  EXPECT_EQ(alone[1].finish, FinishReason::length);
  EXPECT_EQ(alone[1].details.size(), 9u);
}

// A bias of +100 on the end token makes the tiny model end at once; ignore_eos bans it instead,
// so the same request runs to max_tokens and no end token is generated.
TEST(Generation, IgnoreEosBansEndTokensEvenWhenTheyWin) {
  const Tokenizer& tok = fixture().tokenizer;
  ASSERT_FALSE(tok.eog_ids().empty());
  GenerationConfig g;
  g.max_tokens = 12;
  for (int32_t id : tok.eog_ids()) g.sampler.logit_bias.emplace_back(id, 100.0f);
  const GenerationResult ends = run(g);
  EXPECT_EQ(ends.finish, FinishReason::stop);
  EXPECT_TRUE(ends.tokens.empty());
  EXPECT_TRUE(tok.is_eog(ends.end_token));

  g.ignore_eos = true;
  const GenerationResult runs = run(g);
  EXPECT_EQ(runs.finish, FinishReason::length);
  ASSERT_EQ(runs.tokens.size(), 12u);
  for (int32_t t : runs.tokens) EXPECT_FALSE(tok.is_eog(t)) << t;
  // Banning the end tokens changes nothing else: without the bias the greedy text is the same
  // as long as the model did not want to end.
  GenerationConfig plain;
  plain.max_tokens = 12;
  plain.ignore_eos = true;
  const GenerationResult unbiased = run(plain);
  const std::vector<int32_t> reference = greedy_by_hand(12);
  if (reference.size() == 12) {
    EXPECT_EQ(unbiased.tokens, reference);
  }
  EXPECT_EQ(runs.tokens, unbiased.tokens);
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
