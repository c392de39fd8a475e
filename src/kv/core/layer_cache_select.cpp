// LayerCache::select_then_store: an every_chunk prefill update that selects before it stores.
//
// Appending a chunk of S rows and compressing at once (LayerCache::compress) writes every row to
// the fp16 stores, reads them all back as fp32 for the policy, then drops all but the budget. At
// S = 64K that is 256 MiB of fresh store pages per layer for rows that live a few milliseconds.
// Here the candidates are built in a per-thread scratch instead: the stored rows read back, then
// the chunk's rows rounded through fp16 exactly as Fp16RowStore::append/read would round them,
// so the policy sees the same keys (and values) as after an append; only the kept rows of the
// chunk are then appended. Rows, positions, scores and compression count equal the general path
// (tests/kv/layer_cache_select_test.cpp holds the two equal); only fp16 rows with one budget per
// head take this path (LayerCache::update decides). The rounding of the chunk's keys also checks
// them (|x| <= 65504, no NaN/Inf): update() leaves k's values to this path rather than read all
// of k once more before it, and turns a bad value into its usual named error.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "kv/core/scratch.h"
#include "snapkv/kv/core/layer_cache.h"
#include "snapkv/util/error.h"
#include "snapkv/util/fp16.h"
#include "snapkv/util/parallel.h"

