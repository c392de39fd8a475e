// Model-level evaluation of KV-cache methods on the RULER-style tasks (eval/harness.h).
#include "snapkv/eval/harness.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "snapkv/eval/method_loop.h"
#include "snapkv/eval/run_metrics.h"
#include "snapkv/eval/scoring.h"
#include "snapkv/kv/core/prefill_plan.h"
#include "snapkv/model/sampler.h"
#include "snapkv/util/error.h"
#include "snapkv/util/text.h"
#include "snapkv/util/timer.h"

namespace snapkv::eval {
namespace {

// Running sums of one (task, method, keep) cell: the cache figures (RunMetrics) and the task's.
struct CellSums {
  RunMetrics metrics;
  double score = 0.0, generated = 0.0, decode_s = 0.0;
  size_t decode_steps = 0;
  std::vector<SampleRecord> samples;

  void add(const SampleRun& run, size_t budget_rows, size_t index,
           const std::vector<std::string>& answers) {
    metrics.add(budget_rows, run.after_prompt, run.after_decode, run.prefill_seconds,
                run.prompt_tokens);
    score += run.score;
    generated += static_cast<double>(run.generated.size());
    decode_s += run.decode_seconds;
    decode_steps += run.decode_steps;
    SampleRecord r;
    r.index = index;
    r.score = run.score;
    r.prediction = run.prediction;
    r.answers = answers;
    r.prompt_tokens = run.prompt_tokens;
    r.budget = budget_rows;
    r.kept_rows = run.after_prompt.tokens_kept;
    r.generated_tokens = run.generated.size();
    samples.push_back(std::move(r));
  }

