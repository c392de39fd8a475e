// Perplexity of a continuation after a compressed prefix (eval/perplexity.h).
#include "snapkv/eval/perplexity.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <optional>
#include <string>

#include "snapkv/eval/harness.h"
#include "snapkv/eval/method_loop.h"
#include "snapkv/eval/run_metrics.h"
#include "snapkv/eval/tasks.h"
#include "snapkv/util/error.h"
#include "snapkv/util/text.h"
#include "snapkv/util/timer.h"

namespace snapkv::eval {

double token_nll(std::span<const float> logits, int32_t token) {
  if (logits.empty()) throw_invalid("perplexity", "empty logits", "0", ">= 1 value");
  if (token < 0 || static_cast<size_t>(token) >= logits.size()) {
    throw_invalid("perplexity", "token out of range", std::to_string(token),
                  "0.." + num(logits.size() - 1));
  }
  double max_logit = -std::numeric_limits<double>::infinity();
  for (float l : logits) max_logit = std::max(max_logit, static_cast<double>(l));
  double sum = 0.0;
  for (float l : logits) sum += std::exp(static_cast<double>(l) - max_logit);
  return std::log(sum) + max_logit - static_cast<double>(logits[static_cast<size_t>(token)]);
}

double continuation_nll(std::span<const float> first_logits, std::span<const float> rest_logits,
                        std::span<const int32_t> continuation, size_t n_vocab) {
  if (continuation.empty()) throw_invalid("perplexity", "empty continuation", "0", ">= 1 token");
  if (first_logits.size() != n_vocab) {
    throw_invalid("perplexity", "first logits size", num(first_logits.size()), num(n_vocab));
  }
  if (rest_logits.size() != (continuation.size() - 1) * n_vocab) {
    throw_invalid("perplexity", "continuation logits size", num(rest_logits.size()),
                  num(continuation.size() - 1) + " x " + num(n_vocab));
  }
  double total = token_nll(first_logits, continuation[0]);
  for (size_t j = 1; j < continuation.size(); ++j) {
    total += token_nll(rest_logits.subspan((j - 1) * n_vocab, n_vocab), continuation[j]);
  }
  return total / static_cast<double>(continuation.size());
}

void check_perplexity_options(const PerplexityOptions& options, size_t n_ctx) {
  const PerplexityOptions& o = options;
  if (o.methods.empty()) throw_invalid("perplexity", "no methods given", "0", ">= 1 method");
  if (o.keeps.empty()) throw_invalid("perplexity", "no kept fractions given", "0", ">= 1 keep");
  if (o.n_windows == 0) throw_invalid("perplexity", "windows", "0", ">= 1");
  if (o.prefix < 2) throw_invalid("perplexity", "prefix tokens", num(o.prefix), ">= 2");
  if (o.continuation < 1) throw_invalid("perplexity", "continuation tokens", "0", ">= 1");
  if (o.prefix + o.continuation > n_ctx) {
    throw_invalid("perplexity", "prefix + continuation longer than the model's context",
                  num(o.prefix) + " + " + num(o.continuation),
                  "<= llama.context_length = " + num(n_ctx));
  }
  const size_t stride = o.prefix - 1 + o.continuation;
  if (o.n_windows > std::numeric_limits<size_t>::max() / stride) {
    throw_invalid("perplexity", "windows x tokens per window overflows", num(o.n_windows),
                  "<= " + num(std::numeric_limits<size_t>::max() / stride));
  }
}

std::string filler_text(const Tokenizer& tokenizer, size_t min_tokens, uint64_t seed) {
  TaskRng rng(seed);
  std::string text;
  // approx_token_count is additive over space-separated sentences, so the estimate is kept as a
  // running sum (linear time; recounting the whole text per sentence would be quadratic).
  size_t approx = 0;
  while (true) {
    // Grow by an estimate of what is missing, then measure with the real tokenizer.
    while (approx < min_tokens + min_tokens / 8 + 16) {
      if (!text.empty()) text += ' ';
      const std::string sentence = filler_sentence(rng);
      approx += approx_token_count(sentence);
      text += sentence;
    }
    if (tokenizer.encode(text, false).size() >= min_tokens) return text;
    for (size_t i = 0; i < 32 + min_tokens / 16; ++i) text += ' ' + filler_sentence(rng);
    if (tokenizer.encode(text, false).size() >= min_tokens) return text;
  }
}

PerplexityResults run_perplexity(const LlamaModel& model, const Tokenizer& tokenizer,
                                 const std::string& text, const PerplexityOptions& options,
                                 const ProgressFn& progress) {
  check_perplexity_options(options, model.config().n_ctx);
  const PerplexityOptions& o = options;
  const std::vector<int32_t> stream = tokenizer.encode(text, false);
  const size_t stride = o.prefix - 1 + o.continuation;
  if (stream.size() < o.n_windows * stride) {
    throw_invalid("perplexity", "text too short for the windows", num(stream.size()) + " tokens",
                  ">= " + num(o.n_windows) + " x " + num(stride));
  }
  const size_t n_vocab = model.config().n_vocab;
  PerplexityResults results;
  results.options = o;
  results.stream_tokens = stream.size();
  Timer wall;

  const size_t total = runs_per_item(o.methods, o.keeps.size()) * o.n_windows;
  size_t done = 0;

  // Running sums of one (method, keep) cell: the cache figures and the NLL.
  struct Sums {
    RunMetrics metrics;
    double nll = 0.0;
    size_t tokens = 0;
    std::vector<double> window_nll;
  };
  std::vector<std::vector<Sums>> sums(o.methods.size(), std::vector<Sums>(o.keeps.size()));

  const SessionOptions session_options{o.prefill_chunk,
                                       ReconstructionOptions{kvzip_repeat_prompt(tokenizer)}};
  for (size_t w = 0; w < o.n_windows; ++w) {
    std::vector<int32_t> prefix;
    prefix.reserve(o.prefix);
    prefix.push_back(tokenizer.bos());
    const auto first = stream.begin() + static_cast<std::ptrdiff_t>(w * stride);
    prefix.insert(prefix.end(), first, first + static_cast<std::ptrdiff_t>(o.prefix - 1));
    const std::span<const int32_t> continuation(
        &*(first + static_cast<std::ptrdiff_t>(o.prefix - 1)), o.continuation);
    // One shared prefix prefill per fork key when more than one run of the window can fork it.
    const auto make_shared = [&](const CacheConfig& config) {
      return std::make_unique<SharedPrefill>(model, prefix, config, session_options);
    };
    for_each_method_run(
        o.methods, o.keeps, o.prefix, o.share_prefill, make_shared,
        [&](size_t m, size_t k, const CacheConfig& config, const SharedPrefill* base) {
          std::optional<LlamaSession> own;
          std::vector<float> first_logits;
          double prefill_s = 0.0;
          if (base != nullptr) {
            double fork_s = 0.0;
            own.emplace(base->fork(config, &fork_s));
            first_logits = base->logits;
            prefill_s = base->seconds + fork_s;  // what a dedicated prefill spends
          } else {
            own.emplace(model, config, session_options);
            Timer timer;
            first_logits = own->prefill(prefix);
            prefill_s = timer.seconds();
          }
          LlamaSession& session = *own;
          const CacheStats stats = session.cache_stats();
          std::vector<float> rest;
          if (o.continuation > 1) {
            session.extend(continuation.first(o.continuation - 1), &rest);
          }
          const CacheStats end = session.cache_stats();
          const double nll = continuation_nll(first_logits, rest, continuation, n_vocab);
          Sums& s = sums[m][k];
          s.metrics.add(config.budget, stats, end, prefill_s, prefix.size());
          s.nll += nll * static_cast<double>(o.continuation);
          s.tokens += o.continuation;
          s.window_nll.push_back(nll);
          ++done;
          if (progress) progress(done, total);
        });
  }

  const std::optional<size_t> full_index = full_method_index(o.methods);
  const bool has_full = full_index.has_value();
  const double full_nll =
      has_full ? sums[*full_index][0].nll / static_cast<double>(sums[*full_index][0].tokens) : 0.0;
  for (size_t m = 0; m < o.methods.size(); ++m) {
    const Method& method = o.methods[m];
    for (size_t k = 0; k < o.keeps.size(); ++k) {
      const Sums& s = sums[m][method.uses_keep ? k : 0];
      const RunMetrics& r = s.metrics;
      PerplexityCell c;
      c.method = method.name;
      c.keep = o.keeps[k];
      c.keep_independent = !method.uses_keep;
      c.n_windows = r.runs;
      c.n_scored = s.tokens;
      c.mean_nll = s.nll / static_cast<double>(s.tokens);
      c.perplexity = std::exp(c.mean_nll);
      c.has_full = has_full;
      c.delta_nll = has_full ? c.mean_nll - full_nll : 0.0;
      c.window_nll = s.window_nll;
      c.mean_budget = r.mean_budget();
      c.mean_kept_rows = r.mean_kept_rows();
      c.mean_kv_bytes = r.mean_kv_bytes();
      c.mean_kv_bytes_full_fp16 = r.mean_kv_bytes_full_fp16();
      c.kv_fraction = r.kv_fraction();
      c.kv_fraction_prefix = r.kv_fraction_prompt();
      c.prefill_tok_s = r.prefill_tok_s();
      results.cells.push_back(std::move(c));
    }
  }
  results.seconds = wall.seconds();
  return results;
}

}  // namespace snapkv::eval
