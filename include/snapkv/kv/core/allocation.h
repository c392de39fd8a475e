// Budget allocation, separate from scoring: how many rows each layer and each KV head keeps.
// Any policy that scores rows combines with any allocation (ARCHITECTURE.md).
//
// Layers (CacheConfig::layer_allocation), per-head budgets b_0 .. b_{L-1} for L layers:
//   uniform: b_l = budget.
//   pyramid (PyramidKV, arXiv 2406.02069): b_l decreases linearly with depth and sums to exactly
//     L * budget. Real-valued ends: top = max(budget / pyramid_beta, floor), bottom = 2 budget -
//     top; when bottom exceeds the n_tokens seen so far (a layer cannot keep more than it saw),
//     bottom = n_tokens and top = 2 budget - n_tokens. x_l = bottom - l (bottom - top) / (L - 1);
//     b_l = floor(x_l), and the L * budget - sum b_l rows left over go one each to the first
//     layers that hold fewer than n_tokens, so the result stays non-increasing. With L == 1 or
//     n_tokens <= budget every layer gets budget (nothing binds). floor = allocation_floor().
//     The cap uses tokens seen, which every layer shares, so that the layers' budgets agree.
// Heads (CacheConfig::head_allocation), per layer with per-head budget b:
//   uniform: every head keeps min(b, n_h) rows chosen by the policy.
//   ada (AdaKV, arXiv 2407.11550): the layer keeps min(H b, sum n_h) rows over its H heads. Each
//     head first gets its guaranteed rows: its forced rows (the first n_sink, and the last window
//     with keep_window) filled up by score to g_h = min(n_h, max(forced_h, ceil(ada_floor b)));
//     the remaining slots go to the highest-scoring other rows of all heads (ties: lower head,
//     then earlier row). Kept rows stay in position order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "snapkv/kv/core/config.h"

namespace snapkv {

// The fewest rows a layer's head may be given: max(1, n_sink + (keeps_window(config) ? window :
// 0)); pyramid always keeps the window (config.h), so its deepest layer holds sinks + window.
size_t allocation_floor(const CacheConfig& config);

// Per-head budget of every layer, [n_layers], under config.layer_allocation. n_layers >= 1.
std::vector<size_t> layer_budgets(const CacheConfig& config, size_t n_layers, size_t n_tokens);

// AdaKV selection over the heads of one layer. scores[h] holds head h's scores (higher = keep,
// no NaN; its size is that head's candidate count n_h). budget is the layer's per-head budget
// (>= allocation_floor(config)). Returns, per head, strictly increasing candidate indices.
// `total` replaces the layer's H b rows when given (head types, kv/core/head_types.h: the
// retrieval heads share what the streaming heads leave); it must cover the heads' guaranteed rows.
std::vector<std::vector<uint32_t>> ada_select(std::span<const std::vector<float>> scores,
                                              size_t budget, const CacheConfig& config,
                                              std::optional<size_t> total = std::nullopt);

}  // namespace snapkv
