// What a cache needs from the engine that fills it, so that an engine drives any policy without
// knowing which one it is: how to cut the prompt into forwards, which queries to hand over, and
// whether a model-driven scoring pass (KVzip's context reconstruction) must end the prompt
// instead of LayerCache::end_prompt().
//
//   const PrefillPlan plan = prefill_plan(config);
//   // last prefill chunk extended back to hold plan.window_rows positions; q_window passed when
//   // plan.window_queries; after the prompt: plan.scoring_pass ? run the pass and hand its scores
//   // to compress_with_scores : end_prompt(); each decode step passes plan.decode_query_rows
//   // queries; extend() runs forwards of at most plan.extend_chunk tokens; a forward that would
//   // pass the context re-indexes the caches first when plan.reindex (plan.long_prompt: also
//   // during the prompt).
// Leaves out: running anything (the engine does; model/llama.h).
#pragma once

#include <cstddef>

#include "snapkv/kv/core/config.h"

namespace snapkv {

struct PrefillPlan {
  // The prompt's last window_rows positions are the observation window: the engine's last
  // prefill forward starts early enough to hold them.
  size_t window_rows = 0;
  // Whether prefill updates should carry the window's real queries (q_window).
  bool window_queries = false;
  // Whether the prompt ends with a model-driven scoring pass whose per-row scores go to
  // LayerCache::compress_with_scores, instead of LayerCache::end_prompt().
  bool scoring_pass = false;
  // With scoring_pass: the scores come from the model's learned scorer (policy kvzap, a few
  // operations per cached row) rather than KVzip's context-reconstruction pass.
  bool learned_scores = false;
  // With scoring_pass and not learned_scores: KVzip+'s normalised reconstruction scores
  // (policy kvzip_plus) rather than plain attention probabilities.
  bool normalized_scores = false;
  // Query rows each decode step hands to the cache (a decode-time budget re-selects with them).
  size_t decode_query_rows = 0;
  // Tokens per forward when a continuation is appended (extend); re-selection under a decode-time
  // budget happens between forwards, as during step-by-step generation. SIZE_MAX = no limit.
  size_t extend_chunk = static_cast<size_t>(-1);
  // Query rows of an extend forward of s tokens handed to the cache: min(extend_window, s).
  size_t extend_window = 0;
  // Whether the engine may re-index the cache (LayerCache::reindex) when the next forward would
  // reach the model's trained context: an evicting policy, whose retained rows stay bounded by
  // its budget. The full cache never is: it stops at the context.
  bool reindex = false;
  // Whether a prompt may be longer than the context: reindex, and the budget enforced at every
  // prefill chunk (chunk_mode every_chunk), so the rows held during the prompt stay bounded too.
  bool long_prompt = false;
  // Whether the cache splits its KV heads into streaming and retrieval ones and so needs the
  // model's head types (LayerCache::set_head_types): a duo head allocation on a policy that
  // selects rows (the full policy keeps every row, so head types change nothing there).
  bool head_types = false;
};

PrefillPlan prefill_plan(const CacheConfig& config);

}  // namespace snapkv
