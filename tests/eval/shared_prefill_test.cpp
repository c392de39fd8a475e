// Shared prefill (LlamaSession::prefill_shared / fork, eval::SharedPrefill): a fork of one prompt's
// prefill behaves bit for bit like a session that ran the prompt with the fork's config, for every
// eval method in both protocols, and run_eval gives identical results with and without sharing.
#include <gtest/gtest.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "eval/tiny_model.h"
#include "snapkv/eval/harness.h"
#include "snapkv/eval/tasks.h"
#include "snapkv/kv/core/method.h"

namespace snapkv::eval {
namespace {

using test::tiny_model;

PromptTokens passkey_prompt(size_t context) {
  const auto& m = tiny_model();
  TaskOptions options;
  options.context_tokens = context;
  options.seed = 11;
  const TokenCounter counter = [&m](std::string_view t) {
    return m.tokenizer.encode(t, false).size();
  };
  return tokenize_prompt(m.tokenizer, generate_sample(Task::passkey, options, 0, counter));
}

void expect_same_caches(const LlamaSession& a, const LlamaSession& b, const std::string& what) {
  ASSERT_EQ(a.caches().size(), b.caches().size());
  for (size_t l = 0; l < a.caches().size(); ++l) {
    const LayerCache& ca = a.caches()[l];
    const LayerCache& cb = b.caches()[l];
    ASSERT_EQ(ca.size(), cb.size()) << what << " layer " << l;
    for (size_t h = 0; h < ca.dims().n_kv_heads; ++h) {
      EXPECT_TRUE(std::ranges::equal(ca.positions(h), cb.positions(h))) << what << " layer " << l;
    }
    EXPECT_EQ(ca.stats().bytes_stored, cb.stats().bytes_stored) << what;
  }
}

TEST(SharedPrefill, ForksEqualDedicatedSessionsForEveryMethod) {
  const auto& m = tiny_model();
  const PromptTokens prompt = passkey_prompt(420);
  std::vector<int32_t> whole = prompt.context;
  whole.insert(whole.end(), prompt.question.begin(), prompt.question.end());
  CacheConfig defaults;
  defaults.window = 8;
  for (const char* name :
       {"full", "snapkv", "snapkv-proxy", "streaming", "chunkkv", "knorm", "random", "kivi2",
        "snapkv+kivi2", "kvzip", "kvzip_plus", "kvzip+kivi2", "keydiff", "expected_attention",
        "expected_attention-proxy", "ada-snapkv", "pyramid-keydiff",
        "ada-pyramid-expected_attention+kivi2"}) {
    // decode_budget 24 (interval 4): generation re-selects too; the forks must follow suit.
    for (const size_t decode_budget : {size_t{0}, size_t{24}}) {
      const std::string method(name);
      if (decode_budget > 0 && method != "snapkv" && method != "kvzip" && method != "streaming") {
        continue;  // a few policies suffice for the decode-time path (keeps the test short)
      }
      const std::string what =
          std::string(name) + " decode_budget " + std::to_string(decode_budget);
      defaults.decode_budget = decode_budget;
      defaults.decode_interval = 4;
      CacheConfig config = parse_method(name, defaults).config;
      config.budget = 40;
      RunSettings settings;
      settings.reconstruction.prompt = {7, 8, 9};
      settings.reconstruction.chunk = 150;
      const SharedPrefill shared(m.model, prompt, config, settings);
      double seconds = 0.0;
      LlamaSession forked = shared.fork(config, &seconds);
      // kvzip, kvzip_plus: a second fork reuses the first one's reconstruction pass.
      LlamaSession again = shared.fork(config, &seconds);

      LlamaSession dedicated(m.model, config,
                             SessionOptions{settings.prefill_chunk, settings.reconstruction});
      const std::vector<float> logits = dedicated.prefill(whole);
      EXPECT_EQ(shared.logits, logits) << what;  // the forward never depends on the policy
      expect_same_caches(forked, dedicated, what);
      expect_same_caches(again, dedicated, what);
      EXPECT_EQ(forked.n_past(), dedicated.n_past());
      // Decoding goes on identically, token after token.
      for (const int32_t token : {5, 17, 42, 3, 9, 11}) {
        const std::vector<float> expected = dedicated.decode(token);
        EXPECT_EQ(forked.decode(token), expected) << what;
        EXPECT_EQ(again.decode(token), expected) << what;
      }
      expect_same_caches(forked, dedicated, what);
      if (decode_budget > 0 && config.policy != PolicyKind::full) {
        EXPECT_LE(dedicated.caches().front().size(), decode_budget) << what;
        EXPECT_GT(dedicated.caches().front().decode_reselections(), 0u) << what;
      }
    }
  }
}

TEST(SharedPrefill, KvzipAndKvzipPlusEachRunTheirPassOnce) {
  const auto& m = tiny_model();
  const PromptTokens prompt = passkey_prompt(420);
  std::vector<int32_t> whole = prompt.context;
  whole.insert(whole.end(), prompt.question.begin(), prompt.question.end());
  RunSettings settings;
  settings.reconstruction.prompt = {7, 8, 9};
  settings.reconstruction.chunk = 150;
  CacheConfig defaults;
  defaults.window = 8;
  CacheConfig base = parse_method("kvzip", defaults).config;
  base.budget = 40;
  const SharedPrefill shared(m.model, prompt, base, settings);
  // Interleaved: each policy's later forks take its own pass's scores, never the other's.
  const std::vector<std::pair<const char*, size_t>> forks = {
      {"kvzip", 40}, {"kvzip_plus", 40}, {"ada-kvzip_plus", 24},
      {"kvzip", 24}, {"kvzip_plus", 60}, {"pyramid-kvzip", 60}};
  for (const auto& [name, budget] : forks) {
    CacheConfig config = parse_method(name, defaults).config;
    config.budget = budget;
    const std::string what = std::string(name) + " budget " + std::to_string(budget);
    double seconds = 0.0;
    const LlamaSession forked = shared.fork(config, &seconds);
    LlamaSession dedicated(m.model, config,
                           SessionOptions{settings.prefill_chunk, settings.reconstruction});
    dedicated.prefill(whole);
    expect_same_caches(forked, dedicated, what);
    ASSERT_NE(forked.reconstruction(), nullptr) << what;
    EXPECT_EQ(forked.reconstruction()->layers, dedicated.reconstruction()->layers) << what;
    EXPECT_GT(seconds, 0.0) << what;  // a reused pass still charges its time
  }
  ASSERT_TRUE(shared.kvzip.has_value());
  ASSERT_TRUE(shared.kvzip_plus.has_value());
  EXPECT_FALSE(shared.kvzip->normalized);
  EXPECT_TRUE(shared.kvzip_plus->normalized);
  EXPECT_NE(shared.kvzip->layers, shared.kvzip_plus->layers);
}

TEST(SharedPrefill, RunEvalGivesIdenticalResultsWithAndWithoutSharing) {
  const auto& m = tiny_model();
  for (const Protocol protocol : {Protocol::query_aware, Protocol::question_agnostic}) {
    EvalOptions o;
    o.tasks = {Task::niah_single, Task::passkey};
    o.context = 500;
    o.n = 2;
    o.defaults.window = 8;
    o.methods = parse_methods(
        "full,snapkv,snapkv-proxy,streaming,chunkkv,knorm,random,kivi2,snapkv+kivi2,kvzip,"
        "kvzip_plus,ada-kvzip_plus",
        o.defaults);
    o.keeps = {0.1, 0.5};
    o.protocol = protocol;
    o.seed = 4;
    o.share_prefill = true;
    const EvalResults shared = run_eval(m.model, m.tokenizer, o);
    o.share_prefill = false;
    const EvalResults separate = run_eval(m.model, m.tokenizer, o);
    ASSERT_EQ(shared.cells.size(), separate.cells.size());
    for (size_t c = 0; c < shared.cells.size(); ++c) {
      const CellResult& a = shared.cells[c];
      const CellResult& b = separate.cells[c];
      const std::string what = a.task + " " + a.method + " " + std::to_string(a.keep) + " " +
                               std::string(to_string(protocol));
      EXPECT_EQ(a.accuracy, b.accuracy) << what;
      EXPECT_EQ(a.mean_kept_rows, b.mean_kept_rows) << what;
      EXPECT_EQ(a.mean_kv_bytes, b.mean_kv_bytes) << what;
      EXPECT_EQ(a.mean_kv_bytes_prompt, b.mean_kv_bytes_prompt) << what;
      EXPECT_EQ(a.decode_steps_total, b.decode_steps_total) << what;
      ASSERT_EQ(a.samples.size(), b.samples.size());
      for (size_t i = 0; i < a.samples.size(); ++i) {
        EXPECT_EQ(a.samples[i].prediction, b.samples[i].prediction) << what;
        EXPECT_EQ(a.samples[i].kept_rows, b.samples[i].kept_rows) << what;
      }
    }
  }
}

TEST(SharedPrefill, SessionMisuseIsRefused) {
  const auto& m = tiny_model();
  const PromptTokens prompt = passkey_prompt(400);
  CacheConfig config;
  config.chunk_mode = ChunkMode::end_of_prompt;
  config.budget = 30;
  config.window = 8;

  LlamaSession base(m.model, config);
  base.prefill_shared(prompt.context);
  EXPECT_THROW(base.decode(5), std::invalid_argument);
  EXPECT_THROW(base.extend(prompt.question), std::invalid_argument);
  EXPECT_NO_THROW((void)base.fork(config));

  LlamaSession plain(m.model, config);
  EXPECT_THROW((void)plain.fork(config), std::invalid_argument);  // nothing prefilled
  plain.prefill(prompt.context);
  EXPECT_THROW((void)plain.fork(config), std::invalid_argument);  // prompt already compressed

  CacheConfig full = config;
  full.policy = PolicyKind::full;
  LlamaSession full_session(m.model, full);
  EXPECT_THROW(full_session.prefill_shared(prompt.context), std::invalid_argument);
  CacheConfig every = config;
  every.chunk_mode = ChunkMode::every_chunk;
  LlamaSession every_session(m.model, every);
  EXPECT_THROW(every_session.prefill_shared(prompt.context), std::invalid_argument);

  CacheConfig other_window = config;
  other_window.window = 16;
  EXPECT_THROW((void)base.fork(other_window), std::invalid_argument);
}

}  // namespace
}  // namespace snapkv::eval
