// Perplexity mode of `snapkv eval`: how much does compressing a long prefix cost the next tokens?
//
// Promises:
//  - the text is tokenized once (no BOS) into a stream; window w (w = 0 .. n_windows-1) is
//    BOS + stream[w*L .. w*L + prefix-2] followed by the continuation stream[w*L + prefix-1 ..
//    + continuation], L = prefix - 1 + continuation: windows never overlap;
//  - the prefix (`prefix` tokens including BOS) is prefilled and compressed to
//    budget_for(keep, prefix) rows, then the continuation is appended with LlamaSession::extend
//    (never evicted) and scored: NLL of continuation token j = -log softmax(logits)[token], with
//    the logits of the prefix's last position for j = 0 and of extend's row j-1 after that
//    (log-softmax in double);
//  - per (method, keep): mean NLL over every scored token (nats), perplexity = exp(mean NLL), the
//    difference to the full cache (when "full" is among the methods), mean kept rows after the
//    prefix, and KV bytes / fp16-full-cache bytes both after the prefix and at the end of the run
//    (KIVI quantizes an append's rows only at the next append, so right after a one-shot prefill
//    its rows are still fp16).
//  - filler_text(): deterministic stand-in for held-out natural text (the task generator's varied
//    filler sentences, seeded) for when no text file is given.
// Leaves out: sliding-window strides, batching, printing (report.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "snapkv/eval/harness.h"
#include "snapkv/kv/core/method.h"
#include "snapkv/model/llama.h"
#include "snapkv/model/tokenizer.h"

namespace snapkv::eval {

struct PerplexityOptions {
  size_t prefix = 1024;       // tokens compressed (BOS included)
  size_t continuation = 256;  // tokens scored after the prefix
  size_t n_windows = 4;
  std::vector<Method> methods;
  std::vector<double> keeps;
  size_t prefill_chunk = 512;
  std::string text_source;  // recorded in the JSON (file path or "filler:seed=S")
  CacheConfig defaults;
  bool share_prefill = true;  // one prefix prefill per codec, forked per method (harness.h)
};

struct PerplexityCell {
  std::string method;
  double keep = 0.0;
  bool keep_independent = false;
  size_t n_windows = 0, n_scored = 0;
  double mean_nll = 0.0;    // nats per token
  double perplexity = 0.0;  // exp(mean_nll)
  double delta_nll = 0.0;   // mean_nll - full's mean_nll (0 without full)
  bool has_full = false;
  std::vector<double> window_nll;  // [n_windows] mean NLL of each window
  double mean_budget = 0.0, mean_kept_rows = 0.0;
  double mean_kv_bytes = 0.0, mean_kv_bytes_full_fp16 = 0.0, kv_fraction = 0.0;  // end of the run
  double kv_fraction_prefix = 0.0;  // right after the prefix
  double prefill_tok_s = 0.0;
};

struct PerplexityResults {
  PerplexityOptions options;
  size_t stream_tokens = 0;
  std::vector<PerplexityCell> cells;  // method, then keep (options order)
  double seconds = 0.0;
};

// Mean NLL of `continuation` [n] given the logits that predict its first token
// (first_logits [n_vocab]) and the logits of extend() over continuation[0 .. n-2]
// (rest_logits [n-1][n_vocab]). Throws std::invalid_argument on size mismatches.
double continuation_nll(std::span<const float> first_logits, std::span<const float> rest_logits,
                        std::span<const int32_t> continuation, size_t n_vocab);

// Sum of -log softmax(logits)[token] in double. logits: [n_vocab].
double token_nll(std::span<const float> logits, int32_t token);

// The option checks run_perplexity starts with (methods, keeps, windows, prefix >= 2, prefix +
// continuation within n_ctx): std::invalid_argument. Callers that build a text for the run (the
// filler) call it first, so an impossible request fails before any text is built.
void check_perplexity_options(const PerplexityOptions& options, size_t n_ctx);

// Filler sentences (tasks.h filler_sentence, TaskRng(seed)) joined by spaces until the text holds
// at least `min_tokens` tokens by the tokenizer.
std::string filler_text(const Tokenizer& tokenizer, size_t min_tokens, uint64_t seed);

// Runs every method at every keep on every window of `text`. Throws std::invalid_argument when the
// text is too short for n_windows windows or a window does not fit llama.context_length.
PerplexityResults run_perplexity(const LlamaModel& model, const Tokenizer& tokenizer,
                                 const std::string& text, const PerplexityOptions& options,
                                 const ProgressFn& progress = {});

}  // namespace snapkv::eval
