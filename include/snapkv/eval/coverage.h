// Synthetic attention-coverage harness (`snapkv coverage`): how much of the observation window's
// true attention lands on the rows an eviction policy keeps.
//
// Promises:
//  - a documented, seeded generator of rotated keys and window queries with planted structure
//    (make_synthetic); the same spec gives bit-identical data on every platform (own RNG, no
//    std:: distributions);
//  - the reference attention mass of the window over the FULL cache, in double precision
//    (window_attention_mass);
//  - per method and budget: the fraction of that mass on the kept rows and the recall of the
//    planted needle rows, with every policy run through a real LayerCache (one prefill update);
//  - a text table and a JSON report.
// Leaves out: real models (this is SnapKV's offline coverage harness, synthetic by design), the
// inside of any policy (policies are configured through CacheConfig only).
//
// The generator, per KV head h. Channels: pair i = (2i, 2i+1) rotates by pos * base^(-2i/d)
// under RoPE; "fast" channels are [0, d/2), "middle" [d/2, 3d/4), "slow" [3d/4, d). With the
// default base 500000 (Llama 3) the slow channels turn by < 0.25 rad over 4096 tokens, so what
// is planted there is visible at any distance, as real long-range retrieval needs.
//  1. topic drift: a rank-`topic_rank` latent follows an AR(1) walk along positions (correlation
//     length `topic_corr` tokens), mapped into the middle channels: nearby keys are similar.
//  2. token noise: N(0, 1) per channel (0.3 in the slow channels) and a per-token log-normal
//     magnitude (sigma 0.3) on topic + noise.
//  3. outlier channels: `n_outlier` slow channels (whole pairs) hold a nearly constant +-6 in every
//     key, like the massive key channels of real LLMs; they dominate every key's norm.
//  4. sinks: the first `n_sink_tokens` keys carry a slow "sink" direction that every query head
//     looks for (logit boost 9 at position 0, halving per position, x0.7..1.3 per query head).
//  5. needles: `n_needles` spans of `needle_span` tokens at uniform random depths between the sinks
//     and the window carry a slow per-KV-head needle direction (boost 8 at the span's first token,
//     x0.7 per token after it); each query head looks for it with a weight drawn in [0.4, 1.4]
//     (retrieval heads and others). The window's own keys carry 0.3 of it (the question restates
//     what it asks for), which is all the key-as-query proxy can see. `needles` lists the span
//     starts; needle recall counts those.
//  6. planted directions replace part of the token's own content: a sink or needle key has the
//     norm an ordinary key of its magnitude has, so key norm alone does not reveal it (the
//     low-norm-keys-draw-attention effect that knorm relies on is NOT modelled).
//  7. locality: a fixed fast-channel vector shared by keys and queries gives q.k a boost of 3 at
//     distance 0 that RoPE decorrelates with distance (recent tokens draw attention).
//  8. queries (the last `window` positions, `group` heads per KV head): the window position's topic
//     plus fresh latent noise (0.5), the sink, needle and locality components and N(0, 1) noise;
//     correlated with the keys, never equal to them.
//  9. RoPE (adjacent pairs, base `rope_base`) at the true positions: keys at 0..S-1, queries at
//     S-window..S-1.
// Strengths are in logit units (key amplitude x query amplitude = boost x sqrt(head_dim)), so the
// attention pattern does not depend on head_dim.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "snapkv/kv/core/config.h"

namespace snapkv::eval {

struct SyntheticSpec {
  size_t length = 4096;  // S, tokens in the prompt
  size_t n_kv_heads = 2;
  size_t group = 4;  // query heads per KV head (n_heads = n_kv_heads * group)
  size_t head_dim = 64;
  size_t window = 32;  // query rows: the last `window` positions
  size_t n_sink_tokens = 4;
  size_t n_needles = 4;
  size_t needle_span = 4;  // tokens per needle (strongest at the first)
  size_t topic_rank = 8;
  double topic_corr = 64.0;     // tokens
  size_t n_outlier = 4;         // outlier channels (even; whole RoPE pairs)
  double rope_base = 500000.0;  // Llama 3's base
  uint64_t seed = 0;

  // Throws std::invalid_argument "[coverage] <field> ..., got X, expected Y".
  void validate() const;
};

struct SyntheticData {
  SyntheticSpec spec;
  std::vector<float> keys;     // [n_kv_heads][length][head_dim], rotated at positions 0..S-1
  std::vector<float> queries;  // [n_kv_heads * group][window][head_dim], rotated at S-w..S-1
  std::vector<std::vector<int64_t>> needles;  // [n_kv_heads][n_needles] span starts, increasing
};

SyntheticData make_synthetic(const SyntheticSpec& spec);

// The window's attention over the full cache, per KV head: mass[h][j] = mean over the group's
// query heads and the window rows r of softmax_j(q_r . k_j / sqrt(head_dim)), row r (position
// S - w + r) seeing keys j <= S - w + r when causal. Double precision; each mass[h] sums to 1.
// Returns [n_kv_heads][length].
std::vector<std::vector<double>> window_attention_mass(const SyntheticData& data,
                                                       bool causal = true);

// One method of the comparison: a name and the cache configuration that implements it (budget is
// set per run). uses_queries: pass the true window queries to the cache.
struct CoverageMethod {
  std::string name;
  CacheConfig config;
  bool uses_queries = false;
};

// The standard set, derived from `base` (window, n_sink, keep_window, causal, seed, chunk_size):
// snapkv-query, snapkv-query+max7, snapkv-query+avg7, snapkv-proxy, snapkv-proxy+max7,
// snapkv-proxy+avg7, streaming, knorm, chunkkv, random.
std::vector<CoverageMethod> standard_methods(const CacheConfig& base);

struct CoverageResult {
  std::string method;
  size_t length = 0;
  size_t budget = 0;
  size_t kept = 0;                        // rows kept per KV head (min(budget, length))
  double coverage = 0;                    // mean over KV heads of the mass on kept rows, in [0, 1]
  double needle_recall = 0;               // fraction of planted needle rows kept (all heads)
  std::vector<double> coverage_per_head;  // [n_kv_heads]
};

// Runs one method at one budget on `data` (one prefill update of a fresh LayerCache; values are
// the keys). mass: window_attention_mass(data).
CoverageResult evaluate_method(const SyntheticData& data,
                               const std::vector<std::vector<double>>& mass,
                               const CoverageMethod& method, size_t budget);

struct CoverageOptions {
  std::vector<size_t> lengths = {1024, 4096};
  std::vector<size_t> budgets = {64, 128, 256, 512};
  SyntheticSpec spec;  // length is taken from `lengths`; window/seed also drive the policies
  size_t n_sink = 4;   // policies' sinks (the generator's sink tokens are spec.n_sink_tokens)
  bool keep_window = false;
  bool causal = true;
  size_t chunk_size = 8;  // chunkkv

  void validate() const;
};

struct CoverageReport {
  CoverageOptions options;
  std::vector<std::string> methods;     // in table order
  std::vector<CoverageResult> results;  // every (length, method, budget)
  double seconds = 0;
};

// progress(done, total) is called after each (length, method, budget) run.
using CoverageProgress = std::function<void(size_t done, size_t total)>;
CoverageReport run_coverage(const CoverageOptions& options,
                            const CoverageProgress& progress = nullptr);

// One table per length: methods as rows, budgets as columns, "coverage (needle recall)".
std::string coverage_table(const CoverageReport& report);
// Every number and the whole configuration, as a JSON document.
std::string coverage_json(const CoverageReport& report);

}  // namespace snapkv::eval