  CellResult finish(std::string task, std::string method, double keep, bool independent) const {
    const RunMetrics& m = metrics;
    CellResult c;
    c.task = std::move(task);
    c.method = std::move(method);
    c.keep = keep;
    c.keep_independent = independent;
    c.n = m.runs;
    const double dn = m.divisor();
    c.accuracy = 100.0 * score / dn;
    c.mean_prompt_tokens = static_cast<double>(m.prefill_tokens) / dn;
    c.mean_budget = m.mean_budget();
    c.mean_kept_rows = m.mean_kept_rows();
    c.mean_kv_bytes = m.mean_kv_bytes();
    c.mean_kv_bytes_full_fp16 = m.mean_kv_bytes_full_fp16();
    c.kv_fraction = m.kv_fraction();
    c.mean_kv_bytes_prompt = m.mean_kv_bytes_prompt();
    c.mean_kv_bytes_full_fp16_prompt = m.mean_kv_bytes_full_fp16_prompt();
    c.kv_fraction_prompt = m.kv_fraction_prompt();
    c.prefill_seconds = m.prefill_seconds;
    c.decode_seconds = decode_s;
    c.prompt_tokens_total = m.prefill_tokens;
    c.decode_steps_total = decode_steps;
    c.prefill_tok_s = m.prefill_tok_s();
    c.decode_tok_s = decode_s > 0 ? static_cast<double>(decode_steps) / decode_s : 0.0;
    c.mean_generated = generated / dn;
    c.samples = samples;
    return c;
  }
};

}  // namespace

std::string_view to_string(Protocol p) {
  return p == Protocol::query_aware ? "query_aware" : "question_agnostic";
}

PromptTokens tokenize_prompt(const Tokenizer& tokenizer, const Sample& sample) {
  const std::vector<int32_t> whole = tokenizer.encode(full_prompt(sample), true);
  const std::vector<int32_t> context = tokenizer.encode(sample.context, true);
  // Longest common prefix: SPM merges rarely cross the context/question boundary, but when they
  // do, the boundary token goes to the question so that the sequence stays the whole prompt's.
  size_t split = 0;
  while (split < whole.size() && split < context.size() && whole[split] == context[split]) ++split;
  if (split == 0 || split >= whole.size()) {
    throw_invalid("eval", "prompt has no question tokens after the context",
                  num(whole.size()) + " tokens, context " + num(split),
                  "a non-empty context and question");
  }
  PromptTokens out;
  out.context.assign(whole.begin(), whole.begin() + static_cast<std::ptrdiff_t>(split));
  out.question.assign(whole.begin() + static_cast<std::ptrdiff_t>(split), whole.end());
  return out;
}

namespace {

// `config`: the cache of a dedicated run, whose plan may allow a prompt past the context
// (kv/core/prefill_plan.h long_prompt); null for a shared prefill, which holds the whole prompt.
void check_prompt(const LlamaModel& model, const PromptTokens& prompt, const RunSettings& settings,
                  const CacheConfig* config) {
  if (prompt.context.empty() || prompt.question.empty()) {
    throw_invalid(
        "eval", "prompt part empty",
        "context " + num(prompt.context.size()) + ", question " + num(prompt.question.size()),
        "both >= 1 token");
  }
  if (settings.max_new_tokens == 0) throw_invalid("eval", "max_new_tokens", "0", ">= 1");
  const size_t n_ctx = model.config().n_ctx;
  const bool long_prompt = config != nullptr && prefill_plan(*config).long_prompt;
  if (prompt.size() + settings.max_new_tokens > n_ctx && !long_prompt) {
    throw_invalid("eval", "prompt + answer longer than the model's context",
                  num(prompt.size()) + " + " + num(settings.max_new_tokens) + " tokens",
                  "<= llama.context_length = " + num(n_ctx));
  }
}

// The part of the prompt that is prefilled (and compressed): all of it when query-aware, the
// context alone when question-agnostic.
std::vector<int32_t> compressed_part(const PromptTokens& prompt, Protocol protocol) {
  if (protocol == Protocol::question_agnostic) return prompt.context;
  std::vector<int32_t> all = prompt.context;
  all.insert(all.end(), prompt.question.begin(), prompt.question.end());
  return all;
}

// check_prompt, then compressed_part.
std::vector<int32_t> checked_part(const LlamaModel& model, const PromptTokens& prompt,
                                  const RunSettings& settings) {
  check_prompt(model, prompt, settings, nullptr);
  return compressed_part(prompt, settings.protocol);
}

// After the prompt's prefill (compressed, prompt ended): appends the question when agnostic,
// records the stats, decodes greedily until EOS, a newline or max_new_tokens, and scores.
// `timer` has run since the prefill began.
void finish_run(LlamaSession& session, std::vector<float> logits, Timer& timer,
                const Tokenizer& tokenizer, const PromptTokens& prompt,
                const std::vector<std::string>& answers, const RunSettings& settings,
                SampleRun& run) {
  run.prompt_tokens = prompt.size();
  run.after_context = session.cache_stats();
  if (settings.protocol == Protocol::question_agnostic) {
    run.compressed_tokens = prompt.context.size();
    logits = session.extend(prompt.question);
  } else {
    run.compressed_tokens = prompt.size();
  }
  run.prefill_seconds += timer.seconds();
  run.after_prompt = session.cache_stats();

  timer.reset();
  std::string text;
  for (size_t step = 0; step < settings.max_new_tokens; ++step) {
    const int32_t token = argmax(logits);
    if (token == tokenizer.eos()) break;
    run.generated.push_back(token);
    text += tokenizer.token_to_piece(token);
    if (text.find('\n') != std::string::npos) break;
    if (step + 1 < settings.max_new_tokens) {
      logits = session.decode(token);
      ++run.decode_steps;
    }
  }
  run.decode_seconds = timer.seconds();
  run.after_decode = session.cache_stats();
  // The raw pieces keep the leading space a dummy-prefix decode would drop; scoring is substring
  // based, so either is fine, and the raw text is what the model wrote after the prompt.
  run.prediction = text.substr(0, text.find('\n'));
  run.score = string_match_all(run.prediction, answers);
}

}  // namespace

SampleRun run_sample(const LlamaModel& model, const Tokenizer& tokenizer,
                     const PromptTokens& prompt, const std::vector<std::string>& answers,
                     const CacheConfig& config, const RunSettings& settings) {
  check_prompt(model, prompt, settings, &config);
  SampleRun run;
  LlamaSession session(model, config,
                       SessionOptions{settings.prefill_chunk, settings.reconstruction});
  Timer timer;
  std::vector<float> logits = session.prefill(compressed_part(prompt, settings.protocol));
  finish_run(session, std::move(logits), timer, tokenizer, prompt, answers, settings, run);
  return run;
}

std::map<ForkKey, size_t> shared_prefill_runs(const std::vector<Method>& methods, size_t n_keeps,
                                              bool share) {
  std::map<ForkKey, size_t> runs;
  if (!share) return runs;
  for (const Method& method : methods) {
    if (const std::optional<ForkKey> key = fork_key(method.config)) {
      runs[*key] += method.uses_keep ? n_keeps : 1;
    }
  }
  return runs;
}

SharedPrefill::SharedPrefill(const LlamaModel& model, std::span<const int32_t> tokens,
                             const CacheConfig& config, const SessionOptions& options)
    : session(model, fork_base_config(config, tokens.size()), options) {
  Timer timer;
  logits = session.prefill_shared(tokens);
  seconds = timer.seconds();
}

SharedPrefill::SharedPrefill(const LlamaModel& model, const PromptTokens& prompt,
                             const CacheConfig& config, const RunSettings& settings)
    : SharedPrefill(model, checked_part(model, prompt, settings), config,
                    SessionOptions{settings.prefill_chunk, settings.reconstruction}) {}

LlamaSession SharedPrefill::fork(const CacheConfig& config, double* fork_seconds) const {
  Timer timer;
  // One pass per kind of reconstruction scores (kvzip's, kvzip_plus's): the pass depends on
  // neither the policy's budget nor its head allocation, only on whether it normalises.
  const PrefillPlan plan = prefill_plan(config);
  std::optional<ReconstructionScores>* pass = nullptr;
  if (plan.scoring_pass && !plan.learned_scores) {
    pass = plan.normalized_scores ? &kvzip_plus : &kvzip;
  }
  const bool reuse = pass != nullptr && pass->has_value();
  LlamaSession out = session.fork(config, reuse ? &**pass : nullptr);
  *fork_seconds = timer.seconds() + (reuse ? (*pass)->seconds : 0.0);
  if (pass != nullptr && !reuse && out.reconstruction() != nullptr) *pass = *out.reconstruction();
  return out;
}

SampleRun run_sample(const SharedPrefill& shared, const Tokenizer& tokenizer,
                     const PromptTokens& prompt, const std::vector<std::string>& answers,
                     const CacheConfig& config, const RunSettings& settings) {
  SampleRun run;
  double fork_seconds = 0.0;
  LlamaSession session = shared.fork(config, &fork_seconds);  // compresses with config's policy
  // What a dedicated run would have spent: the prefill, the compression (kvzip: its pass).
  run.prefill_seconds = shared.seconds + fork_seconds;
  Timer timer;
  finish_run(session, shared.logits, timer, tokenizer, prompt, answers, settings, run);
  return run;
}

EvalResults run_eval(const LlamaModel& model, const Tokenizer& tokenizer,
                     const EvalOptions& options, const ProgressFn& progress) {
  if (options.tasks.empty()) throw_invalid("eval", "no tasks given", "0 tasks", ">= 1 task");
  if (options.methods.empty()) throw_invalid("eval", "no methods given", "0", ">= 1 method");
  if (options.keeps.empty()) throw_invalid("eval", "no kept fractions given", "0", ">= 1 keep");
  if (options.n == 0) throw_invalid("eval", "samples per task", "0", ">= 1");
  // Past the context only when every method's cache can go there (kv/core/prefill_plan.h).
  const bool long_prompts =
      std::all_of(options.methods.begin(), options.methods.end(),
                  [](const Method& m) { return prefill_plan(m.config).long_prompt; });
  if (options.context >= model.config().n_ctx && !long_prompts) {
    throw_invalid("eval", "--context does not fit the model (BOS + prompt + answer)",
                  num(options.context) + " + 1",
                  "<= llama.context_length = " + num(model.config().n_ctx));
  }
  EvalResults results;
  results.options = options;
  Timer wall;

  const size_t total =
      options.tasks.size() * options.n * runs_per_item(options.methods, options.keeps.size());
  size_t done = 0;

  const TokenCounter counter = [&tokenizer](std::string_view text) {
    return tokenizer.encode(text, false).size();
  };
  TaskOptions task_options;
  task_options.context_tokens = options.context;
  task_options.seed = options.seed;
  task_options.split = Split::eval;
  task_options.remove_needles = options.remove_needles;
  const std::vector<int32_t> repeat_prompt = kvzip_repeat_prompt(tokenizer);

  for (Task task : options.tasks) {
    // [method][keep] sums; keep-independent methods use slot 0 only.
    std::vector<std::vector<CellSums>> sums(options.methods.size(),
                                            std::vector<CellSums>(options.keeps.size()));
    for (size_t i = 0; i < options.n; ++i) {
      const Sample sample = generate_sample(task, task_options, i, counter);
      const PromptTokens prompt = tokenize_prompt(tokenizer, sample);
      RunSettings settings;
      settings.protocol = options.protocol;
      settings.prefill_chunk = options.prefill_chunk;
      settings.reconstruction.prompt = repeat_prompt;
      // Reference completion + slack, capped by the room the context leaves after the prompt
      // (BOS + prompt + reference <= context + 1 <= n_ctx by construction of the sample).
      // Past the context (long_prompts) the room is whatever re-indexing leaves: not capped.
      const size_t n_ctx = model.config().n_ctx;
      const size_t room = long_prompts            ? SIZE_MAX
                          : n_ctx > prompt.size() ? n_ctx - prompt.size()
                                                  : 0;
      settings.max_new_tokens = std::min(
          tokenizer.encode(reference_completion(sample), false).size() + options.answer_slack,
          room);
      const size_t compressed =
          options.protocol == Protocol::question_agnostic ? prompt.context.size() : prompt.size();
      // One shared prefill per fork key among the end_of_prompt runs of this sample (when more
      // than one run can use it), built at its first use.
      const auto make_shared = [&](const CacheConfig& config) {
        return std::make_unique<SharedPrefill>(model, prompt, config, settings);
      };
      for_each_method_run(
          options.methods, options.keeps, compressed, options.share_prefill, make_shared,
          [&](size_t m, size_t k, const CacheConfig& config, const SharedPrefill* base) {
            const SampleRun run =
                base != nullptr
                    ? run_sample(*base, tokenizer, prompt, sample.answers, config, settings)
                    : run_sample(model, tokenizer, prompt, sample.answers, config, settings);
            sums[m][k].add(run, config.budget, i, sample.answers);
            ++done;
            if (progress) progress(done, total);
          });
    }
    const std::string task_name_str(task_name(task));
    const size_t first_cell = results.cells.size();
    const std::optional<size_t> full_index = full_method_index(options.methods);
    const CellSums* full = full_index ? &sums[*full_index][0] : nullptr;
    for (size_t m = 0; m < options.methods.size(); ++m) {
      const Method& method = options.methods[m];
      for (size_t k = 0; k < options.keeps.size(); ++k) {
        const CellSums& s = sums[m][method.uses_keep ? k : 0];
        results.cells.push_back(
            s.finish(task_name_str, method.name, options.keeps[k], !method.uses_keep));
      }
    }
    if (full != nullptr) {
      for (size_t c = first_cell; c < results.cells.size(); ++c) {
        CellResult& cell = results.cells[c];
        size_t same = 0;
        for (size_t i = 0; i < cell.samples.size(); ++i) {
          if (cell.samples[i].prediction == full->samples[i].prediction) ++same;
        }
        cell.has_full = true;
        cell.agreement_with_full =
            100.0 * static_cast<double>(same) / static_cast<double>(cell.samples.size());
      }
    }
  }
  results.seconds = wall.seconds();
  return results;
}

std::vector<CellResult> summarize_over_tasks(const EvalResults& results) {
  const EvalOptions& o = results.options;
  std::vector<CellResult> out;
  for (const Method& method : o.methods) {
    for (double keep : o.keeps) {
      CellResult s;
      s.task = "all";
      s.method = method.name;
      s.keep = keep;
      s.keep_independent = !method.uses_keep;
      size_t n_tasks = 0;
      double bytes = 0.0, bytes_full = 0.0;
      for (const CellResult& c : results.cells) {
        if (c.method != method.name || c.keep != keep) continue;
        ++n_tasks;
        const double dn = static_cast<double>(c.n);
        s.n += c.n;
        s.accuracy += c.accuracy;
        s.mean_prompt_tokens += c.mean_prompt_tokens * dn;
        s.mean_budget += c.mean_budget * dn;
        s.mean_kept_rows += c.mean_kept_rows * dn;
        s.mean_kv_bytes += c.mean_kv_bytes * dn;
        s.mean_kv_bytes_full_fp16 += c.mean_kv_bytes_full_fp16 * dn;
        s.mean_generated += c.mean_generated * dn;
        s.has_full = c.has_full;
        s.agreement_with_full += c.agreement_with_full * dn;
        bytes += c.mean_kv_bytes * dn;
        bytes_full += c.mean_kv_bytes_full_fp16 * dn;
        s.mean_kv_bytes_prompt += c.mean_kv_bytes_prompt * dn;
        s.mean_kv_bytes_full_fp16_prompt += c.mean_kv_bytes_full_fp16_prompt * dn;
        s.prefill_seconds += c.prefill_seconds;
        s.decode_seconds += c.decode_seconds;
        s.prompt_tokens_total += c.prompt_tokens_total;
        s.decode_steps_total += c.decode_steps_total;
      }
      if (n_tasks == 0 || s.n == 0) continue;
      const double dn = static_cast<double>(s.n);
      s.accuracy /= static_cast<double>(n_tasks);
      s.mean_prompt_tokens /= dn;
      s.mean_budget /= dn;
      s.mean_kept_rows /= dn;
      s.mean_kv_bytes /= dn;
      s.mean_kv_bytes_full_fp16 /= dn;
      s.mean_generated /= dn;
      s.agreement_with_full /= dn;
      s.kv_fraction = bytes_full > 0 ? bytes / bytes_full : 0.0;
      s.kv_fraction_prompt = s.mean_kv_bytes_full_fp16_prompt > 0
                                 ? s.mean_kv_bytes_prompt / s.mean_kv_bytes_full_fp16_prompt
                                 : 0.0;
      s.mean_kv_bytes_prompt /= dn;
      s.mean_kv_bytes_full_fp16_prompt /= dn;
      s.prefill_tok_s = s.prefill_seconds > 0
                            ? static_cast<double>(s.prompt_tokens_total) / s.prefill_seconds
                            : 0.0;
      s.decode_tok_s =
          s.decode_seconds > 0 ? static_cast<double>(s.decode_steps_total) / s.decode_seconds : 0.0;
      out.push_back(std::move(s));
    }
  }
  return out;
}

}  // namespace snapkv::eval
