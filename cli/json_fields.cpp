// The shared JSON groups of the `snapkv` commands (cli/json_fields.h).
#include "json_fields.h"

#include <algorithm>
#include <cstdint>

#include "snapkv/kv/core/spec_json.h"
#include "snapkv/util/parallel.h"

namespace snapkv::cli {

void add_kv_stats(nlohmann::json& j, const LlamaSession& session) {
  size_t lo = SIZE_MAX, hi = 0;
  for (const LayerCache& cache : session.caches()) {
    for (size_t h = 0; h < cache.dims().n_kv_heads; ++h) {
      lo = std::min(lo, cache.size(h));
      hi = std::max(hi, cache.size(h));
    }
  }
  if (lo == SIZE_MAX) lo = 0;
  const CacheStats stats = session.cache_stats();
  j["kept_rows"] = {{"min", lo}, {"mean", stats.mean_kept()}, {"max", hi}};
  j["kv_bytes"] = stats.bytes_stored;
  j["kv_bytes_full_fp16"] = stats.bytes_full_fp16;
  j["kv_ratio"] = stats.bytes_full_fp16 > 0 ? static_cast<double>(stats.bytes_stored) /
                                                  static_cast<double>(stats.bytes_full_fp16)
                                            : 1.0;
}

nlohmann::json cache_config_json(const CacheOptions& options, const Method& method,
                                 const CacheConfig& config) {
  nlohmann::json j = config_record_json(config);
  j["method"] = method.name;
  const bool budget_given = options.budget_option != nullptr && options.budget_option->count() > 0;
  const std::vector<double> keeps = options.keeps();
  j["keep"] =
      !budget_given && keeps.size() == 1 ? nlohmann::json(keeps.front()) : nlohmann::json(nullptr);
  j["budget"] = config.budget;
  j["prefill_chunk"] = options.prefill_chunk;
  j["threads"] = num_threads();
  return j;
}

nlohmann::json config_json(const nlohmann::json& cache, const nlohmann::json& generation) {
  nlohmann::json j = {{"cache", cache}};
  if (!generation.is_null()) j["generation"] = generation;
  return j;
}

}  // namespace snapkv::cli
