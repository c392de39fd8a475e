// The cache figures every evaluation run records, summed over the runs of one (method, keep) cell
// and averaged: the same struct for task cells (harness.h) and perplexity cells (perplexity.h).
//
// Promises:
//  - add() sums one run: its budget, the rows kept and KV bytes right after the compressed part
//    (the prompt or prefix), the KV bytes at the end of the run, its prefill seconds and tokens;
//  - the averages divide by the number of runs added (a cell with none reports zeros);
//    kv_fraction*() is sum bytes_stored / sum bytes_full_fp16 (0 without bytes), prefill_tok_s
//    is prefill tokens / prefill seconds (0 without time).
// Leaves out: the figures only one mode has (scores, NLL, decode times), which the cells add.
#pragma once

#include <cstddef>

#include "snapkv/kv/core/layer_cache.h"

namespace snapkv::eval {

struct RunMetrics {
  size_t runs = 0;
  double budget = 0.0, kept = 0.0;
  double bytes = 0.0, bytes_full = 0.0;                // end of the run
  double bytes_prompt = 0.0, bytes_full_prompt = 0.0;  // after the compressed part
  double prefill_seconds = 0.0;
  size_t prefill_tokens = 0;

  // after_prompt: stats after the compressed part (and, query-agnostic, the appended question);
  // end: stats at the end of the run.
  void add(size_t budget_rows, const CacheStats& after_prompt, const CacheStats& end,
           double prefill_s, size_t prompt_tokens);

  double mean_budget() const { return budget / divisor(); }
  double mean_kept_rows() const { return kept / divisor(); }
  double mean_kv_bytes() const { return bytes / divisor(); }
  double mean_kv_bytes_full_fp16() const { return bytes_full / divisor(); }
  double mean_kv_bytes_prompt() const { return bytes_prompt / divisor(); }
  double mean_kv_bytes_full_fp16_prompt() const { return bytes_full_prompt / divisor(); }
  double kv_fraction() const { return bytes_full > 0 ? bytes / bytes_full : 0.0; }
  double kv_fraction_prompt() const {
    return bytes_full_prompt > 0 ? bytes_prompt / bytes_full_prompt : 0.0;
  }
  double prefill_tok_s() const {
    return prefill_seconds > 0 ? static_cast<double>(prefill_tokens) / prefill_seconds : 0.0;
  }
  // runs as a double, 1 when no run was added.
  double divisor() const { return runs == 0 ? 1.0 : static_cast<double>(runs); }
};

}  // namespace snapkv::eval
