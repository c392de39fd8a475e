// Perplexity mode: the NLL arithmetic against double references, LlamaSession::extend against a
// single prefill of the same tokens, and run_perplexity's bookkeeping on the tiny model.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <vector>

#include "eval/tiny_model.h"
#include "snapkv/eval/perplexity.h"
#include "snapkv/eval/report.h"

namespace snapkv::eval {
namespace {

using test::tiny_model;

TEST(Perplexity, TokenNllMatchesLogSumExp) {
  const std::vector<float> uniform(50, 3.25f);
  EXPECT_NEAR(token_nll(uniform, 7), std::log(50.0), 1e-12);
  const std::vector<float> logits = {1.0f, -2.0f, 0.5f, 40.0f, -1e4f};
  double sum = 0.0;
  for (float l : logits) sum += std::exp(static_cast<double>(l));
  for (int32_t t = 0; t < 5; ++t) {
    const double ref = std::log(sum) - static_cast<double>(logits[static_cast<size_t>(t)]);
    EXPECT_NEAR(token_nll(logits, t), ref, 1e-12 * std::max(1.0, std::abs(ref))) << t;
  }
  EXPECT_THROW(token_nll(logits, 5), std::invalid_argument);
  EXPECT_THROW(token_nll(logits, -1), std::invalid_argument);
}

TEST(Perplexity, ContinuationNllUsesTheRightRows) {
  // Row r puts all its mass (almost) on token r+1: only the correct row/token pairing gives ~0.
  const size_t V = 4;
  const std::vector<int32_t> cont = {1, 2, 3};
  std::vector<float> first(V, -30.0f), rest(2 * V, -30.0f);
  first[1] = 30.0f;
  rest[0 * V + 2] = 30.0f;
  rest[1 * V + 3] = 30.0f;
  EXPECT_LT(continuation_nll(first, rest, cont, V), 1e-20);
  const std::vector<int32_t> shifted = {2, 3, 1};
  EXPECT_GT(continuation_nll(first, rest, shifted, V), 50.0);
  EXPECT_THROW(continuation_nll(first, std::vector<float>(V), cont, V), std::invalid_argument);
  EXPECT_THROW(continuation_nll(std::vector<float>(V - 1), rest, cont, V), std::invalid_argument);
}

TEST(Perplexity, ExtendIsTheSameForwardAsPrefillAndDecode) {
  // A full cache stores fp16 rows, so "prefill(prefix) + extend(rest)" is not "prefill(all)" to
  // float precision (the rest reads the prefix through fp16). It is exactly the same computation
  // as (a) a prefill whose chunk boundary falls where extend starts, and (b) decode() token by
  // token when extend runs one token per forward: both must match bit for bit.
  const auto& m = tiny_model();
  std::vector<int32_t> tokens = m.tokenizer.encode(filler_text(m.tokenizer, 200, 11), true);
  tokens.resize(200);
  const size_t split = 150, V = m.model.config().n_vocab;
  const std::span<const int32_t> all(tokens);
  CacheConfig full;
  full.policy = PolicyKind::full;

  LlamaSession chunked(m.model, full, SessionOptions{split});  // chunks [0,150) [150,200)
  std::vector<float> reference;                                // [200][V]
  chunked.prefill(all, &reference);

  // Logits of every row in both (one output GEMM of the same rows; a single-row GEMV differs).
  LlamaSession a(m.model, full, SessionOptions{split});
  std::vector<float> prefix_logits;  // [150][V]
  a.prefill(all.first(split), &prefix_logits);
  const std::vector<float> last_prefix(prefix_logits.end() - static_cast<std::ptrdiff_t>(V),
                                       prefix_logits.end());
  std::vector<float> rest;  // [50][V]
  const std::vector<float> last = a.extend(all.subspan(split), &rest);
  ASSERT_EQ(rest.size(), (tokens.size() - split) * V);
  EXPECT_EQ(a.n_past(), tokens.size());
  EXPECT_EQ(a.cache_stats().tokens_kept, tokens.size());
  EXPECT_TRUE(std::equal(last_prefix.begin(), last_prefix.end(),
                         reference.begin() + static_cast<std::ptrdiff_t>((split - 1) * V)));
  EXPECT_TRUE(std::equal(rest.begin(), rest.end(),
                         reference.begin() + static_cast<std::ptrdiff_t>(split * V)));
  EXPECT_TRUE(std::equal(last.begin(), last.end(), rest.end() - static_cast<std::ptrdiff_t>(V)));

  LlamaSession one_by_one(m.model, full, SessionOptions{1});
  LlamaSession stepper(m.model, full, SessionOptions{1});
  one_by_one.prefill(all.first(split));
  stepper.prefill(all.first(split));
  std::vector<float> extended;
  one_by_one.extend(all.subspan(split, 10), &extended);
  for (size_t i = 0; i < 10; ++i) {
    const std::vector<float> logits = stepper.decode(tokens[split + i]);
    EXPECT_TRUE(std::equal(logits.begin(), logits.end(),
                           extended.begin() + static_cast<std::ptrdiff_t>(i * V)))
        << "token " << i;
  }

  LlamaSession fresh(m.model, full);
  EXPECT_THROW(fresh.extend(all.first(3)), std::invalid_argument);  // before prefill
  EXPECT_THROW(a.extend(std::span<const int32_t>()), std::invalid_argument);
  const std::vector<int32_t> bad = {static_cast<int32_t>(V)};
  EXPECT_THROW(a.extend(bad), std::invalid_argument);
  const std::vector<int32_t> too_many(m.model.config().n_ctx, 5);
  EXPECT_THROW(a.extend(too_many), std::invalid_argument);
}

TEST(Perplexity, ExtendNeverEvicts) {
  const auto& m = tiny_model();
  std::vector<int32_t> tokens = m.tokenizer.encode(filler_text(m.tokenizer, 300, 2), true);
  tokens.resize(300);
  CacheConfig config = parse_method("snapkv", CacheConfig{}).config;
  config.budget = 60;
  LlamaSession session(m.model, config, SessionOptions{64});
  session.prefill(std::span<const int32_t>(tokens).first(200));
  EXPECT_EQ(session.cache_stats().tokens_kept, 60u);
  session.extend(std::span<const int32_t>(tokens).subspan(200));
  EXPECT_EQ(session.cache_stats().tokens_kept, 160u);
  EXPECT_EQ(session.cache_stats().tokens_seen, 300u);
}

TEST(Perplexity, RunKeepsTheBudgetAndFullAtKeepOneIsFull) {
  const auto& m = tiny_model();
  PerplexityOptions o;
  o.prefix = 200;
  o.continuation = 32;
  o.n_windows = 2;
  o.methods = parse_methods("full,snapkv,streaming", o.defaults);
  o.keeps = {0.25, 1.0};
  o.text_source = "filler:seed=4";
  const std::string text = filler_text(m.tokenizer, 2 * (o.prefix - 1 + o.continuation), 4);
  const PerplexityResults r = run_perplexity(m.model, m.tokenizer, text, o);
  ASSERT_EQ(r.cells.size(), 6u);
  double full_nll = 0.0;
  for (const PerplexityCell& c : r.cells) {
    EXPECT_EQ(c.n_windows, 2u);
    EXPECT_EQ(c.n_scored, 64u);
    EXPECT_EQ(c.window_nll.size(), 2u);
    EXPECT_TRUE(std::isfinite(c.mean_nll));
    EXPECT_GT(c.mean_nll, 0.0);
    EXPECT_NEAR(c.perplexity, std::exp(c.mean_nll), 1e-9 * c.perplexity);
    if (c.method == "full") full_nll = c.mean_nll;
  }
  for (const PerplexityCell& c : r.cells) {
    EXPECT_TRUE(c.has_full);
    EXPECT_NEAR(c.delta_nll, c.mean_nll - full_nll, 1e-12);
    if (c.method == "full") continue;
    if (c.keep == 1.0) {
      // budget == prefix: nothing evicted, the same forward pass as full
      EXPECT_DOUBLE_EQ(c.mean_nll, full_nll) << c.method;
      EXPECT_DOUBLE_EQ(c.mean_kept_rows, 200.0);
    } else {
      EXPECT_DOUBLE_EQ(c.mean_budget, 50.0);
      EXPECT_DOUBLE_EQ(c.mean_kept_rows, 50.0);
      EXPECT_NEAR(c.kv_fraction_prefix, 0.25, 1e-12);
      EXPECT_NEAR(c.kv_fraction, (50.0 + 31.0) / (200.0 + 31.0), 1e-12);  // + the continuation
    }
  }
  const RunInfo info = collect_run_info(test::tiny_model_path(), 1, "test");
  const nlohmann::json j = to_json(r, m.model, info);
  EXPECT_EQ(j.at("mode"), "perplexity");
  EXPECT_EQ(j.at("results").size(), 6u);
  EXPECT_EQ(j.at("config").at("text_source"), "filler:seed=4");

  PerplexityOptions too_long = o;
  too_long.n_windows = 50;
  EXPECT_THROW(run_perplexity(m.model, m.tokenizer, text, too_long), std::invalid_argument);
}

TEST(Perplexity, SharedPrefixPrefillGivesTheSameResults) {
  const auto& m = tiny_model();
  PerplexityOptions o;
  o.prefix = 180;
  o.continuation = 16;
  o.n_windows = 2;
  o.defaults.window = 8;
  o.methods =
      parse_methods("full,snapkv,snapkv-proxy,streaming,random,kivi2,snapkv+kivi2", o.defaults);
  o.keeps = {0.2, 0.6};
  const std::string text = filler_text(m.tokenizer, 2 * (o.prefix - 1 + o.continuation), 6);
  o.share_prefill = true;
  const PerplexityResults shared = run_perplexity(m.model, m.tokenizer, text, o);
  o.share_prefill = false;
  const PerplexityResults separate = run_perplexity(m.model, m.tokenizer, text, o);
  ASSERT_EQ(shared.cells.size(), separate.cells.size());
  for (size_t c = 0; c < shared.cells.size(); ++c) {
    const PerplexityCell& a = shared.cells[c];
    const PerplexityCell& b = separate.cells[c];
    EXPECT_EQ(a.window_nll, b.window_nll) << a.method << " " << a.keep;  // bit for bit
    EXPECT_EQ(a.mean_kept_rows, b.mean_kept_rows) << a.method;
    EXPECT_EQ(a.mean_kv_bytes, b.mean_kv_bytes) << a.method;
  }
}

}  // namespace
}  // namespace snapkv::eval
