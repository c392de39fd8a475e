// The evaluation harness on a tiny real model: method names map to the right CacheConfig, the
// budget rule, the prompt split, the question-agnostic protocol really leaves the question out of
// compression (seen/kept counts), and a 2-sample run gives a complete JSON record.
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "eval/tiny_model.h"
#include "snapkv/eval/harness.h"
#include "snapkv/eval/report.h"
#include "snapkv/eval/tasks.h"
#include "snapkv/kv/core/method.h"

namespace snapkv::eval {
namespace {

using test::tiny_model;

TokenCounter model_counter() {
  return [](std::string_view text) { return tiny_model().tokenizer.encode(text, false).size(); };
}

Sample make_sample(Task task, size_t context, size_t index = 0) {
  TaskOptions options;
  options.context_tokens = context;
  options.seed = 3;
  return generate_sample(task, options, index, model_counter());
}

TEST(Methods, NamesMapToConfigs) {
  const CacheConfig d;
  EXPECT_EQ(parse_method("full", d).config.policy, PolicyKind::full);
  EXPECT_FALSE(parse_method("full", d).uses_keep);
  const Method snap = parse_method("snapkv", d);
  EXPECT_EQ(snap.config.policy, PolicyKind::snapkv);
  EXPECT_EQ(snap.config.query_source, QuerySource::queries);
  EXPECT_EQ(snap.config.codec, CodecKind::fp16);
  EXPECT_TRUE(snap.uses_keep);
  EXPECT_EQ(snap.config.window, kSnapkvWindow);  // snapkv's own (kv/core/method.h)
  EXPECT_EQ(snap.config.kernel, kSnapkvKernel);
  EXPECT_EQ(parse_method("snapkv-proxy", d).config.window, d.window);
  EXPECT_EQ(snap.config.pool, d.pool);
  EXPECT_EQ(snap.config.chunk_mode, d.chunk_mode);
  EXPECT_EQ(parse_method("snapkv-proxy", d).config.query_source, QuerySource::keys);
  EXPECT_EQ(parse_method("streaming", d).config.policy, PolicyKind::streaming);
  EXPECT_EQ(parse_method("chunkkv", d).config.policy, PolicyKind::chunkkv);
  EXPECT_EQ(parse_method("knorm", d).config.policy, PolicyKind::knorm);
  EXPECT_EQ(parse_method("random", d).config.policy, PolicyKind::random);
  const Method kivi = parse_method("kivi2", d);
  EXPECT_EQ(kivi.config.policy, PolicyKind::full);
  EXPECT_EQ(kivi.config.codec, CodecKind::kivi2);
  EXPECT_FALSE(kivi.uses_keep);
  EXPECT_EQ(parse_method("kivi4", d).config.codec, CodecKind::kivi4);
  EXPECT_EQ(parse_method("kivi2r", d).config.codec, CodecKind::kivi2r);
  EXPECT_EQ(parse_method("snapkv+kitty", d).config.codec, CodecKind::kitty);
  EXPECT_EQ(parse_method("snapkv+kivi4r", d).config.policy, PolicyKind::snapkv);
  EXPECT_THROW(parse_method("snapkv+fp16", d), std::invalid_argument);  // fp16 is no codec name
  const Method stacked = parse_method("snapkv-proxy+kivi4", d);
  EXPECT_EQ(stacked.config.policy, PolicyKind::snapkv);
  EXPECT_EQ(stacked.config.query_source, QuerySource::keys);
  EXPECT_EQ(stacked.config.codec, CodecKind::kivi4);
  EXPECT_TRUE(stacked.uses_keep);
  EXPECT_EQ(parse_method("keydiff", d).config.policy, PolicyKind::keydiff);
  const Method ea = parse_method("expected_attention", d);
  EXPECT_EQ(ea.config.policy, PolicyKind::expected_attention);
  EXPECT_EQ(ea.config.query_source, QuerySource::queries);
  EXPECT_EQ(parse_method("expected_attention-proxy", d).config.query_source, QuerySource::keys);
  const Method ada = parse_method("ada-snapkv", d);
  EXPECT_EQ(ada.config.policy, PolicyKind::snapkv);
  EXPECT_EQ(ada.config.head_allocation, HeadAllocation::ada);
  EXPECT_EQ(ada.config.layer_allocation, LayerAllocation::uniform);
  const Method pyr = parse_method("ada-pyramid-keydiff+kivi2", d);
  EXPECT_EQ(pyr.config.policy, PolicyKind::keydiff);
  EXPECT_EQ(pyr.config.head_allocation, HeadAllocation::ada);
  EXPECT_EQ(pyr.config.layer_allocation, LayerAllocation::pyramid);
  EXPECT_EQ(pyr.config.codec, CodecKind::kivi2);
  EXPECT_EQ(parse_method("pyramid-streaming", d).config.layer_allocation, LayerAllocation::pyramid);
  EXPECT_EQ(parse_method("snapkv", d).config.head_allocation, HeadAllocation::uniform);
  const Method ada_kvzip = parse_method("ada-kvzip", d);  // kvzip's supplied scores rank rows
  EXPECT_EQ(ada_kvzip.config.policy, PolicyKind::kvzip);
  EXPECT_EQ(ada_kvzip.config.head_allocation, HeadAllocation::ada);
  EXPECT_EQ(parse_method("pyramid-kvzip", d).config.layer_allocation, LayerAllocation::pyramid);
  EXPECT_THROW(parse_method("ada-streaming", d), std::invalid_argument);  // no per-row scores
  EXPECT_THROW(parse_method("ada-full", d), std::invalid_argument);
  EXPECT_THROW(parse_method("pyramid-kivi2", d), std::invalid_argument);
  EXPECT_THROW(parse_method("h2o", d), std::invalid_argument);
  EXPECT_THROW(parse_method("snapkv+kivi3", d), std::invalid_argument);
  EXPECT_THROW(parse_method("kivi2+snapkv", d), std::invalid_argument);
  EXPECT_THROW(parse_methods("full,,snapkv", d), std::invalid_argument);
  EXPECT_THROW(parse_methods("full,full", d), std::invalid_argument);
  EXPECT_EQ(parse_methods(" full , snapkv+kivi2 ", d).size(), 2u);
}

TEST(Methods, KeepsAndBudgetRule) {
  EXPECT_EQ(parse_keeps("0.1, 0.2,0.5"), (std::vector<double>{0.1, 0.2, 0.5}));
  for (const char* bad : {"0", "1.5", "-0.1", "x", "0.1,0.1", "", "0.1x"}) {
    EXPECT_THROW(parse_keeps(bad), std::invalid_argument) << bad;
  }
  CacheConfig c;
  c.n_sink = 4;
  c.window = 32;
  c.keep_window = true;
  EXPECT_EQ(budget_for(0.1, 1000, c), 100u);
  EXPECT_EQ(budget_for(0.1, 1001, c), 101u);  // ceil
  EXPECT_EQ(budget_for(0.5, 2048, c), 1024u);
  EXPECT_EQ(budget_for(0.1, 200, c), 36u);  // floor: sinks + window
  c.keep_window = false;
  EXPECT_EQ(budget_for(0.01, 200, c), 5u);  // floor: sinks + 1
  EXPECT_EQ(budget_for(1.0, 200, c), 200u);
  EXPECT_THROW(budget_for(0.0, 200, c), std::invalid_argument);
  EXPECT_THROW(budget_for(0.5, 0, c), std::invalid_argument);
}

TEST(Harness, PromptSplitKeepsTheWholePromptsTokens) {
  const Tokenizer& tok = tiny_model().tokenizer;
  for (Task task : {Task::niah_single, Task::passkey, Task::vt}) {
    const Sample sample = make_sample(task, 700);
    const PromptTokens p = tokenize_prompt(tok, sample);
    std::vector<int32_t> joined = p.context;
    joined.insert(joined.end(), p.question.begin(), p.question.end());
    EXPECT_EQ(joined, tok.encode(full_prompt(sample), true)) << task_name(task);
    ASSERT_FALSE(p.context.empty());
    EXPECT_EQ(p.context.front(), tok.bos());
    EXPECT_FALSE(p.question.empty());
    // The context part is (nearly) the context's own tokens: at most one boundary token moves.
    EXPECT_LE(tok.encode(sample.context, true).size(), p.context.size() + 1);
  }
}

TEST(Harness, QuestionAgnosticLeavesTheQuestionOutOfCompression) {
  const auto& m = tiny_model();
  const Sample sample = make_sample(Task::niah_single, 500);
  const PromptTokens p = tokenize_prompt(m.tokenizer, sample);
  RunSettings settings;
  settings.max_new_tokens = 3;
  for (const char* name : {"snapkv", "snapkv-proxy", "streaming", "snapkv+kivi2"}) {
    const Method method = parse_method(name, CacheConfig{});
    // Question-agnostic: only the context is compressed.
    {
      CacheConfig config = method.config;
      config.budget = budget_for(0.2, p.context.size(), config);
      ASSERT_LT(config.budget, p.context.size());
      settings.protocol = Protocol::question_agnostic;
      const SampleRun run = run_sample(m.model, m.tokenizer, p, sample.answers, config, settings);
      EXPECT_EQ(run.compressed_tokens, p.context.size()) << name;
      EXPECT_EQ(run.after_context.tokens_seen, p.context.size()) << name;
      EXPECT_EQ(run.after_context.tokens_kept, config.budget) << name;
      EXPECT_EQ(run.after_prompt.tokens_seen, p.size()) << name;
      EXPECT_EQ(run.after_prompt.tokens_kept, config.budget + p.question.size()) << name;
      EXPECT_GE(run.generated.size(), 1u);
      EXPECT_LE(run.generated.size(), settings.max_new_tokens);
    }
    // Query-aware: the whole prompt is compressed to the budget.
    {
      CacheConfig config = method.config;
      config.budget = budget_for(0.2, p.size(), config);
      settings.protocol = Protocol::query_aware;
      const SampleRun run = run_sample(m.model, m.tokenizer, p, sample.answers, config, settings);
      EXPECT_EQ(run.compressed_tokens, p.size()) << name;
      EXPECT_EQ(run.after_prompt.tokens_seen, p.size()) << name;
      EXPECT_EQ(run.after_prompt.tokens_kept, config.budget) << name;
    }
  }
}

TEST(Harness, FullCacheKeepsEverythingAndCountsFp16Bytes) {
  const auto& m = tiny_model();
  const Sample sample = make_sample(Task::passkey, 500);
  const PromptTokens p = tokenize_prompt(m.tokenizer, sample);
  RunSettings settings;
  settings.max_new_tokens = 2;
  CacheConfig config = parse_method("full", CacheConfig{}).config;
  const SampleRun run = run_sample(m.model, m.tokenizer, p, sample.answers, config, settings);
  EXPECT_EQ(run.after_prompt.tokens_kept, p.size());
  EXPECT_EQ(run.after_prompt.bytes_stored, run.after_prompt.bytes_full_fp16);
  const LlamaConfig& c = m.model.config();
  // keys + values, every layer and KV head, 2 bytes per element
  EXPECT_EQ(run.after_prompt.bytes_full_fp16,
            p.size() * c.n_layers * c.n_kv_heads * c.head_dim * 4);
  settings.max_new_tokens = 0;
  EXPECT_THROW(run_sample(m.model, m.tokenizer, p, sample.answers, config, settings),
               std::invalid_argument);
}

// One passkey sample, full cache.
EvalOptions one_passkey(size_t context) {
  EvalOptions o;
  o.tasks = {Task::passkey};
  o.context = context;
  o.n = 1;
  o.methods = parse_methods("full", o.defaults);
  o.keeps = {0.5};
  return o;
}

TEST(Harness, NoNeedleControlRunsTheSamePromptsWithoutNeedles) {
  const auto& m = tiny_model();
  EvalOptions o = one_passkey(400);
  o.seed = 9;
  const EvalResults with = run_eval(m.model, m.tokenizer, o, nullptr);
  o.remove_needles = true;
  const EvalResults without = run_eval(m.model, m.tokenizer, o, nullptr);
  ASSERT_EQ(with.cells.size(), 1u);
  ASSERT_EQ(without.cells.size(), 1u);
  // Same haystack and question, the pass key sentence left out: a shorter prompt, same answers.
  EXPECT_LT(without.cells[0].mean_prompt_tokens, with.cells[0].mean_prompt_tokens);
  EXPECT_EQ(without.cells[0].samples[0].answers, with.cells[0].samples[0].answers);
  const RunInfo info = collect_run_info(test::tiny_model_path(), 1, "test");
  EXPECT_TRUE(to_json(without, m.model, info).at("config").at("no_needle_control").get<bool>());
  EXPECT_FALSE(to_json(with, m.model, info).at("config").at("no_needle_control").get<bool>());
}

TEST(Harness, TwoSampleRunGivesACompleteJson) {
  const auto& m = tiny_model();
  EvalOptions o;
  o.tasks = {Task::niah_single, Task::passkey};
  o.context = 500;
  o.n = 2;
  o.methods = parse_methods("full,snapkv,kivi2,snapkv+kivi2", o.defaults);
  o.keeps = {0.2, 0.5};
  o.seed = 5;
  size_t calls = 0, last_total = 0;
  const EvalResults r = run_eval(m.model, m.tokenizer, o, [&](size_t done, size_t total) {
    ++calls;
    EXPECT_EQ(done, calls);
    last_total = total;
  });
  // runs per sample: full 1 + snapkv 2 + kivi2 1 + snapkv+kivi2 2 = 6
  EXPECT_EQ(last_total, 2u * 2u * 6u);
  EXPECT_EQ(calls, last_total);
  ASSERT_EQ(r.cells.size(), 2u * 4u * 2u);

  const RunInfo info = collect_run_info(test::tiny_model_path(), 1, "test");
  const nlohmann::json j = to_json(r, m.model, info);
  EXPECT_EQ(j.at("schema"), "snapkv-eval/1");
  EXPECT_EQ(j.at("mode"), "tasks");
  const auto& model = j.at("model");
  EXPECT_EQ(model.at("path"), test::tiny_model_path());
  EXPECT_EQ(model.at("sha256").get<std::string>().size(), 64u);
  EXPECT_GT(model.at("bytes").get<uint64_t>(), 0u);
  EXPECT_EQ(model.at("n_layers"), m.model.config().n_layers);
  for (const char* key :
       {"tasks", "context", "n", "methods", "keeps", "protocol", "seed", "no_needle_control",
        "prefill_chunk", "answer_slack", "method_defaults", "budget_rule"}) {
    EXPECT_TRUE(j.at("config").contains(key)) << key;
  }
  EXPECT_EQ(j.at("config").at("methods").size(), 4u);
  // the commit the test binary was built from (cmake/git_info.cmake): 40 hex digits, or
  // "unknown" for a build outside a git checkout
  const std::string commit = j.at("git").at("commit").get<std::string>();
  EXPECT_TRUE(
      commit == "unknown" ||
      (commit.size() == 40 && commit.find_first_not_of("0123456789abcdef") == std::string::npos))
      << commit;
  EXPECT_TRUE(j.at("git").at("dirty").is_boolean());
  EXPECT_GE(j.at("machine").at("nproc").get<size_t>(), 1u);
  EXPECT_TRUE(j.at("machine").contains("cpu_model"));
  EXPECT_EQ(j.at("date").get<std::string>().size(), 20u);  // 2025-01-01T00:00:00Z
  EXPECT_GT(j.at("seconds").get<double>(), 0.0);

  const auto& results = j.at("results");
  ASSERT_EQ(results.size(), 16u);
  for (const auto& c : results) {
    for (const char* key : {"task",
                            "method",
                            "keep",
                            "keep_independent",
                            "n",
                            "accuracy",
                            "mean_prompt_tokens",
                            "mean_budget",
                            "mean_kept_rows",
                            "mean_kv_bytes",
                            "mean_kv_bytes_full_fp16",
                            "kv_fraction",
                            "mean_kv_bytes_prompt",
                            "mean_kv_bytes_full_fp16_prompt",
                            "kv_fraction_prompt",
                            "prefill_tokens_per_s",
                            "decode_tokens_per_s",
                            "mean_generated_tokens",
                            "agreement_with_full",
                            "samples"}) {
      ASSERT_TRUE(c.contains(key)) << key;
    }
    EXPECT_EQ(c.at("n"), 2u);
    ASSERT_EQ(c.at("samples").size(), 2u);
    for (const auto& s : c.at("samples")) {
      EXPECT_TRUE(s.contains("prediction"));
      EXPECT_FALSE(s.at("answers").empty());
      EXPECT_LE(s.at("mean_kept_rows").get<size_t>(), s.at("prompt_tokens").get<size_t>());
    }
    const double acc = c.at("accuracy");
    EXPECT_GE(acc, 0.0);
    EXPECT_LE(acc, 100.0);
    EXPECT_GT(c.at("prefill_tokens_per_s").get<double>(), 0.0);
    const std::string method = c.at("method");
    const double kv = c.at("kv_fraction");
    const double agreement = c.at("agreement_with_full");
    EXPECT_GE(agreement, 0.0);
    EXPECT_LE(agreement, 100.0);
    if (method == "full") {
      EXPECT_DOUBLE_EQ(agreement, 100.0);
      EXPECT_DOUBLE_EQ(kv, 1.0);
      EXPECT_TRUE(c.at("keep_independent").get<bool>());
    } else if (method == "snapkv") {
      EXPECT_LT(kv, c.at("keep").get<double>() + 0.15);  // budget floor on short prompts
      EXPECT_NEAR(c.at("mean_kept_rows").get<double>(), c.at("mean_budget").get<double>(), 1e-9);
    } else if (method == "snapkv+kivi2") {
      EXPECT_LT(kv, 1.0);
    }
  }
  // Keep-independent methods report the same numbers under every keep.
  for (size_t i = 0; i + 1 < results.size(); ++i) {
    const auto& a = results[i];
    const auto& b = results[i + 1];
    if (a.at("keep_independent").get<bool>() && a.at("method") == b.at("method") &&
        a.at("task") == b.at("task")) {
      EXPECT_EQ(a.at("accuracy"), b.at("accuracy"));
      EXPECT_EQ(a.at("mean_kv_bytes"), b.at("mean_kv_bytes"));
    }
  }
  ASSERT_EQ(j.at("summary").size(), 8u);
  for (const auto& s : j.at("summary")) {
    EXPECT_EQ(s.at("task"), "all");
    EXPECT_EQ(s.at("n"), 4u);
  }
}

TEST(Harness, ContextUpToTheModelLimitRunsWithTheSlackCapped) {
  const auto& m = tiny_model();
  // BOS + prompt + reference = n_ctx: no room for the 4 slack tokens, and none is needed.
  const EvalOptions o = one_passkey(m.model.config().n_ctx - 1);
  const EvalResults r = run_eval(m.model, m.tokenizer, o, nullptr);
  ASSERT_EQ(r.cells.size(), 1u);
  const SampleRecord& s = r.cells[0].samples[0];
  EXPECT_LE(s.prompt_tokens + s.generated_tokens, m.model.config().n_ctx);
}

TEST(Harness, RejectsBadOptions) {
  const auto& m = tiny_model();
  const EvalOptions o = one_passkey(500);
  EvalOptions bad = o;
  bad.tasks.clear();
  EXPECT_THROW(run_eval(m.model, m.tokenizer, bad), std::invalid_argument);
  bad = o;
  bad.context = m.model.config().n_ctx;  // no room for BOS
  EXPECT_THROW(run_eval(m.model, m.tokenizer, bad), std::invalid_argument);
  bad = o;
  bad.n = 0;
  EXPECT_THROW(run_eval(m.model, m.tokenizer, bad), std::invalid_argument);
}

}  // namespace
}  // namespace snapkv::eval
