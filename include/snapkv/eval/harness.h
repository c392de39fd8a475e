// Model-level evaluation of KV-cache methods on the RULER-style tasks (`snapkv eval`).
//
// Promises:
//  - one sample = the task generator's full_prompt(sample) tokenized with the model's tokenizer
//    (BOS first), split into context | question (the question part is question + answer_prefix;
//    the split point is where the tokens of the context alone stop agreeing with the tokens of the
//    whole prompt, so both protocols feed exactly the same token sequence);
//  - query_aware: the whole prompt is prefilled and compressed (the paper's setting);
//    question_agnostic: the context alone is prefilled and compressed, then the question is
//    appended with LlamaSession::extend (never evicted; kvpress's default, the hard case);
//  - greedy decoding (arg-max) until EOS, a newline, or max_new_tokens = tokens of the reference
//    completion + answer_slack; the prediction is the decoded text up to the first newline, scored
//    with RULER's string_match_all (eval/scoring.h);
//  - for each (task, method, keep): accuracy (mean string_match_all x 100), mean budget, mean kept
//    rows at the end of the prompt, KV bytes at the end of the run (after decoding: KIVI keeps an
//    append's rows in its fp16 residual until the next append, so the bytes right after a one-shot
//    prefill are still fp16) and the fp16 full-cache bytes of the same tokens, the same pair at the
//    end of the prompt, prefill tokens/s (prompt tokens / prefill+extend seconds), decode tokens/s;
//  - methods that ignore keep (policy full: full, kivi2, kivi4) run once per sample and their
//    figures are reported identically under every keep (keep_independent = true).
//  - by default (share_prefill) each sample's prompt is prefilled once per codec for all the
//    end_of_prompt runs that can fork it (SharedPrefill below; about 20 runs per prefill with the
//    default methods and keeps): in that mode the forward pass never depends on the policy, so
//    every figure except wall times is identical to running each method separately (tests hold it
//    so).
// Leaves out: printing, JSON, plots (report.h), the perplexity mode (perplexity.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "snapkv/eval/tasks.h"
#include "snapkv/kv/core/fork.h"
#include "snapkv/kv/core/layer_cache.h"
#include "snapkv/kv/core/method.h"
#include "snapkv/model/llama.h"
#include "snapkv/model/tokenizer.h"