namespace snapkv {
namespace {

// Whether every value of rows [begin, end) of src [..][head_dim] fits binary16 (|x| <= 65504):
// the check LayerCache::update makes of k, for rows the scoring did not read.
bool rows_fit_fp16(const float* src, size_t begin, size_t end, size_t head_dim) {
  constexpr size_t kBlock = 4096;
  float rounded[kBlock];
  for (size_t i = begin * head_dim; i < end * head_dim; i += kBlock) {
    if (!fp16_round_trip_n(rounded, src + i, std::min(kBlock, end * head_dim - i))) return false;
  }
  return true;
}

// Rows keep[i] - base (keep[i] >= base) of src [..][head_dim], gathered: [n][head_dim].
std::vector<float> gather_rows(const float* src, std::span<const uint32_t> keep, size_t base,
                               size_t head_dim) {
  std::vector<float> out(keep.size() * head_dim);
  for (size_t i = 0; i < keep.size(); ++i) {
    std::copy_n(src + (keep[i] - base) * head_dim, head_dim, out.data() + i * head_dim);
  }
  return out;
}

}  // namespace

LayerCache::SelectOutcome LayerCache::select_then_store(Tensor3 k, Tensor3 v, const float* queries,
                                                        size_t n_window, size_t budget) {
  const size_t n_kv = dims_.n_kv_heads, head_dim = dims_.head_dim, n_new = k.dim1;
  const size_t n_group = dims_.n_heads / n_kv;
  for (size_t h = 0; h < n_kv; ++h) {
    // the general path keeps them all
    if (positions_[h].size() + n_new <= budget) return SelectOutcome::chunk_fits;
  }
  const int64_t first_new = static_cast<int64_t>(next_position() - n_new);
  const bool needs_values = policy_->needs_values();
  std::vector<SelectionResult> results(n_kv);
  std::vector<std::vector<int64_t>> candidates(n_kv);  // [n_kv][n_old + n_new] positions
  // Per head: chunk rows [0, checked[h]) were read and found within the fp16 range; bad[h] once
  // a read row was not (the rows handed to the policy are then zeros, its result discarded).
  std::vector<size_t> checked(n_kv, 0);
  std::vector<uint8_t> bad(n_kv, 0);
  parallel_for(n_kv, [&](size_t h) {
    const size_t n_old = key_stores_[h]->rows(), n_rows = n_old + n_new;
    const float* k_head = k.data + h * n_new * head_dim;  // [n_new][head_dim]
    // Candidate keys [begin, end): stored rows read back, then chunk rows rounded through fp16
    // (and checked on the way: the one read of k's values in this update).
    const KeyRowReader read_keys = [&](float* out, size_t begin, size_t end) {
      const size_t mid = std::clamp(n_old, begin, end);
      if (begin < mid) key_stores_[h]->read(out, begin, mid);
      if (mid == end) return;
      float* chunk_out = out + (mid - begin) * head_dim;
      const size_t count = (end - mid) * head_dim;
      if (!fp16_round_trip_n(chunk_out, k_head + (mid - n_old) * head_dim, count)) {
        bad[h] = 1;
        std::fill_n(chunk_out, count, 0.0f);  // no NaN or Inf reaches the policy
      } else if (mid - n_old <= checked[h]) {
        checked[h] = std::max(checked[h], end - n_old);
      }
    };
    float* keys = nullptr;  // [n_rows][head_dim], only for policies that need all keys at once
    if (!policy_->reads_key_tiles()) {
      keys = scratch_floats(ScratchSlot::keys, n_rows * head_dim);
      read_keys(keys, 0, n_rows);
    }
    std::vector<int64_t>& pos = candidates[h];
    pos.reserve(n_rows);
    pos.assign(positions_[h].begin(), positions_[h].end());
    for (size_t i = 0; i < n_new; ++i) pos.push_back(first_new + static_cast<int64_t>(i));
    SelectionInput in;
    in.kv_head = h;
    in.head_dim = head_dim;
    in.n_rows = n_rows;
    in.keys = keys;
    in.key_rows = keys == nullptr ? &read_keys : nullptr;
    in.positions = pos.data();
    in.budget = budget;
    in.rope = rope_ ? &*rope_ : nullptr;
    if (needs_values) {
      float* values = scratch_floats(ScratchSlot::values, n_rows * head_dim);
      value_stores_[h]->read(values, 0, n_old);
      // v was checked by validate_update: the range flag is not needed here
      (void)fp16_round_trip_n(values + n_old * head_dim, v.data + h * n_new * head_dim,
                              n_new * head_dim);
      in.values = values;
    }
    if (queries != nullptr) {
      in.queries = queries + h * n_group * n_window * head_dim;  // this KV head's group
      in.n_group = n_group;
      in.n_window = n_window;
    }
    results[h] = policy_->select(in);
    // Chunk rows the policy did not read (or read out of order) are checked here.
    if (bad[h] == 0 && !rows_fit_fp16(k_head, checked[h], n_new, head_dim)) bad[h] = 1;
  });
  if (std::find(bad.begin(), bad.end(), uint8_t{1}) != bad.end()) {
    return SelectOutcome::keys_out_of_range;
  }
  // Heads compact independently (their own stores, positions and scores): in parallel, so the
  // gather of the kept chunk rows (scattered reads of k and v) is not a serial tail.
  parallel_for(n_kv, [&](size_t h) {
    const std::vector<uint32_t>& keep = results[h].keep;
    const std::vector<int64_t>& pos = candidates[h];
    SNAPKV_CHECK(keep.size() == std::min(budget, pos.size()));
    const size_t n_old = key_stores_[h]->rows();
    const auto split = std::lower_bound(keep.begin(), keep.end(), static_cast<uint32_t>(n_old));
    const std::span<const uint32_t> keep_old(keep.data(),
                                             static_cast<size_t>(split - keep.begin()));
    const std::span<const uint32_t> keep_new(keep.data() + keep_old.size(),
                                             keep.size() - keep_old.size());
    key_stores_[h]->retain(keep_old);
    value_stores_[h]->retain(keep_old);
    const float* k_head = k.data + h * n_new * head_dim;
    const float* v_head = v.data + h * n_new * head_dim;
    key_stores_[h]->append(gather_rows(k_head, keep_new, n_old, head_dim).data(), keep_new.size());
    value_stores_[h]->append(gather_rows(v_head, keep_new, n_old, head_dim).data(),
                             keep_new.size());
    std::vector<int64_t> kept_positions(keep.size());
    for (size_t i = 0; i < keep.size(); ++i) kept_positions[i] = pos[keep[i]];
    positions_[h] = std::move(kept_positions);
    std::vector<float> kept_scores;  // as compress(): the policy's scores of the kept rows
    if (results[h].scores.size() == pos.size()) {
      kept_scores.resize(keep.size());
      for (size_t i = 0; i < keep.size(); ++i) kept_scores[i] = results[h].scores[keep[i]];
    }
    settle_head(h, kept_scores, queries, n_window);
    last_scores_[h] = std::move(results[h].scores);
  });
  ++compressions_;
  return SelectOutcome::selected;
}

}  // namespace snapkv
