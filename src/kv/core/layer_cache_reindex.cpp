// LayerCache::reindex: renumbers the retained rows inside the cache (StreamingLLM's positions by
// place in the cache, not in the text) so that an engine can go on past its model's trained
// context; the keys, stored after RoPE, are turned from their old positions to the new ones.
//
// RoPE turns pair i of a key at position p by p * theta_i; turns compose, so the key at p' is the
// key at p turned by (p' - p) * theta_i. ops/rope.h's rope_turn_rows does it with the model's
// layout (NORM / NEOX), frequency factors and linear scaling. The stored fp16 rows are decoded
// exactly, turned in double, and rounded to fp16 again: per pair an error of at most one more
// binary16 rounding (2^-11 of the pair's norm) over the first.
#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kv/core/layer_cache_checks.h"
#include "snapkv/kv/core/layer_cache.h"
#include "snapkv/ops/rope.h"
#include "snapkv/util/error.h"
#include "snapkv/util/fp16.h"

namespace snapkv {

using layer_cache_checks::kComponent;

void LayerCache::check_reindexable(const CacheConfig& config) {
  if (config.codec != CodecKind::fp16) {
    throw_invalid(kComponent,
                  "positions past the context need the keys turned to new positions, and keys "
                  "stored quantized cannot be turned without quantizing them again",
                  "codec " + std::string(to_string(config.codec)),
                  "an fp16 key codec (codec fp16)");
  }
}

void LayerCache::reindex(size_t next) {
  check_reindexable(config_);
  if (!rope_) {
    throw_invalid(kComponent, "reindex without the model's RoPE", "no set_rope()",
                  "set_rope() first");
  }
  if (prompt_open_) {
    throw_invalid(kComponent, "reindex of an open prompt", "prefill rows not compressed yet",
                  "an ended prompt or chunk_mode every_chunk");
  }
  if (next < size() || next > next_position()) {
    throw_invalid(kComponent, "reindex next position", num(next),
                  num(size()) + " (the most rows of a head) .. " + num(next_position()) +
                      " (the next position now)");
  }
  const size_t n_kv = dims_.n_kv_heads, head_dim = dims_.head_dim;

  // Every head's turned keys first, so that a key that leaves the fp16 range changes nothing.
  std::vector<std::vector<float>> turned(n_kv);        // [n_kv][n_h][head_dim]
  std::vector<std::vector<int64_t>> renumbered(n_kv);  // [n_kv][n_h]
  for (size_t h = 0; h < n_kv; ++h) {
    const std::vector<int64_t>& pos = positions_[h];
    const size_t n = pos.size();
    renumbered[h].resize(n);
    std::vector<int64_t> delta(n);  // [n] new - old position, <= 0
    for (size_t i = 0; i < n; ++i) {
      renumbered[h][i] = static_cast<int64_t>(next - n + i);
      delta[i] = renumbered[h][i] - pos[i];
    }
    std::vector<float>& rows = turned[h];
    rows.resize(n * head_dim);
    if (n == 0) continue;
    key_stores_[h]->read(rows.data(), 0, n);
    rope_turn_rows(rows.data(), delta.data(), n, head_dim, *rope_);
    std::vector<float> rounded(rows.size());
    if (!fp16_round_trip_n(rounded.data(), rows.data(), rows.size())) {
      throw_invalid(kComponent, "reindex: a turned key of KV head " + num(h),
                    "a value outside the binary16 range", "|x| <= 65504");
    }
  }

  // The decode-time window: the run of recent queries whose rows sit at the end of every head
  // (the only ones a re-selection can use, LayerCache::reselect_for_decode) is renumbered with
  // them; the older ones can never match a row again and are dropped.
  size_t run = recent_positions_.size();
  for (size_t h = 0; h < n_kv && run > 0; ++h) {
    const std::vector<int64_t>& pos = positions_[h];
    size_t c = 0;
    while (c < run && c < pos.size() &&
           pos[pos.size() - 1 - c] == recent_positions_[recent_positions_.size() - 1 - c]) {
      ++c;
    }
    run = c;
  }
  const size_t dropped = recent_positions_.size() - run;
  std::vector<int64_t> recent(run);
  for (size_t r = 0; r < run; ++r) recent[r] = static_cast<int64_t>(next - run + r);
  std::vector<float> recent_queries(
      recent_queries_.begin() + static_cast<std::ptrdiff_t>(dropped * dims_.n_heads * head_dim),
      recent_queries_.end());

  // Nothing below throws but allocation.
  for (size_t h = 0; h < n_kv; ++h) {
    std::unique_ptr<RowStore> store = make_row_store(config_, RowRole::key, head_dim);
    store->append(turned[h].data(), positions_[h].size());
    key_stores_[h] = std::move(store);
    positions_[h] = std::move(renumbered[h]);
  }
  recent_positions_ = std::move(recent);
  recent_queries_ = std::move(recent_queries);
  position_shift_ = tokens_seen_ - next;
}

}  // namespace snapkv