namespace snapkv::eval {

enum class Protocol { query_aware, question_agnostic };
std::string_view to_string(Protocol p);

struct PromptTokens {
  std::vector<int32_t> context;   // [n_context] BOS + context: compressed alone when agnostic
  std::vector<int32_t> question;  // [n_question] question + answer prefix
  size_t size() const { return context.size() + question.size(); }
};

// See the file comment. Throws std::invalid_argument when the question part would be empty.
PromptTokens tokenize_prompt(const Tokenizer& tokenizer, const Sample& sample);

struct RunSettings {
  Protocol protocol = Protocol::query_aware;
  size_t max_new_tokens = 16;
  size_t prefill_chunk = 512;
  // Policy kvzip's reconstruction pass (run_eval fills the prompt with kvzip_repeat_prompt()).
  ReconstructionOptions reconstruction = {};
};

struct SampleRun {
  std::string prediction;          // decoded answer, cut at the first newline
  std::vector<int32_t> generated;  // [n_generated] tokens (EOS excluded)
  double score = 0.0;              // string_match_all in [0, 1]
  size_t prompt_tokens = 0;        // context + question tokens
  size_t compressed_tokens = 0;    // tokens that went through compression
  CacheStats after_context;        // agnostic: after the context prefill; aware: == after_prompt
  CacheStats after_prompt;         // after the whole prompt, before decoding
  CacheStats after_decode;         // at the end of the run
  double prefill_seconds = 0.0;    // prefill (+ extend) wall time
  double decode_seconds = 0.0;
  size_t decode_steps = 0;  // forward passes of decode()
};

// Runs one sample with `config` (its budget already set) and scores it against `answers`.
SampleRun run_sample(const LlamaModel& model, const Tokenizer& tokenizer,
                     const PromptTokens& prompt, const std::vector<std::string>& answers,
                     const CacheConfig& config, const RunSettings& settings);

// One prompt prefilled once for several cache configs (LlamaSession::prefill_shared): the whole
// prompt when query-aware, the context alone when question-agnostic. The base session uses
// fork_base_config(config) (kv/core/fork.h): config with policy snapkv (queries auto,
// end_of_prompt) and a budget that evicts nothing, so that it keeps every row and the window's
// queries.
struct SharedPrefill {
  // Checks the prompt as run_sample does, then prefills its compressed part.
  SharedPrefill(const LlamaModel& model, const PromptTokens& prompt, const CacheConfig& config,
                const RunSettings& settings);
  // Prefills `tokens` as they are (perplexity's prefix).
  SharedPrefill(const LlamaModel& model, std::span<const int32_t> tokens, const CacheConfig& config,
                const SessionOptions& options);
  // session.fork(config); for policies kvzip and kvzip_plus the reconstruction pass runs at the
  // first fork of that policy and its scores serve the later ones (any budget, any head
  // allocation: ada-, pyramid-, duo-kvzip share kvzip's pass). *seconds gets the wall time a
  // dedicated run would spend after the prefill: the fork's compression plus, when the scores were
  // reused, the pass's time.
  LlamaSession fork(const CacheConfig& config, double* seconds) const;
  LlamaSession session;                                    // prompt open: only forked
  std::vector<float> logits;                               // [n_vocab] after the prefilled part
  double seconds = 0.0;                                    // prefill wall time
  mutable std::optional<ReconstructionScores> kvzip;       // policy kvzip's pass, once run
  mutable std::optional<ReconstructionScores> kvzip_plus;  // policy kvzip_plus's (normalised)
};
// Runs per fork key (kv/core/fork.h) among `methods` x `n_keeps` kept fractions (policy-full
// methods run once; configs without a key, every_chunk, are left out); empty when !share. A key
// with more than one run is worth a SharedPrefill.
std::map<ForkKey, size_t> shared_prefill_runs(const std::vector<Method>& methods, size_t n_keeps,
                                              bool share);

// run_sample on a fork of a shared prefill: the same result as the dedicated run_sample above, bit
// for bit, for any config with the shared prefill's fork key (kv/core/fork.h can_fork);
// prefill_seconds counts the shared prefill's time plus the fork's compression, i.e. what a
// dedicated run spends. `prompt` and `settings` must be those the prefill was built with.
SampleRun run_sample(const SharedPrefill& shared, const Tokenizer& tokenizer,
                     const PromptTokens& prompt, const std::vector<std::string>& answers,
                     const CacheConfig& config, const RunSettings& settings);

struct EvalOptions {
  std::vector<Task> tasks;
  size_t context = 1024;  // tokens of prompt + reference answer, as the model's tokenizer counts
  size_t n = 100;         // samples per task
  std::vector<Method> methods;
  std::vector<double> keeps;
  Protocol protocol = Protocol::query_aware;
  uint64_t seed = 0;
  size_t prefill_chunk = 512;
  size_t answer_slack = 4;  // max_new_tokens = reference completion tokens + answer_slack, capped
                            // by the context left after the prompt
  bool remove_needles = false;  // control: the same prompts with the needles left out
  // Prefill each sample once per codec for every end_of_prompt method (SharedPrefill) instead of
  // once per method and keep; results are identical (tests hold them so), only faster.
  bool share_prefill = true;
  CacheConfig defaults;  // what the methods were parsed with (recorded in the JSON)
};

struct SampleRecord {
  size_t index = 0;
  double score = 0.0;
  std::string prediction;
  std::vector<std::string> answers;
  size_t prompt_tokens = 0;
  size_t budget = 0;
  size_t kept_rows = 0;  // after the whole prompt
  size_t generated_tokens = 0;
};

struct CellResult {
  std::string task, method;
  double keep = 0.0;
  bool keep_independent = false;
  size_t n = 0;
  double accuracy = 0.0;  // mean string_match_all x 100
  double mean_prompt_tokens = 0.0, mean_budget = 0.0, mean_kept_rows = 0.0;
  double mean_kv_bytes = 0.0, mean_kv_bytes_full_fp16 = 0.0;  // at the end of the run
  double kv_fraction = 0.0;  // sum bytes_stored / sum bytes_full_fp16, end of the run
  // The same at the end of the prompt.
  double mean_kv_bytes_prompt = 0.0, mean_kv_bytes_full_fp16_prompt = 0.0, kv_fraction_prompt = 0.0;
  double prefill_tok_s = 0.0, decode_tok_s = 0.0;
  double prefill_seconds = 0.0, decode_seconds = 0.0;  // totals
  size_t prompt_tokens_total = 0, decode_steps_total = 0;
  double mean_generated = 0.0;
  // % of samples whose prediction equals the full cache's prediction, word for word (only when
  // "full" is among the methods): fidelity to the uncompressed model, meaningful even where the
  // model itself answers wrongly.
  bool has_full = false;
  double agreement_with_full = 0.0;
  std::vector<SampleRecord> samples;
};

struct EvalResults {
  EvalOptions options;
  std::vector<CellResult> cells;  // task-major, then method, then keep (options order)
  double seconds = 0.0;           // wall time of the whole run
};

// Called after every sample run: (runs done, runs total).
using ProgressFn = std::function<void(size_t, size_t)>;

// Generates n samples per task (seeded, eval split), with lengths counted by the model's tokenizer,
// and runs every method at every keep. Throws std::invalid_argument for bad options (no tasks, a
// context that does not fit llama.context_length with the answer, ...).
EvalResults run_eval(const LlamaModel& model, const Tokenizer& tokenizer,
                     const EvalOptions& options, const ProgressFn& progress = {});

// Averages over tasks for one (method, keep): accuracy is the mean of the tasks' accuracies, the
// rest are means weighted by samples. Order: method, then keep (options order).
std::vector<CellResult> summarize_over_tasks(const EvalResults& results);

}  // namespace snapkv::eval
