// LayerCache's compression: a policy's selection applied to every head (compress), the kvzip
// entry with external scores, the decode-time re-selection over the newest queries, and the
// routing of rows a routing codec still holds (settle_head).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kv/core/layer_cache_checks.h"
#include "kv/core/scratch.h"
#include "snapkv/kv/core/allocation.h"
#include "snapkv/kv/core/head_types.h"
#include "snapkv/kv/core/layer_cache.h"
#include "snapkv/kv/core/snapkv_score.h"
#include "snapkv/util/error.h"
#include "snapkv/util/parallel.h"

namespace snapkv {
namespace {

using layer_cache_checks::kComponent;

}  // namespace

void LayerCache::compress_with_scores(std::span<const float> scores) {
  if (!policy_takes_external_scores(config_.policy)) {
    throw_invalid(kComponent, "compress_with_scores needs a policy that takes external scores",
                  "policy " + std::string(to_string(config_.policy)),
                  "kvzip|kvzip_plus|kvzap|kvzap_snapkv");
  }
  if (!prompt_open_) {
    throw_invalid(kComponent, "compress_with_scores needs an open prompt", "prompt not open",
                  "prefill updates in end_of_prompt mode, before end_prompt()");
  }
  const size_t n_rows = size();
  if (scores.size() != dims_.n_kv_heads * n_rows) {
    throw_invalid(kComponent, "external scores size", num(scores.size()),
                  "n_kv_heads * size() = " + num(dims_.n_kv_heads) + " * " + num(n_rows));
  }
  for (size_t i = 0; i < scores.size(); ++i) {
    if (!std::isfinite(scores[i])) {
      throw_invalid(kComponent,
                    "external score at [" + num(i / n_rows) + "][" + num(i % n_rows) + "]",
                    std::to_string(scores[i]), "a finite number");
    }
  }
  prompt_open_ = false;
  if (over_budget()) {  // the window's queries, when kept, for a policy that mixes them in
    compress(pending_queries_.empty() ? nullptr : pending_queries_.data(), pending_window_,
             *policy_, layer_budget(), config_.head_allocation, scores.data());
  }
  pending_queries_.clear();
  pending_queries_.shrink_to_fit();
  pending_window_ = 0;
}

void LayerCache::remember_recent_queries(const Tensor3* q_window) {
  if (q_window == nullptr) return;
  const size_t w = q_window->dim1, head_dim = dims_.head_dim, n_heads = dims_.n_heads;
  for (size_t r = 0; r < w; ++r) {
    for (size_t h = 0; h < n_heads; ++h) {
      const float* src = q_window->data + (h * w + r) * head_dim;
      recent_queries_.insert(recent_queries_.end(), src, src + head_dim);
    }
    // q_window holds the chunk's last w rows: the newest positions.
    recent_positions_.push_back(static_cast<int64_t>(next_position() - w + r));
  }
  if (recent_positions_.size() > config_.window) {
    const size_t drop = recent_positions_.size() - config_.window;
    recent_positions_.erase(recent_positions_.begin(),
                            recent_positions_.begin() + static_cast<std::ptrdiff_t>(drop));
    recent_queries_.erase(
        recent_queries_.begin(),
        recent_queries_.begin() + static_cast<std::ptrdiff_t>(drop * n_heads * head_dim));
  }
}

void LayerCache::reselect_for_decode() {
  // Window = the longest run of recent queries whose rows sit, in order, at the end of every head
  // (the policy reads window row r as the query of candidate n_rows - n_window + r).
  size_t n_window = recent_positions_.size();
  for (size_t h = 0; h < dims_.n_kv_heads && n_window > 0; ++h) {
    const std::vector<int64_t>& pos = positions_[h];
    size_t c = 0;
    while (c < n_window && c < pos.size() &&
           pos[pos.size() - 1 - c] == recent_positions_[recent_positions_.size() - 1 - c]) {
      ++c;
    }
    n_window = c;
  }
  std::vector<float> queries;  // [n_heads][n_window][head_dim]
  if (n_window > 0) {
    const size_t head_dim = dims_.head_dim, n_heads = dims_.n_heads;
    const size_t first = recent_positions_.size() - n_window;
    queries.resize(n_heads * n_window * head_dim);
    for (size_t h = 0; h < n_heads; ++h) {
      for (size_t r = 0; r < n_window; ++r) {
        std::copy_n(recent_queries_.data() + ((first + r) * n_heads + h) * head_dim, head_dim,
                    queries.data() + (h * n_window + r) * head_dim);
      }
    }
  }
  compress(queries.empty() ? nullptr : queries.data(), n_window, *decode_policy_,
           config_.decode_budget - config_.decode_interval + 1, HeadAllocation::uniform);
  ++decode_reselections_;
}

void LayerCache::compress(const float* queries, size_t n_window, EvictionPolicy& policy,
                          size_t budget, HeadAllocation allocation, const float* external) {
  const size_t n_kv = dims_.n_kv_heads;
  const size_t head_dim = dims_.head_dim;
  const size_t n_group = dims_.n_heads / n_kv;
  const bool ada = head_allocation_ada(allocation), duo = head_allocation_duo(allocation);
  // Head types: each head's row count (streaming heads' fixed, retrieval heads' share).
  std::vector<size_t> head_budget(n_kv, budget);
  DuoBudgets duo_rows;
  if (duo) {
    if (head_types_.size() != n_kv) {
      throw_invalid(
          kComponent,
          "head_allocation " + std::string(to_string(allocation)) + " needs the model's head types",
          "none set",
          "set_head_types() with one type per KV head (the engine's head-types sidecar)");
    }
    std::vector<size_t> n_rows(n_kv);
    for (size_t h = 0; h < n_kv; ++h) n_rows[h] = key_stores_[h]->rows();
    duo_rows = duo_budgets(head_types_, n_rows, budget, config_);
    head_budget = duo_rows.rows;
  }
  const auto streams = [&](size_t h) { return duo && head_types_[h] != 0; };
  std::vector<SelectionResult> results(n_kv);
  parallel_for(n_kv, [&](size_t h) {
    const size_t n_rows = key_stores_[h]->rows();
    if (n_rows == 0) return;  // an empty head (ada) has nothing to score
    if (streams(h)) {
      results[h].keep = streaming_keep(n_rows, head_budget[h], config_.n_sink);
      return;
    }
    // fp16 rows are read a tile at a time by a policy that can take them so (snapkv): the scoring
    // converts each tile while it is in cache instead of reading a whole fp32 copy back.
    const RowStore& key_store = *key_stores_[h];
    const KeyRowReader read_keys = [&key_store](float* out, size_t begin, size_t end) {
      key_store.read(out, begin, end);
    };
    const bool tiles = policy.reads_key_tiles() && config_.codec == CodecKind::fp16;
    float* keys = nullptr;  // [n_rows][head_dim]
    if (!tiles) {
      keys = scratch_floats(ScratchSlot::keys, n_rows * head_dim);
      key_store.read(keys, 0, n_rows);
    }
    SelectionInput in;
    in.kv_head = h;
    in.head_dim = head_dim;
    in.n_rows = n_rows;
    in.keys = keys;
    in.key_rows = tiles ? &read_keys : nullptr;
    in.positions = positions_[h].data();
    in.budget = head_budget[h];
    in.rope = rope_ ? &*rope_ : nullptr;
    if (policy.needs_values()) {
      float* values = scratch_floats(ScratchSlot::values, n_rows * head_dim);  // [n_rows][head_dim]
      value_stores_[h]->read(values, 0, n_rows);
      in.values = values;
    }
    if (queries != nullptr) {
      in.queries = queries + h * n_group * n_window * head_dim;  // this KV head's group
      in.n_group = n_group;
      in.n_window = n_window;
    }
    if (external != nullptr) in.external_scores = external + h * n_rows;
    if (ada) {
      results[h].scores = policy.score(in);
    } else if (n_rows > head_budget[h]) {
      results[h] = policy.select(in);
    } else {  // a head already within the budget (ragged heads, decode re-selection) keeps all
      results[h].keep.resize(n_rows);
      for (size_t i = 0; i < n_rows; ++i) results[h].keep[i] = static_cast<uint32_t>(i);
    }
  });
  if (ada) {  // over every head, or over the retrieval heads with what the streaming ones leave
    std::vector<size_t> heads;
    for (size_t h = 0; h < n_kv; ++h) {
      if (!streams(h)) heads.push_back(h);
    }
    std::vector<std::vector<float>> scores(heads.size());
    for (size_t i = 0; i < heads.size(); ++i) scores[i] = results[heads[i]].scores;
    std::vector<std::vector<uint32_t>> keep =
        ada_select(scores, budget, config_,
                   duo ? std::optional<size_t>(duo_rows.retrieval_total) : std::nullopt);
    for (size_t i = 0; i < heads.size(); ++i) results[heads[i]].keep = std::move(keep[i]);
  }
  size_t total_before = 0, total_after = 0;
  std::vector<size_t> total_rows(n_kv);
  for (size_t h = 0; h < n_kv; ++h) total_rows[h] = positions_[h].size();
  for (size_t h = 0; h < n_kv; ++h) {
    const std::vector<uint32_t>& keep = results[h].keep;
    total_before += positions_[h].size();
    total_after += keep.size();
    if (!ada) SNAPKV_CHECK(keep.size() == std::min(head_budget[h], positions_[h].size()));
    key_stores_[h]->retain(keep);
    value_stores_[h]->retain(keep);
    std::vector<int64_t> kept_positions(keep.size());
    for (size_t i = 0; i < keep.size(); ++i) kept_positions[i] = positions_[h][keep[i]];
    positions_[h] = std::move(kept_positions);
    std::vector<float> kept_scores;  // the policy's scores of the kept rows, for routing codecs
    if (results[h].scores.size() == total_rows[h]) {
      kept_scores.resize(keep.size());
      for (size_t i = 0; i < keep.size(); ++i) kept_scores[i] = results[h].scores[keep[i]];
    }
    settle_head(h, kept_scores, queries, n_window);
    last_scores_[h] = std::move(results[h].scores);
  }
  if (ada && !duo) SNAPKV_CHECK(total_after == std::min(n_kv * budget, total_before));
  ++compressions_;
}

void LayerCache::settle_head(size_t h, std::span<const float> scores, const float* queries,
                             size_t n_window) {
  RowStore& keys = *key_stores_[h];
  RowStore& values = *value_stores_[h];
  if (keys.unsettled_rows() == 0 && values.unsettled_rows() == 0) return;
  const size_t n_rows = keys.rows(), head_dim = dims_.head_dim;
  std::vector<float> saliency(scores.begin(), scores.end());
  if (saliency.size() !=
      n_rows) {  // no policy scores: SnapKV's window attention (kv/codecs/zipcache.h)
    std::vector<float> rows(n_rows * head_dim);  // [n_rows][head_dim]
    keys.read(rows.data(), 0, n_rows);
    saliency.assign(n_rows, 0.0f);
    const size_t n_group = dims_.n_heads / dims_.n_kv_heads;
    if (queries != nullptr && n_window > 0) {
      window_scores(saliency.data(), rows.data(), n_rows, head_dim,
                    queries + h * n_group * n_window * head_dim, n_group, n_window, config_.causal);
    } else {
      proxy_window_scores(saliency.data(), rows.data(), n_rows, head_dim, config_.window,
                          config_.causal);
    }
  }
  keys.settle(saliency);
  values.settle(saliency);
}
}  // namespace snapkv
