// LayerCache::truncated: the first n positions of a cache that keeps every row exactly, copied
// into a new cache. Such a cache (policy full, codec fp16, no decode-time budget) holds row p of
// every KV head for every position p < offset(), each stored as it was computed: the rows below n
// are the rows a cache fed the first n tokens alone holds, and the stores' fp16 rows decode to
// fp32 and encode back to the same bits.
#include <string>
#include <utility>
#include <vector>

#include "kv/core/layer_cache_checks.h"
#include "snapkv/kv/core/layer_cache.h"
#include "snapkv/util/error.h"

namespace snapkv {

using layer_cache_checks::kComponent;

bool LayerCache::truncatable(const CacheConfig& config) {
  return config.policy == PolicyKind::full && config.codec == CodecKind::fp16 &&
         config.decode_budget == 0;
}

LayerCache LayerCache::truncated(size_t n) const {
  if (!truncatable(config_)) {
    throw_invalid(kComponent, "truncate a cache that does not keep every row exactly",
                  "policy " + std::string(to_string(config_.policy)) + ", codec " +
                      std::string(to_string(config_.codec)) + ", decode_budget " +
                      num(config_.decode_budget),
                  "policy full, codec fp16, decode_budget 0");
  }
  if (n > tokens_seen_) {
    throw_invalid(kComponent, "truncate length", num(n), "<= offset() = " + num(tokens_seen_));
  }
  LayerCache copy(dims_, config_, layer_index_, n_layers_);
  std::vector<float> rows(n * dims_.head_dim);  // [n][head_dim]
  for (size_t h = 0; h < dims_.n_kv_heads; ++h) {
    const std::vector<int64_t>& pos = positions_[h];
    // A cache that keeps every row never opens a prompt (nothing waits for end_prompt()) and
    // holds positions 0 .. offset()-1 in every head (so it was never re-indexed: reindex()
    // cannot go below the rows a head holds).
    SNAPKV_CHECK(!prompt_open_ && pos.size() == tokens_seen_ &&
                 key_stores_[h]->rows() == tokens_seen_ &&
                 value_stores_[h]->rows() == tokens_seen_);
    for (size_t i = 0; i < n; ++i) SNAPKV_CHECK(pos[i] == static_cast<int64_t>(i));
    if (n == 0) continue;
    key_stores_[h]->read(rows.data(), 0, n);
    copy.key_stores_[h]->append(rows.data(), n);
    value_stores_[h]->read(rows.data(), 0, n);
    copy.value_stores_[h]->append(rows.data(), n);
    copy.positions_[h].assign(pos.begin(), pos.begin() + static_cast<std::ptrdiff_t>(n));
  }
  copy.tokens_seen_ = n;
  copy.compressions_ = 0;
  copy.rope_ = rope_;
  return copy;
}

}  // namespace snapkv
