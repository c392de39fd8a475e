// The engine's side of a cache configuration (kv/core/prefill_plan.h).
#include "snapkv/kv/core/prefill_plan.h"

#include "snapkv/kv/core/fork.h"

namespace snapkv {

PrefillPlan prefill_plan(const CacheConfig& config) {
  PrefillPlan plan;
  plan.window_rows = config.window;
  plan.window_queries = wants_window_queries(config);
  plan.scoring_pass = policy_takes_external_scores(config.policy);
  plan.learned_scores = policy_uses_kvzap(config.policy);
  plan.normalized_scores = config.policy == PolicyKind::kvzip_plus;
  const bool decode_budget = config.decode_budget > 0;
  plan.decode_query_rows = decode_budget ? 1 : 0;
  if (decode_budget) plan.extend_chunk = config.decode_interval;
  plan.extend_window = decode_budget ? config.window : 0;
  plan.reindex = config.policy != PolicyKind::full;
  plan.long_prompt = plan.reindex && config.chunk_mode == ChunkMode::every_chunk;
  plan.head_types =
      head_allocation_duo(config.head_allocation) && config.policy != PolicyKind::full;
  return plan;
}

}  // namespace snapkv
