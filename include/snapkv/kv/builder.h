// Builder: one LayerCache per layer of a model, all from one CacheConfig.
#pragma once

#include <cstddef>
#include <vector>

#include "snapkv/kv/config.h"
#include "snapkv/kv/layer_cache.h"

namespace snapkv {

struct ModelDims {
  size_t n_layers = 0;
  size_t n_heads = 0;
  size_t n_kv_heads = 0;
  size_t head_dim = 0;
};

// Validates dims (all > 0, n_heads % n_kv_heads == 0) and config; throws std::invalid_argument.
std::vector<LayerCache> build_caches(const ModelDims& dims, const CacheConfig& config);

// Sum of every layer's stats (tokens_seen/kept taken from the layers, which agree; bytes summed).
CacheStats total_stats(const std::vector<LayerCache>& caches);

}  // namespace snapkv
