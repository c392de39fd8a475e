// LayerCache::restore: a cache rebuilt from persisted parts (kv/file/kvc_file.h).
#include <cmath>
#include <string>

#include "snapkv/kv/core/layer_cache.h"
#include "snapkv/util/error.h"
#include "snapkv/util/text.h"

namespace snapkv {
namespace {

constexpr const char* kComponent = "layer_cache";

void check_decode_window(const CacheDims& dims, const CacheConfig& config, size_t next_position,
                         size_t compressions, const LayerCache::DecodeWindow& w) {
  const size_t n = w.positions.size();
  const size_t limit = config.decode_budget > 0 ? config.window : 0;
  if (n > limit || w.queries.size() != n * dims.n_heads * dims.head_dim) {
    throw_invalid(kComponent, "restore decode window",
                  num(n) + " positions, " + num(w.queries.size()) + " query values",
                  "<= " + num(limit) + " positions (window with decode_budget, else 0), " +
                      "n_heads * head_dim query values each");
  }
  for (size_t i = 0; i < n; ++i) {
    const int64_t p = w.positions[i];
    if (p < 0 || static_cast<size_t>(p) >= next_position || (i > 0 && p <= w.positions[i - 1])) {
      throw_invalid(kComponent, "restore decode window position " + num(i), std::to_string(p),
                    "strictly increasing positions < next position = " + num(next_position));
    }
  }
  for (size_t i = 0; i < w.queries.size(); ++i) {
    if (!std::isfinite(w.queries[i])) {
      throw_invalid(kComponent, "restore decode window query value " + num(i),
                    std::to_string(w.queries[i]), "a finite number");
    }
  }
  if (w.reselections > compressions || (config.decode_budget == 0 && w.reselections != 0)) {
    throw_invalid(kComponent, "restore decode re-selections", num(w.reselections),
                  "<= compressions = " + num(compressions) + ", 0 without decode_budget");
  }
}

}  // namespace

LayerCache LayerCache::restore(CacheDims dims, const CacheConfig& config, size_t layer_index,
                               size_t n_layers, size_t tokens_seen, size_t compressions,
                               std::vector<std::vector<int64_t>> positions,
                               std::vector<std::unique_ptr<RowStore>> keys,
                               std::vector<std::unique_ptr<RowStore>> values, DecodeWindow decode,
                               size_t position_shift) {
  LayerCache cache(dims, config, layer_index, n_layers);  // validates dims, config and indices
  if (position_shift != 0 && position_shift >= tokens_seen) {
    throw_invalid(kComponent, "restore position shift", num(position_shift),
                  "< tokens_seen = " + num(tokens_seen) + " (0 unless re-indexed)");
  }
  const size_t next_position = tokens_seen - position_shift;
  const size_t n_kv = dims.n_kv_heads;
  if (positions.size() != n_kv || keys.size() != n_kv || values.size() != n_kv) {
    throw_invalid(kComponent, "restore head count",
                  num(positions.size()) + " positions, " + num(keys.size()) + " key stores, " +
                      num(values.size()) + " value stores",
                  "n_kv_heads = " + num(n_kv) + " of each");
  }
  const bool ragged = config.head_allocation != HeadAllocation::uniform;
  for (size_t h = 0; h < n_kv; ++h) {
    const std::vector<int64_t>& pos = positions[h];
    const size_t n_rows = pos.size();
    if (!ragged && n_rows != positions[0].size()) {  // uniform heads hold the same row count
      throw_invalid(kComponent, "restore rows of KV head " + num(h), num(pos.size()),
                    "the " + num(positions[0].size()) +
                        " rows of KV head 0 (only head_allocation ada and duo have ragged heads)");
    }
    for (size_t i = 0; i < pos.size(); ++i) {
      const bool in_range = pos[i] >= 0 && static_cast<size_t>(pos[i]) < next_position;
      if (!in_range || (i > 0 && pos[i] <= pos[i - 1])) {
        throw_invalid(kComponent, "restore position " + num(i) + " of KV head " + num(h),
                      std::to_string(pos[i]),
                      "strictly increasing positions < next position = " + num(next_position));
      }
    }
    if (keys[h] == nullptr || values[h] == nullptr || keys[h]->rows() != n_rows ||
        values[h]->rows() != n_rows || keys[h]->head_dim() != dims.head_dim ||
        values[h]->head_dim() != dims.head_dim) {
      throw_invalid(
          kComponent, "restore stores of KV head " + num(h),
          keys[h] == nullptr || values[h] == nullptr
              ? std::string("a null store")
              : num(keys[h]->rows()) + " key rows, " + num(values[h]->rows()) + " value rows",
          num(n_rows) + " rows of head_dim " + num(dims.head_dim) + " each");
    }
  }
  check_decode_window(dims, config, next_position, compressions, decode);
  cache.key_stores_ = std::move(keys);
  cache.value_stores_ = std::move(values);
  cache.positions_ = std::move(positions);
  cache.tokens_seen_ = tokens_seen;
  cache.position_shift_ = position_shift;
  cache.compressions_ = compressions;
  cache.prompt_open_ = false;
  cache.recent_positions_ = std::move(decode.positions);
  cache.recent_queries_ = std::move(decode.queries);
  cache.decode_reselections_ = decode.reselections;
  return cache;
}

LayerCache::DecodeWindow LayerCache::decode_window() const {
  return DecodeWindow{recent_positions_, recent_queries_, decode_reselections_};
}

}  // namespace snapkv
