// Perplexity of a continuation after a compressed prefix (eval/perplexity.h).
#include "snapkv/eval/perplexity.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "snapkv/eval/harness.h"
#include "snapkv/eval/tasks.h"
#include "snapkv/util/error.h"
#include "snapkv/util/timer.h"

namespace snapkv::eval {
namespace {

std::string num(size_t v) {
  return std::to_string(v);
}

}  // namespace

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
  // running sum (linear time; recounting the whole text per sentence was quadratic).
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

  size_t total = 0;
  for (const Method& m : o.methods) total += (m.uses_keep ? o.keeps.size() : 1) * o.n_windows;
  size_t done = 0;

  struct Sums {
    double nll = 0.0, budget = 0.0, kept = 0.0, bytes = 0.0, bytes_full = 0.0, prefill_s = 0.0;
    double bytes_prefix = 0.0, bytes_full_prefix = 0.0;
    size_t tokens = 0, windows = 0, prefill_tokens = 0;
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
    // One shared prefix prefill per codec when more than one run of the window can fork it.
    const std::map<std::string, size_t> runs_per_key =
        shared_prefill_runs(o.methods, o.keeps.size(), o.share_prefill);
    std::map<std::string, std::unique_ptr<SharedPrefill>> shared;
    for (size_t m = 0; m < o.methods.size(); ++m) {
      const Method& method = o.methods[m];
      const size_t n_keeps = method.uses_keep ? o.keeps.size() : 1;
      for (size_t k = 0; k < n_keeps; ++k) {
        CacheConfig config = method.config;
        config.budget = method.uses_keep ? budget_for(o.keeps[k], o.prefix, config)
                                         : std::max(o.prefix, config.budget);
        const std::string key = shared_prefill_key(config);
        const auto it = runs_per_key.find(key);
        std::optional<LlamaSession> own;
        std::vector<float> first_logits;
        double prefill_s = 0.0;
        if (it != runs_per_key.end() && it->second > 1) {
          std::unique_ptr<SharedPrefill>& base = shared[key];
          if (!base) base = std::make_unique<SharedPrefill>(model, prefix, config, session_options);
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
        s.nll += nll * static_cast<double>(o.continuation);
        s.tokens += o.continuation;
        s.windows += 1;
        s.window_nll.push_back(nll);
        s.budget += static_cast<double>(config.budget);
        s.kept += static_cast<double>(stats.tokens_kept);
        s.bytes += static_cast<double>(end.bytes_stored);
        s.bytes_full += static_cast<double>(end.bytes_full_fp16);
        s.bytes_prefix += static_cast<double>(stats.bytes_stored);
        s.bytes_full_prefix += static_cast<double>(stats.bytes_full_fp16);
        s.prefill_s += prefill_s;
        s.prefill_tokens += prefix.size();
        ++done;
        if (progress) progress(done, total);
      }
    }
  }

  double full_nll = 0.0;
  bool has_full = false;
  for (size_t m = 0; m < o.methods.size(); ++m) {
    if (o.methods[m].name == "full") {
      full_nll = sums[m][0].nll / static_cast<double>(sums[m][0].tokens);
      has_full = true;
    }
  }
  for (size_t m = 0; m < o.methods.size(); ++m) {
    const Method& method = o.methods[m];
    for (size_t k = 0; k < o.keeps.size(); ++k) {
      const Sums& s = sums[m][method.uses_keep ? k : 0];
      PerplexityCell c;
      c.method = method.name;
      c.keep = o.keeps[k];
      c.keep_independent = !method.uses_keep;
      c.n_windows = s.windows;
      c.n_scored = s.tokens;
      const double dw = static_cast<double>(s.windows);
      c.mean_nll = s.nll / static_cast<double>(s.tokens);
      c.perplexity = std::exp(c.mean_nll);
      c.has_full = has_full;
      c.delta_nll = has_full ? c.mean_nll - full_nll : 0.0;
      c.window_nll = s.window_nll;
      c.mean_budget = s.budget / dw;
      c.mean_kept_rows = s.kept / dw;
      c.mean_kv_bytes = s.bytes / dw;
      c.mean_kv_bytes_full_fp16 = s.bytes_full / dw;
      c.kv_fraction = s.bytes_full > 0 ? s.bytes / s.bytes_full : 0.0;
      c.kv_fraction_prefix = s.bytes_full_prefix > 0 ? s.bytes_prefix / s.bytes_full_prefix : 0.0;
      c.prefill_tok_s = s.prefill_s > 0 ? static_cast<double>(s.prefill_tokens) / s.prefill_s : 0.0;
      results.cells.push_back(std::move(c));
    }
  }
  results.seconds = wall.seconds();
  return results;
}

}  // namespace snapkv::eval
