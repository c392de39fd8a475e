// SnapKV scoring and selection as pure functions over plain arrays, so that each step can be
// tested on its own and reused by the policies (snapkv, chunkkv) and tools (snapkv select,
// coverage harness).
//
//   1. window_scores: how much attention the observation window pays to every key, for one KV head:
//      logits = q . k / sqrt(head_dim) in fp32, softmax over all keys, averaged over the window's
//      rows and over the GQA group's query heads. Window row r sits at key index n_rows - w + r;
//      with `causal` it sees only keys <= that index (masked keys get probability 0).
//   2. pool_scores: optional 1-D smoothing (none | max | avg, odd kernel, stride 1, same length;
//      edges as in ops/pool.h).
//   3. select_rows: the first n_sink rows always, optionally the last n_window rows always, the
//      rest by top score with ties to the earlier row; result ascending, size min(budget, n_rows).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "snapkv/kv/core/config.h"
#include "snapkv/kv/core/policy.h"

namespace snapkv {

// out: [n_rows] scores in [0, 1] (each window row's probabilities sum to 1, so the scores do too).
// keys: [n_rows][head_dim]; queries: [n_group][n_window][head_dim]. When n_window > n_rows only
// the last n_rows query rows are used (the window is clamped to the keys). n_rows, n_group,
// n_window, head_dim >= 1. Logits come from one sgemm_nt (OpenBLAS) per block of query rows.
void window_scores(float* out, const float* keys, size_t n_rows, size_t head_dim,
                   const float* queries, size_t n_group, size_t n_window, bool causal);

// Proxy (engine-agnostic) mode: the last min(window, n_rows) keys act as the queries (n_group 1).
void proxy_window_scores(float* out, const float* keys, size_t n_rows, size_t head_dim,
                         size_t window, bool causal);

// What snapkv_candidate_scores uses without queries (snapkv-proxy, chunkkv and kvzip's fallback):
// the last w = min(window, n_rows) keys act as queries over the n_rows - w candidates *before*
// the window only (softmax over those, averaged over the w rows); the window's own rows score 1,
// the largest a mean of probabilities can be, so they rank first. A key's largest logit is with
// itself (|k|^2) and its neighbours, so proxy_window_scores puts most of the window's mass on the
// window, which is kept anyway, and ranks the rest on what is left (docs/TUNING.md,
// "snapkv-proxy"). n_rows <= window: proxy_window_scores(..., causal = true).
void proxy_candidate_scores(float* out, const float* keys, size_t n_rows, size_t head_dim,
                            size_t window);

// Double-precision reference of window_scores (no BLAS, no fast exp), for tests and tools.
void window_scores_ref(double* out, const float* keys, size_t n_rows, size_t head_dim,
                       const float* queries, size_t n_group, size_t n_window, bool causal);

// out, in: [n] (distinct). kind none copies; kernel odd >= 1.
void pool_scores(float* out, const float* in, size_t n, PoolKind kind, size_t kernel);

// Candidate rows to keep, strictly increasing, size min(budget, n_rows). Forced rows (the first
// min(n_sink, n_rows) and the last min(n_forced_tail, n_rows)) come first; the remaining slots go
// to the highest scores, ties to the smaller index. Requires budget >= the number of forced rows
// and no NaN in scores (std::invalid_argument otherwise). scores: [n_rows]
std::vector<uint32_t> select_rows(const float* scores, size_t n_rows, size_t budget, size_t n_sink,
                                  size_t n_forced_tail);

// The whole scoring step for one policy call: true queries when in.queries is set (the last
// min(in.n_window, config.window) of them), else proxy_candidate_scores; then config.pool.
// config.causal applies to true queries (the proxy's keys see only the rows before the window).
// Keys come from in.keys, or when it is null from in.key_rows a tile at a time (same scores to the
// bit). Returns [n_rows].
std::vector<float> snapkv_candidate_scores(const SelectionInput& in, const CacheConfig& config);

// Rows of the window that are forced: min(config.window, n_rows) when keeps_window(config)
// (keep_window, or layer_allocation pyramid), else 0.
size_t kept_window_rows(const CacheConfig& config, size_t n_rows);

}  // namespace snapkv
