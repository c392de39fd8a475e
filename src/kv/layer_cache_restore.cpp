// LayerCache::restore: a cache rebuilt from persisted parts (kv/kvc_file.h). Kept apart from
// layer_cache.cpp so that the cache's main file stays about updates and attention.
#include <string>

#include "snapkv/kv/layer_cache.h"
#include "snapkv/util/error.h"

namespace snapkv {
namespace {

constexpr const char* kComponent = "layer_cache";

std::string num(size_t v) {
  return std::to_string(v);
}

}  // namespace

LayerCache LayerCache::restore(CacheDims dims, const CacheConfig& config, size_t layer_index,
                               size_t tokens_seen, size_t compressions,
                               std::vector<std::vector<int64_t>> positions,
                               std::vector<std::unique_ptr<RowStore>> keys,
                               std::vector<std::unique_ptr<RowStore>> values) {
  LayerCache cache(dims, config, layer_index);  // validates dims and config
  const size_t n_kv = dims.n_kv_heads;
  if (positions.size() != n_kv || keys.size() != n_kv || values.size() != n_kv) {
    throw_invalid(kComponent, "restore head count",
                  num(positions.size()) + " positions, " + num(keys.size()) + " key stores, " +
                      num(values.size()) + " value stores",
                  "n_kv_heads = " + num(n_kv) + " of each");
  }
  const size_t n_rows = positions[0].size();
  for (size_t h = 0; h < n_kv; ++h) {
    const std::vector<int64_t>& pos = positions[h];
    if (pos.size() != n_rows) {  // LayerCache keeps the same row count in every head
      throw_invalid(kComponent, "restore rows of KV head " + num(h), num(pos.size()),
                    "the " + num(n_rows) + " rows of KV head 0");
    }
    for (size_t i = 0; i < pos.size(); ++i) {
      const bool in_range = pos[i] >= 0 && static_cast<size_t>(pos[i]) < tokens_seen;
      if (!in_range || (i > 0 && pos[i] <= pos[i - 1])) {
        throw_invalid(kComponent, "restore position " + num(i) + " of KV head " + num(h),
                      std::to_string(pos[i]),
                      "strictly increasing positions < tokens_seen = " + num(tokens_seen));
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
  cache.key_stores_ = std::move(keys);
  cache.value_stores_ = std::move(values);
  cache.positions_ = std::move(positions);
  cache.tokens_seen_ = tokens_seen;
  cache.compressions_ = compressions;
  cache.prompt_open_ = false;
  return cache;
}

}  // namespace snapkv
