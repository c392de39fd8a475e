// LayerCache: bookkeeping (positions, tokens seen, when to compress) around one key and one value
// RowStore per KV head; the policy decides which rows live, the stores hold them.
#include "snapkv/kv/core/layer_cache.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "kv/core/layer_cache_checks.h"
#include "snapkv/kv/core/allocation.h"
#include "snapkv/kv/core/fork.h"
#include "snapkv/util/error.h"

namespace snapkv {
namespace {

using layer_cache_checks::check_tensor;
using layer_cache_checks::check_values;
using layer_cache_checks::kComponent;

void check_dims(const CacheDims& dims) {
  if (dims.n_heads == 0 || dims.n_kv_heads == 0 || dims.head_dim == 0) {
    throw_invalid(kComponent, "dimensions must be positive",
                  "n_heads " + num(dims.n_heads) + ", n_kv_heads " + num(dims.n_kv_heads) +
                      ", head_dim " + num(dims.head_dim),
                  "all >= 1");
  }
  if (dims.n_heads % dims.n_kv_heads != 0) {
    throw_invalid(kComponent, "n_heads must be a multiple of n_kv_heads",
                  "n_heads " + num(dims.n_heads),
                  "a multiple of n_kv_heads = " + num(dims.n_kv_heads));
  }
}

}  // namespace

double CacheStats::mean_kept() const {
  if (kv_heads == 0) return static_cast<double>(tokens_kept);
  return static_cast<double>(rows_kept) / static_cast<double>(kv_heads);
}

double CacheStats::eviction_ratio() const {
  const double kept = mean_kept();
  if (tokens_seen == 0 || kept == 0.0) return 1.0;
  return static_cast<double>(tokens_seen) / kept;
}

double CacheStats::keep_rate() const {
  if (tokens_seen == 0) return 1.0;
  return mean_kept() / static_cast<double>(tokens_seen);
}

LayerCache::LayerCache(CacheDims dims, const CacheConfig& config, size_t layer_index,
                       size_t n_layers)
    : dims_(dims), config_(config), layer_index_(layer_index), n_layers_(n_layers) {
  check_dims(dims_);
  config_.validate();
  if (n_layers_ != 0 && layer_index_ >= n_layers_) {
    throw_invalid(kComponent, "layer_index out of range",
                  "layer_index " + num(layer_index_) + ", n_layers " + num(n_layers_),
                  "layer_index < n_layers");
  }
  if (config_.layer_allocation == LayerAllocation::pyramid && n_layers_ == 0) {
    throw_invalid(kComponent, "layer_allocation pyramid needs the model's layer count",
                  "n_layers 0 (unknown)", "n_layers >= 1 (build_caches passes it)");
  }
  policy_ = make_policy(config_, layer_index);
  if (config_.decode_budget > 0) {
    CacheConfig decode_config = config_;
    decode_config.budget = config_.decode_budget - config_.decode_interval + 1;
    decode_policy_ = make_policy(decode_config, layer_index);
  }
  for (size_t h = 0; h < dims_.n_kv_heads; ++h) {
    key_stores_.push_back(make_row_store(config_, RowRole::key, dims_.head_dim));
    value_stores_.push_back(make_row_store(config_, RowRole::value, dims_.head_dim));
  }
  positions_.resize(dims_.n_kv_heads);
  last_scores_.resize(dims_.n_kv_heads);
}

LayerCache::~LayerCache() = default;
LayerCache::LayerCache(LayerCache&&) noexcept = default;
LayerCache& LayerCache::operator=(LayerCache&&) noexcept = default;

LayerCache LayerCache::clone() const {
  LayerCache copy(dims_, config_, layer_index_, n_layers_);
  copy.policy_ = policy_->clone();
  for (size_t h = 0; h < dims_.n_kv_heads; ++h) {
    copy.key_stores_[h] = key_stores_[h]->clone();
    copy.value_stores_[h] = value_stores_[h]->clone();
  }
  copy.positions_ = positions_;
  copy.last_scores_ = last_scores_;
  copy.pending_queries_ = pending_queries_;
  copy.pending_window_ = pending_window_;
  copy.tokens_seen_ = tokens_seen_;
  copy.position_shift_ = position_shift_;
  copy.compressions_ = compressions_;
  copy.prompt_open_ = prompt_open_;
  if (decode_policy_) copy.decode_policy_ = decode_policy_->clone();
  copy.recent_queries_ = recent_queries_;
  copy.recent_positions_ = recent_positions_;
  copy.decode_reselections_ = decode_reselections_;
  copy.rope_ = rope_;
  copy.head_types_ = head_types_;
  return copy;
}

void LayerCache::set_rope(const RopeParams& rope) {
  if (rope.n_rot == 0 || rope.n_rot % 2 != 0 || rope.n_rot > dims_.head_dim) {
    throw_invalid(kComponent, "rope n_rot", num(rope.n_rot),
                  "even, > 0 and <= head_dim = " + num(dims_.head_dim));
  }
  rope_ = rope;
}

void LayerCache::set_head_types(std::vector<uint8_t> streaming) {
  if (streaming.size() != dims_.n_kv_heads) {
    throw_invalid(kComponent, "head types size", num(streaming.size()),
                  "n_kv_heads = " + num(dims_.n_kv_heads));
  }
  head_types_ = std::move(streaming);
}

LayerCache LayerCache::fork(const CacheConfig& config, size_t layer_index) const {
  if (config_.chunk_mode != ChunkMode::end_of_prompt || !prompt_open_) {
    throw_invalid(kComponent, "fork needs an open prompt",
                  "chunk_mode " + std::string(to_string(config_.chunk_mode)) +
                      (prompt_open_ ? ", prompt open" : ", prompt not open"),
                  "an end_of_prompt cache with an evicting policy after prefill updates, before "
                  "end_prompt()");
  }
  // The config rules live in kv/core/fork.h; this cache's state says whether it kept window
  // queries.
  if (const auto refusal = fork_refusal(config_, config, pending_window_ > 0)) {
    throw_invalid(kComponent, refusal->what, refusal->got, refusal->expected);
  }
  const bool evicts = config.policy != PolicyKind::full;
  const bool wants_queries = wants_window_queries(config);
  if (n_layers_ != 0 && layer_index >= n_layers_) {
    throw_invalid(kComponent, "fork layer_index out of range", num(layer_index),
                  "< n_layers = " + num(n_layers_));
  }
  LayerCache copy(dims_, config, layer_index, n_layers_);
  for (size_t h = 0; h < dims_.n_kv_heads; ++h) {
    copy.key_stores_[h] = key_stores_[h]->clone();
    copy.value_stores_[h] = value_stores_[h]->clone();
  }
  copy.positions_ = positions_;
  copy.rope_ = rope_;
  copy.head_types_ = head_types_;
  copy.tokens_seen_ = tokens_seen_;
  copy.position_shift_ = position_shift_;
  copy.prompt_open_ = evicts;  // a full-policy cache never opens a prompt
  if (wants_queries) {
    copy.pending_queries_ = pending_queries_;
    copy.pending_window_ = pending_window_;
  }
  return copy;
}

void LayerCache::validate_update(Tensor3 k, Tensor3 v, const Tensor3* q_window,
                                 bool k_values_later) const {
  check_tensor(k, "k", dims_.n_kv_heads, "n_kv_heads", dims_.head_dim);
  check_tensor(v, "v", dims_.n_kv_heads, "n_kv_heads", dims_.head_dim);
  if (v.dim1 != k.dim1) {
    throw_invalid(kComponent, "v token count differs from k", num(v.dim1), "S = " + num(k.dim1));
  }
  if (!k_values_later) check_values(k, "k", true);
  try {
    check_values(v, "v", true);
    if (q_window != nullptr) {
      check_tensor(*q_window, "q_window", dims_.n_heads, "n_heads", dims_.head_dim);
      if (q_window->dim1 > k.dim1) {
        throw_invalid(kComponent, "q_window has more rows than the chunk", num(q_window->dim1),
                      "<= S = " + num(k.dim1));
      }
      check_values(*q_window, "q_window", false);
    }
  } catch (const std::invalid_argument&) {
    if (k_values_later) check_values(k, "k", true);  // a bad k is named first, as without deferral
    throw;
  }
}

void LayerCache::update(Tensor3 k, Tensor3 v, const Tensor3* q_window, UpdateKind kind) {
  const size_t n_new = k.dim1;
  const size_t head_dim = dims_.head_dim;
  const bool decode = kind == UpdateKind::decode || (kind == UpdateKind::automatic && n_new == 1);
  const bool evicts = config_.policy != PolicyKind::full;
  const bool wants_queries = wants_window_queries(config_);
  // every_chunk prefill on fp16 rows with one budget per head: select before storing
  // (select_then_store, which checks k's values as it reads them).
  const bool selects_first = !decode && evicts && config_.chunk_mode == ChunkMode::every_chunk &&
                             config_.codec == CodecKind::fp16 &&
                             config_.head_allocation == HeadAllocation::uniform;
  validate_update(k, v, q_window, selects_first);
  if (!decode && wants_queries && config_.query_source == QuerySource::queries &&
      q_window == nullptr) {
    if (selects_first) check_values(k, "k", true);  // named first, as without the deferral
    throw_invalid(kComponent, "q_window missing on a prefill update", "none",
                  "[n_heads][w][head_dim] queries (query_source = queries)");
  }

  // The last min(w, window) query rows of every head: [n_heads][n_window][head_dim].
  std::vector<float> window_queries;
  size_t n_window = 0;
  if (!decode && wants_queries && q_window != nullptr) {
    const size_t w = q_window->dim1;
    n_window = std::min(w, config_.window);
    window_queries.resize(dims_.n_heads * n_window * head_dim);
    for (size_t h = 0; h < dims_.n_heads; ++h) {
      const float* src = q_window->data + (h * w + (w - n_window)) * head_dim;
      std::copy_n(src, n_window * head_dim, window_queries.data() + h * n_window * head_dim);
    }
  }

  // Generation starts: a prompt held back for end_of_prompt is compressed before the new row
  // (and rows a routing codec still holds are routed).
  if (decode) end_prompt();

  if (selects_first) {
    tokens_seen_ += n_new;
    std::vector<float> saved_queries = std::exchange(pending_queries_, window_queries);
    const size_t saved_window = std::exchange(pending_window_, n_window);
    const SelectOutcome outcome = select_then_store(
        k, v, window_queries.empty() ? nullptr : window_queries.data(), n_window, layer_budget());
    if (outcome == SelectOutcome::selected) return;
    tokens_seen_ -= n_new;  // nothing stored yet: the cache as it was
    pending_queries_ = std::move(saved_queries);
    pending_window_ = saved_window;
    // Out of range: the named error (check_values walks to the first bad value). The chunk fits:
    // k not read yet, checked here before it is stored below like any other.
    check_values(k, "k", true);
    SNAPKV_CHECK(outcome == SelectOutcome::chunk_fits);
  }

  for (size_t h = 0; h < dims_.n_kv_heads; ++h) {
    key_stores_[h]->append(k.data + h * n_new * head_dim, n_new);
    value_stores_[h]->append(v.data + h * n_new * head_dim, n_new);
    for (size_t i = 0; i < n_new; ++i) {
      positions_[h].push_back(static_cast<int64_t>(next_position() + i));
    }
  }
  tokens_seen_ += n_new;
  if (decode) {
    for (size_t h = 0; h < dims_.n_kv_heads; ++h) {  // decode rows reach a routing codec unscored
      key_stores_[h]->settle({});
      value_stores_[h]->settle({});
    }
    if (config_.decode_budget > 0) {
      remember_recent_queries(q_window);
      if (size() > config_.decode_budget) reselect_for_decode();
    }
    return;
  }
  if (!evicts || config_.chunk_mode == ChunkMode::every_chunk) {
    // Rows a routing codec still holds unrouted wait for end_prompt() or the first decode step,
    // which rank them with these window queries (kv/codecs/zipcache.h).
    pending_queries_ = std::move(window_queries);
    pending_window_ = n_window;
    window_queries = pending_queries_;
  }
  if (!evicts) return;

  if (config_.chunk_mode == ChunkMode::every_chunk) {
    if (over_budget()) {
      compress(window_queries.empty() ? nullptr : window_queries.data(), n_window, *policy_,
               layer_budget(), config_.head_allocation);
    }
  } else {
    prompt_open_ = true;
    pending_queries_ = std::move(window_queries);
    pending_window_ = n_window;
  }
}

void LayerCache::end_prompt() {
  if (!prompt_open_) {
    // full policy or every_chunk: nothing to compress; a routing codec may still hold rows.
    for (size_t h = 0; h < dims_.n_kv_heads; ++h) {
      settle_head(h, {}, pending_queries_.empty() ? nullptr : pending_queries_.data(),
                  pending_window_);
    }
    pending_queries_.clear();
    pending_window_ = 0;
    return;
  }
  if (policy_takes_external_scores(config_.policy) && size() > config_.budget) {
    throw_invalid(
        kComponent,
        "policy " + std::string(to_string(config_.policy)) + " cannot score the prompt by itself",
        "end_prompt() with " + num(size()) + " rows over budget " + num(config_.budget),
        "compress_with_scores() with the reconstruction pass's scores");
  }
  prompt_open_ = false;
  if (config_.policy != PolicyKind::full && over_budget()) {
    compress(pending_queries_.empty() ? nullptr : pending_queries_.data(), pending_window_,
             *policy_, layer_budget(), config_.head_allocation);
  }
  for (size_t h = 0; h < dims_.n_kv_heads; ++h) {  // rows a compression did not route
    settle_head(h, {}, pending_queries_.empty() ? nullptr : pending_queries_.data(),
                pending_window_);
  }
  // The prompt's window queries start the decode-time window.
  if (config_.decode_budget > 0 && !pending_queries_.empty()) {
    const size_t w = pending_window_, head_dim = dims_.head_dim;
    std::vector<float> rows(w * dims_.n_heads * head_dim);  // [w][n_heads][head_dim]
    for (size_t h = 0; h < dims_.n_heads; ++h) {
      for (size_t r = 0; r < w; ++r) {
        std::copy_n(pending_queries_.data() + (h * w + r) * head_dim, head_dim,
                    rows.data() + (r * dims_.n_heads + h) * head_dim);
      }
    }
    recent_queries_ = std::move(rows);
    recent_positions_.clear();
    for (size_t r = 0; r < w; ++r) {
      recent_positions_.push_back(static_cast<int64_t>(next_position() - w + r));
    }
  }
  pending_queries_.clear();
  pending_queries_.shrink_to_fit();
  pending_window_ = 0;
}

size_t LayerCache::layer_budget() const {
  return layer_budget_at(tokens_seen_);
}

size_t LayerCache::layer_budget_at(size_t tokens_seen) const {
  if (config_.layer_allocation == LayerAllocation::uniform) return config_.budget;
  return layer_budgets(config_, n_layers_, tokens_seen)[layer_index_];
}

bool LayerCache::over_budget() const {
  const size_t budget = layer_budget();
  if (config_.head_allocation != HeadAllocation::uniform) {  // ragged heads: the layer's rows
    size_t total = 0;
    for (const std::vector<int64_t>& p : positions_) total += p.size();
    return total > dims_.n_kv_heads * budget;
  }
  return size() > budget;
}

size_t LayerCache::size(size_t kv_head) const {
  return positions(kv_head).size();
}

size_t LayerCache::size() const {
  size_t largest = 0;
  for (const std::vector<int64_t>& p : positions_) largest = std::max(largest, p.size());
  return largest;
}

std::span<const int64_t> LayerCache::positions(size_t kv_head) const {
  if (kv_head >= dims_.n_kv_heads) {
    throw_invalid(kComponent, "kv_head out of range", num(kv_head), "< " + num(dims_.n_kv_heads));
  }
  return positions_[kv_head];
}

const RowStore& LayerCache::keys(size_t kv_head) const {
  positions(kv_head);  // range check
  return *key_stores_[kv_head];
}

const RowStore& LayerCache::values(size_t kv_head) const {
  positions(kv_head);
  return *value_stores_[kv_head];
}

void LayerCache::read_keys(size_t kv_head, float* out) const {
  const RowStore& store = keys(kv_head);
  store.read(out, 0, store.rows());
}

void LayerCache::read_values(size_t kv_head, float* out) const {
  const RowStore& store = values(kv_head);
  store.read(out, 0, store.rows());
}

std::span<const float> LayerCache::last_scores(size_t kv_head) const {
  positions(kv_head);
  return last_scores_[kv_head];
}

CacheStats LayerCache::stats() const {
  CacheStats s;
  s.tokens_seen = tokens_seen_;
  for (size_t h = 0; h < dims_.n_kv_heads; ++h) {
    s.bytes_stored += key_stores_[h]->bytes() + value_stores_[h]->bytes();
    s.rows_kept += positions_[h].size();
  }
  s.kv_heads = dims_.n_kv_heads;
  s.tokens_kept = (s.rows_kept + s.kv_heads / 2) / s.kv_heads;  // mean, rounded to nearest
  // K and V, n_kv_heads * head_dim halves (2 bytes) each, per seen token.
  s.bytes_full_fp16 = tokens_seen_ * dims_.n_kv_heads * dims_.head_dim * 2 * sizeof(uint16_t);
  return s;
}

}  // namespace snapkv
