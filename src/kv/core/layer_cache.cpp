// LayerCache: bookkeeping (positions, tokens seen, when to compress) around one key and one value
// RowStore per KV head; the policy decides which rows live, the stores hold them.
#include "snapkv/kv/core/layer_cache.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <utility>

#include "kv/core/scratch.h"
#include "kv/core/span_attention.h"
#include "snapkv/kv/core/allocation.h"
#include "snapkv/kv/core/fork.h"
#include "snapkv/kv/core/snapkv_score.h"
#include "snapkv/ops/dot.h"
#include "snapkv/ops/softmax.h"
#include "snapkv/util/error.h"
#include "snapkv/util/fp16.h"
#include "snapkv/util/parallel.h"
#include "snapkv/util/text.h"

namespace snapkv {
namespace {

constexpr const char* kComponent = "layer_cache";
// Query rows per attention work unit (bounds the logits scratch to kAttendBlock * rows floats).
constexpr size_t kAttendBlock = 32;

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

void check_tensor(const Tensor3& t, const char* name, size_t dim0, const char* dim0_name,
                  size_t head_dim) {
  if (t.dim0 != dim0) {
    throw_invalid(kComponent, std::string(name) + " head count", num(t.dim0),
                  std::string(dim0_name) + " = " + num(dim0));
  }
  if (t.dim2 != head_dim) {
    throw_invalid(kComponent, std::string(name) + " head_dim", num(t.dim2),
                  "head_dim = " + num(head_dim));
  }
  if (t.dim1 == 0) {
    throw_invalid(kComponent, std::string(name) + " has no tokens", "S = 0", "S >= 1");
  }
  if (t.data == nullptr)
    throw_invalid(kComponent, std::string(name) + " data", "null", "a pointer");
}

// Every value finite; for k and v (rows the cache stores, in fp16 or a codec built on fp16 ranges)
// also within the binary16 range, so a key that fits fp32 but not fp16 is the same named error for
// every codec instead of an infinity that turns scores into zeros or NaN.
void check_values(const Tensor3& t, const char* name, bool stored_in_fp16) {
  const size_t n = t.dim0 * t.dim1 * t.dim2;
  const float limit = stored_in_fp16 ? kFp16Max : std::numeric_limits<float>::max();
  // Slices scanned without an early exit (a loop the compiler vectorises), spread over the workers
  // when large (a 64K-token chunk is 2 x 256 MiB of k and v); the walk that names the first bad
  // value starts at the first slice holding one.
  // |x| <= limit compared on the bits: with the sign cleared, a float's bits order like its
  // magnitude as a non-negative int32, and Inf and NaN sit above every finite value (SSE2 pcmpgtd).
  int32_t limit_bits = 0;
  std::memcpy(&limit_bits, &limit, sizeof limit_bits);
  const auto has_bad = [&](size_t begin, size_t end) {
    int32_t bad = 0;
    for (size_t j = begin; j < end; ++j) {
      uint32_t bits = 0;
      std::memcpy(&bits, t.data + j, sizeof bits);
      bad |= static_cast<int32_t>(bits & 0x7fffffffu) > limit_bits ? 1 : 0;
    }
    return bad != 0;
  };
  constexpr size_t kSlice = size_t{1} << 16;
  const size_t n_slices = (n + kSlice - 1) / kSlice;
  size_t i = n;
  if (n_slices <= 1) {
    if (has_bad(0, n)) i = 0;
  } else {
    std::vector<uint8_t> bad(n_slices, 0);
    parallel_for(n_slices,
                 [&](size_t s) { bad[s] = has_bad(s * kSlice, std::min(n, (s + 1) * kSlice)); });
    const auto first = std::find(bad.begin(), bad.end(), uint8_t{1});
    if (first != bad.end()) i = static_cast<size_t>(first - bad.begin()) * kSlice;
  }
  for (; i < n; ++i) {
    if (!(std::fabs(t.data[i]) <= limit)) {  // also catches NaN
      const size_t row = i / t.dim2;
      const bool finite = std::isfinite(t.data[i]);
      throw_invalid(
          kComponent,
          std::string(name) + " holds " +
              (finite ? "a value outside the fp16 range" : "a non-finite value") + " at [" +
              num(row / t.dim1) + "][" + num(row % t.dim1) + "][" + num(i % t.dim2) + "]",
          std::to_string(t.data[i]),
          stored_in_fp16 ? "finite values with |x| <= 65504 (stored rows are fp16; NaN/Inf "
                           "are rejected)"
                         : "finite values (NaN/Inf are rejected)");
    }
  }
}

// Stable softmax over two segments taken as one row: a [na], b [nb], na + nb >= 1.
void softmax_two(float* a, size_t na, float* b, size_t nb) {
  float m = -std::numeric_limits<float>::infinity();
  if (na > 0) m = std::max(m, max_value(a, na));
  if (nb > 0) m = std::max(m, max_value(b, nb));
  const float sum = exp_shift_sum(a, na, m) + exp_shift_sum(b, nb, m);
  const float inv = 1.0f / sum;  // >= 1 term equal to 1
  for (size_t i = 0; i < na; ++i) a[i] *= inv;
  for (size_t i = 0; i < nb; ++i) b[i] *= inv;
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
  copy.compressions_ = compressions_;
  copy.prompt_open_ = prompt_open_;
  if (decode_policy_) copy.decode_policy_ = decode_policy_->clone();
  copy.recent_queries_ = recent_queries_;
  copy.recent_positions_ = recent_positions_;
  copy.decode_reselections_ = decode_reselections_;
  copy.rope_ = rope_;
  return copy;
}

void LayerCache::set_rope(const RopeParams& rope) {
  if (rope.n_rot == 0 || rope.n_rot % 2 != 0 || rope.n_rot > dims_.head_dim) {
    throw_invalid(kComponent, "rope n_rot", num(rope.n_rot),
                  "even, > 0 and <= head_dim = " + num(dims_.head_dim));
  }
  rope_ = rope;
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
  copy.tokens_seen_ = tokens_seen_;
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
                             config_.head_allocation != HeadAllocation::ada;
  validate_update(k, v, q_window, selects_first);
  if (!decode && wants_queries && config_.query_source == QuerySource::queries &&
      q_window == nullptr) {
    if (selects_first) check_values(k, "k", true);  // named first, as before the deferral
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
      positions_[h].push_back(static_cast<int64_t>(tokens_seen_ + i));
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
               layer_budget(), config_.head_allocation == HeadAllocation::ada);
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
  if (config_.policy == PolicyKind::kvzip && size() > config_.budget) {
    throw_invalid(kComponent, "policy kvzip cannot score the prompt by itself",
                  "end_prompt() with " + num(size()) + " rows over budget " + num(config_.budget),
                  "compress_with_scores() with the reconstruction pass's scores");
  }
  prompt_open_ = false;
  if (config_.policy != PolicyKind::full && over_budget()) {
    compress(pending_queries_.empty() ? nullptr : pending_queries_.data(), pending_window_,
             *policy_, layer_budget(), config_.head_allocation == HeadAllocation::ada);
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
      recent_positions_.push_back(static_cast<int64_t>(tokens_seen_ - w + r));
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
  if (config_.head_allocation == HeadAllocation::ada) {
    size_t total = 0;
    for (const std::vector<int64_t>& p : positions_) total += p.size();
    return total > dims_.n_kv_heads * budget;
  }
  return size() > budget;
}

void LayerCache::compress_with_scores(std::span<const float> scores) {
  if (config_.policy != PolicyKind::kvzip) {
    throw_invalid(kComponent, "compress_with_scores needs policy kvzip",
                  "policy " + std::string(to_string(config_.policy)), "kvzip");
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
  if (over_budget()) {
    compress(nullptr, 0, *policy_, layer_budget(), config_.head_allocation == HeadAllocation::ada,
             scores.data());
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
    recent_positions_.push_back(static_cast<int64_t>(tokens_seen_ - w + r));
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
           config_.decode_budget - config_.decode_interval + 1, false);
  ++decode_reselections_;
}

void LayerCache::compress(const float* queries, size_t n_window, EvictionPolicy& policy,
                          size_t budget, bool ada, const float* external) {
  const size_t n_kv = dims_.n_kv_heads;
  const size_t head_dim = dims_.head_dim;
  const size_t n_group = dims_.n_heads / n_kv;
  std::vector<SelectionResult> results(n_kv);
  parallel_for(n_kv, [&](size_t h) {
    const size_t n_rows = key_stores_[h]->rows();
    if (n_rows == 0) return;  // an empty head (ada) has nothing to score
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
    in.budget = budget;
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
    } else if (n_rows > budget) {
      results[h] = policy.select(in);
    } else {  // a head already within the budget (ragged heads, decode re-selection) keeps all
      results[h].keep.resize(n_rows);
      for (size_t i = 0; i < n_rows; ++i) results[h].keep[i] = static_cast<uint32_t>(i);
    }
  });
  if (ada) {
    std::vector<std::vector<float>> scores(n_kv);
    for (size_t h = 0; h < n_kv; ++h) scores[h] = results[h].scores;
    std::vector<std::vector<uint32_t>> keep = ada_select(scores, budget, config_);
    for (size_t h = 0; h < n_kv; ++h) results[h].keep = std::move(keep[h]);
  }
  size_t total_before = 0, total_after = 0;
  std::vector<size_t> total_rows(n_kv);
  for (size_t h = 0; h < n_kv; ++h) total_rows[h] = positions_[h].size();
  for (size_t h = 0; h < n_kv; ++h) {
    const std::vector<uint32_t>& keep = results[h].keep;
    total_before += positions_[h].size();
    total_after += keep.size();
    if (!ada) SNAPKV_CHECK(keep.size() == std::min(budget, positions_[h].size()));
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
  if (ada) SNAPKV_CHECK(total_after == std::min(n_kv * budget, total_before));
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

void LayerCache::attend(float* out, Tensor3 q, Tensor3 k, Tensor3 v) const {
  check_tensor(q, "q", dims_.n_heads, "n_heads", dims_.head_dim);
  check_tensor(k, "k", dims_.n_kv_heads, "n_kv_heads", dims_.head_dim);
  check_tensor(v, "v", dims_.n_kv_heads, "n_kv_heads", dims_.head_dim);
  if (k.dim1 != q.dim1 || v.dim1 != q.dim1) {
    throw_invalid(kComponent, "attend token counts differ",
                  "q " + num(q.dim1) + ", k " + num(k.dim1) + ", v " + num(v.dim1),
                  "the same S for q, k and v");
  }
  if (out == nullptr) throw_invalid(kComponent, "attend output", "null", "a pointer");
  check_values(q, "q", false);
  check_values(k, "k", true);
  check_values(v, "v", true);

  const size_t n_new = q.dim1;
  const size_t head_dim = dims_.head_dim;
  const size_t n_group = dims_.n_heads / dims_.n_kv_heads;
  const size_t n_blocks = (n_new + kAttendBlock - 1) / kAttendBlock;
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  // One work unit = one KV head x one block of query rows, for all n_group query heads of the
  // group at once: the kept rows of a store are read once per unit (dot_rows/accumulate_rows take
  // the group's n_group * m query rows together), not once per query head.
  parallel_for(dims_.n_kv_heads * n_blocks, [&](size_t unit) {
    const size_t kv = unit / n_blocks;
    const size_t s0 = (unit % n_blocks) * kAttendBlock;
    const size_t m = std::min(kAttendBlock, n_new - s0);
    const size_t n_kept = key_stores_[kv]->rows();        // this head's retained rows
    const size_t n_rows = n_group * m;                    // query rows of this unit
    const float* k_new = k.data + kv * n_new * head_dim;  // [S][head_dim]
    const float* v_new = v.data + kv * n_new * head_dim;  // [S][head_dim]

    std::vector<float> q_rows(n_rows * head_dim);  // [n_group][m][head_dim], gathered
    for (size_t g = 0; g < n_group; ++g) {
      const float* src = q.data + ((kv * n_group + g) * n_new + s0) * head_dim;
      std::copy(src, src + m * head_dim, q_rows.data() + g * m * head_dim);
    }
    const RowStore& keys = *key_stores_[kv];
    const RowStore& values = *value_stores_[kv];
    if (keys.has_span_kernels() && values.has_span_kernels()) {
      // Fused: one pass over the kept rows for the whole group (kv/core/span_attention.h), then the
      // chunk's own rows merged into the same online softmax.
      std::vector<float> acc(n_rows * head_dim);  // [n_group*m][head_dim], unnormalised
      std::vector<float> row_max(n_rows), row_sum(n_rows), logits(n_new);
      span_attention(acc.data(), row_max.data(), row_sum.data(), q_rows.data(), n_rows, keys,
                     values, scale);
      for (size_t r = 0; r < n_rows; ++r) {
        const size_t visible = s0 + r % m + 1;  // causal inside the chunk
        float* acc_row = acc.data() + r * head_dim;
        for (size_t j = 0; j < visible; ++j) {
          logits[j] = dot(q_rows.data() + r * head_dim, k_new + j * head_dim, head_dim);
        }
        online_softmax_merge(logits.data(), visible, scale, acc_row, head_dim, row_max[r],
                             row_sum[r]);
        for (size_t j = 0; j < visible; ++j) {
          axpy(acc_row, logits[j], v_new + j * head_dim, head_dim);
        }
        const float inv = 1.0f / row_sum[r];  // >= 1 term equal to 1
        for (size_t c = 0; c < head_dim; ++c) acc_row[c] *= inv;
      }
      for (size_t g = 0; g < n_group; ++g) {
        float* dst = out + ((kv * n_group + g) * n_new + s0) * head_dim;
        std::copy(acc.data() + g * m * head_dim, acc.data() + (g + 1) * m * head_dim, dst);
      }
      return;
    }
    std::vector<float> w_kept(n_rows * n_kept);  // [n_group*m][n_kept]
    std::vector<float> w_new(n_rows * n_new);    // [n_group*m][S], row (g,i) uses s0 + i + 1
    if (n_kept > 0) keys.dot_rows(w_kept.data(), q_rows.data(), n_rows);
    for (size_t r = 0; r < n_rows; ++r) {
      const size_t i = r % m;
      float* kept_row = w_kept.data() + r * n_kept;
      float* new_row = w_new.data() + r * n_new;
      const size_t visible = s0 + i + 1;  // causal inside the chunk
      for (size_t j = 0; j < n_kept; ++j) kept_row[j] *= scale;
      for (size_t j = 0; j < visible; ++j) {
        new_row[j] = scale * dot(q_rows.data() + r * head_dim, k_new + j * head_dim, head_dim);
      }
      softmax_two(kept_row, n_kept, new_row, visible);
    }
    std::vector<float> out_rows(n_rows * head_dim, 0.0f);  // [n_group*m][head_dim]
    if (n_kept > 0) values.accumulate_rows(out_rows.data(), w_kept.data(), n_rows);
    for (size_t r = 0; r < n_rows; ++r) {
      const size_t i = r % m;
      const float* new_row = w_new.data() + r * n_new;
      for (size_t j = 0; j <= s0 + i; ++j) {
        axpy(out_rows.data() + r * head_dim, new_row[j], v_new + j * head_dim, head_dim);
      }
    }
    for (size_t g = 0; g < n_group; ++g) {
      float* dst = out + ((kv * n_group + g) * n_new + s0) * head_dim;
      std::copy(out_rows.data() + g * m * head_dim, out_rows.data() + (g + 1) * m * head_dim, dst);
    }
  });
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
