// PyramidKV layer budgets and AdaKV head selection (kv/core/allocation.h).
#include "snapkv/kv/core/allocation.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "snapkv/kv/core/snapkv_score.h"
#include "snapkv/util/error.h"

namespace snapkv {

size_t allocation_floor(const CacheConfig& config) {
  return std::max<size_t>(1, config.n_sink + (keeps_window(config) ? config.window : 0));
}

std::vector<size_t> layer_budgets(const CacheConfig& config, size_t n_layers, size_t n_tokens) {
  if (n_layers == 0) throw_invalid("allocation", "n_layers must be positive", "0", ">= 1");
  const size_t budget = config.budget;
  std::vector<size_t> out(n_layers, budget);
  if (config.layer_allocation == LayerAllocation::uniform || n_layers == 1 || n_tokens <= budget)
    return out;
  const double b = static_cast<double>(budget), t = static_cast<double>(n_tokens);
  double top = std::max(b / config.pyramid_beta, static_cast<double>(allocation_floor(config)));
  top = std::min(top, b);
  double bottom = 2.0 * b - top;
  if (bottom > t) {
    bottom = t;
    top = 2.0 * b - t;
  }
  const double step = (bottom - top) / static_cast<double>(n_layers - 1);
  size_t assigned = 0;
  for (size_t l = 0; l < n_layers; ++l) {
    const double x = bottom - step * static_cast<double>(l);
    // Guard against x = 41.9999999 when 42 is meant: a relative 1e-9 nudge before flooring.
    out[l] = std::min(static_cast<size_t>(std::floor(x + 1e-9 * std::max(1.0, x))), n_tokens);
    assigned += out[l];
  }
  const size_t total = n_layers * budget;
  // Flooring cannot overshoot the real total except by the nudge; take such rows from the top.
  for (size_t l = n_layers; l-- > 0 && assigned > total;) {
    if (out[l] > allocation_floor(config)) {
      --out[l];
      --assigned;
    }
  }
  size_t left = total > assigned ? total - assigned : 0;
  for (size_t l = 0; l < n_layers && left > 0; ++l) {
    if (out[l] < n_tokens) {
      ++out[l];
      --left;
    }
  }
  SNAPKV_CHECK(left == 0);
  return out;
}

std::vector<std::vector<uint32_t>> ada_select(std::span<const std::vector<float>> scores,
                                              size_t budget, const CacheConfig& config,
                                              std::optional<size_t> total) {
  if (budget < allocation_floor(config)) {
    throw_invalid("allocation", "ada budget below the floor", std::to_string(budget),
                  ">= " + std::to_string(allocation_floor(config)));
  }
  const size_t n_heads = scores.size();
  const auto floor_rows =
      static_cast<size_t>(std::ceil(config.ada_floor * static_cast<double>(budget) - 1e-9));
  std::vector<std::vector<uint32_t>> keep(n_heads);
  std::vector<std::vector<char>> taken(n_heads);
  size_t total_rows = 0, guaranteed = 0;
  for (size_t h = 0; h < n_heads; ++h) {
    const size_t n = scores[h].size();
    total_rows += n;
    const size_t tail = kept_window_rows(config, n);
    const size_t forced = std::min(n, std::min(config.n_sink, n) + tail);
    const size_t g = std::min(n, std::max({forced, floor_rows}));
    // select_rows checks the scores for NaN.
    keep[h] =
        n == 0 ? std::vector<uint32_t>{} : select_rows(scores[h].data(), n, g, config.n_sink, tail);
    taken[h].assign(n, 0);
    for (const uint32_t i : keep[h]) taken[h][i] = 1;
    guaranteed += keep[h].size();
  }
  const size_t target = std::min(total.value_or(n_heads * budget), total_rows);
  SNAPKV_CHECK(guaranteed <= target);
  struct Row {
    float score;
    uint32_t head, index;
  };
  std::vector<Row> rest;
  rest.reserve(total_rows - guaranteed);
  for (size_t h = 0; h < n_heads; ++h) {
    for (size_t i = 0; i < scores[h].size(); ++i) {
      if (!taken[h][i]) {
        rest.push_back({scores[h][i], static_cast<uint32_t>(h), static_cast<uint32_t>(i)});
      }
    }
  }
  const size_t n_more = target - guaranteed;
  const auto better = [](const Row& a, const Row& b) {
    if (a.score != b.score) return a.score > b.score;
    if (a.head != b.head) return a.head < b.head;
    return a.index < b.index;
  };
  std::partial_sort(rest.begin(), rest.begin() + static_cast<std::ptrdiff_t>(n_more), rest.end(),
                    better);
  for (size_t r = 0; r < n_more; ++r) keep[rest[r].head].push_back(rest[r].index);
  for (std::vector<uint32_t>& k : keep) std::sort(k.begin(), k.end());
  return keep;
}

}  // namespace snapkv
