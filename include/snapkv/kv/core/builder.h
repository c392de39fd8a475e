// Builder: one LayerCache per layer of a model, all from one CacheConfig.
#pragma once

#include <cstddef>
#include <vector>

#include "snapkv/kv/core/config.h"
#include "snapkv/kv/core/layer_cache.h"

namespace snapkv {

struct ModelDims {
  size_t n_layers = 0;
  size_t n_heads = 0;
  size_t n_kv_heads = 0;
  size_t head_dim = 0;
};

// Validates dims (all > 0, n_heads % n_kv_heads == 0) and config; throws std::invalid_argument.
// Layer l gets layer_index l of n_layers (PyramidKV budgets, random-policy seeds).
std::vector<LayerCache> build_caches(const ModelDims& dims, const CacheConfig& config);

// Sum of every layer's stats: bytes, rows_kept and kv_heads summed, tokens_seen from the layers
// (which agree), tokens_kept the mean retained rows per KV head over all layers (layers differ
// under PyramidKV, heads under AdaKV), rounded to nearest.
CacheStats total_stats(const std::vector<LayerCache>& caches);

}  // namespace snapkv
