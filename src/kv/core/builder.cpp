// build_caches / total_stats: one LayerCache per model layer from one config.
#include "snapkv/kv/core/builder.h"

#include <string>

#include "snapkv/util/error.h"

namespace snapkv {

std::vector<LayerCache> build_caches(const ModelDims& dims, const CacheConfig& config) {
  if (dims.n_layers == 0) throw_invalid("builder", "n_layers must be positive", "0", ">= 1");
  config.validate();
  std::vector<LayerCache> caches;
  caches.reserve(dims.n_layers);
  for (size_t layer = 0; layer < dims.n_layers; ++layer) {
    // LayerCache checks n_heads, n_kv_heads, head_dim (positive, n_heads % n_kv_heads == 0).
    caches.emplace_back(CacheDims{dims.n_heads, dims.n_kv_heads, dims.head_dim}, config, layer,
                        dims.n_layers);
  }
  return caches;
}

CacheStats total_stats(const std::vector<LayerCache>& caches) {
  CacheStats total;
  for (const LayerCache& cache : caches) {
    const CacheStats s = cache.stats();
    total.bytes_stored += s.bytes_stored;
    total.bytes_full_fp16 += s.bytes_full_fp16;
    total.rows_kept += s.rows_kept;
    total.kv_heads += s.kv_heads;
  }
  if (!caches.empty()) total.tokens_seen = caches.front().stats().tokens_seen;
  if (total.kv_heads > 0)
    total.tokens_kept = (total.rows_kept + total.kv_heads / 2) / total.kv_heads;
  return total;
}

}  // namespace snapkv
