// Head types: the streaming heads' rows, the layer's per-head counts and the choice of streaming
// heads (kv/core/head_types.h).
#include "snapkv/kv/core/head_types.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "snapkv/util/error.h"
#include "snapkv/util/text.h"

namespace snapkv {

size_t duo_streaming_rows(const CacheConfig& config, size_t budget) {
  return std::min(budget, config.n_sink + config.duo_recent);
}

std::vector<uint32_t> streaming_keep(size_t n_rows, size_t keep, size_t n_sink) {
  SNAPKV_CHECK(keep <= n_rows);
  const size_t sinks = std::min(n_sink, keep);
  std::vector<uint32_t> out;
  out.reserve(keep);
  for (size_t i = 0; i < sinks; ++i) out.push_back(static_cast<uint32_t>(i));
  for (size_t i = n_rows - (keep - sinks); i < n_rows; ++i) {
    if (i >= sinks) out.push_back(static_cast<uint32_t>(i));
  }
  SNAPKV_CHECK(out.size() == keep);
  return out;
}

DuoBudgets duo_budgets(std::span<const uint8_t> streaming, std::span<const size_t> n_rows,
                       size_t budget, const CacheConfig& config) {
  if (streaming.size() != n_rows.size()) {
    throw_invalid("head_types", "head type mask size", num(streaming.size()),
                  num(n_rows.size()) + " KV heads");
  }
  const size_t n_heads = n_rows.size();
  const size_t s = duo_streaming_rows(config, budget);
  DuoBudgets out;
  out.rows.assign(n_heads, 0);
  size_t streamed = 0, retrieval_rows = 0, n_retrieval = 0;
  for (size_t h = 0; h < n_heads; ++h) {
    if (streaming[h] != 0) {
      out.rows[h] = std::min(n_rows[h], s);
      streamed += out.rows[h];
    } else {
      retrieval_rows += n_rows[h];
      ++n_retrieval;
    }
  }
  if (n_retrieval == 0) return out;
  const size_t total = n_heads * budget;
  out.retrieval_total = std::min(total > streamed ? total - streamed : 0, retrieval_rows);
  // Equal shares, then what a short head cannot hold to the next heads with room, in head order.
  size_t left = out.retrieval_total, share_heads = n_retrieval;
  std::vector<uint8_t> full(n_heads, 0);
  while (left > 0 && share_heads > 0) {
    const size_t each = left / share_heads, extra = left % share_heads;
    size_t given = 0, open = 0;
    for (size_t h = 0, k = 0; h < n_heads; ++h) {
      if (streaming[h] != 0 || full[h] != 0) continue;
      const size_t want = each + (k++ < extra ? 1 : 0);
      const size_t take = std::min(want, n_rows[h] - out.rows[h]);
      out.rows[h] += take;
      given += take;
      if (out.rows[h] == n_rows[h]) {
        full[h] = 1;
      } else {
        ++open;
      }
    }
    left -= given;
    share_heads = open;
    if (given == 0) break;
  }
  SNAPKV_CHECK(left == 0);
  return out;
}

std::vector<uint8_t> streaming_heads(std::span<const float> retrieval_scores, double fraction) {
  if (!(fraction >= 0.0 && fraction <= 1.0)) {
    throw_invalid("head_types", "streaming fraction", std::to_string(fraction), "[0, 1]");
  }
  const size_t n = retrieval_scores.size();
  for (size_t i = 0; i < n; ++i) {
    if (!std::isfinite(retrieval_scores[i])) {
      throw_invalid("head_types", "retrieval score of head " + num(i),
                    std::to_string(retrieval_scores[i]), "a finite number");
    }
  }
  const auto n_stream = static_cast<size_t>(std::llround(fraction * static_cast<double>(n)));
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return retrieval_scores[a] < retrieval_scores[b]; });
  std::vector<uint8_t> mask(n, 0);
  for (size_t i = 0; i < std::min(n_stream, n); ++i) mask[order[i]] = 1;
  return mask;
}

double mass_outside_window(std::span<const float> probs, size_t n_sink, size_t recent) {
  const size_t n = probs.size();
  if (n == 0) return 0.0;
  const size_t q = n - 1;
  const size_t first_recent = q + 1 > recent ? q + 1 - recent : 0;  // (q - recent, q]
  double out = 0.0;
  for (size_t i = n_sink; i < first_recent; ++i) out += probs[i];
  return out;
}

}  // namespace snapkv
