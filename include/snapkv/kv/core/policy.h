// Eviction policies: given the candidate rows of one KV head (retained rows followed by the rows
// of the current chunk), choose which to keep. Policies see fp32 keys and original positions and
// never touch storage.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "snapkv/kv/core/config.h"
#include "snapkv/ops/rope.h"

namespace snapkv {

// Writes candidate keys [begin, end) as fp32 into out [end - begin][head_dim]: the values
// SelectionInput::keys would hold there.
using KeyRowReader = std::function<void(float* out, size_t begin, size_t end)>;

struct SelectionInput {
  size_t kv_head = 0;
  size_t head_dim = 0;
  size_t n_rows = 0;            // candidates
  const float* keys = nullptr;  // [n_rows][head_dim], rotated keys, fp32
  // The same keys read a tile at a time, for policies whose reads_key_tiles() is true: the cache
  // then may leave `keys` null and never build the whole fp32 copy (at 64K rows 32 MiB per head,
  // written and read back once more than the scoring needs). Null when keys is set.
  const KeyRowReader* key_rows = nullptr;
  const int64_t* positions = nullptr;  // [n_rows], original absolute positions, increasing
  // True window queries of this KV head's GQA group, or nullptr (then proxy keys are used when
  // the policy needs queries): [n_group][n_window][head_dim]. Query row r of the window sits at
  // candidate index n_rows - n_window + r.
  const float* queries = nullptr;
  size_t n_group = 0;
  size_t n_window = 0;
  // Decoded values [n_rows][head_dim], fp32; set only for policies whose needs_values() is true.
  const float* values = nullptr;
  // Rows to keep when it differs from config.budget (a PyramidKV layer budget); 0 = config.budget.
  size_t budget = 0;
  // Scores supplied from outside the cache (LayerCache::compress_with_scores, e.g. kvzip's
  // reconstruction pass), one per candidate, higher = keep: [n_rows]; nullptr when none. Only
  // policies that take external scores (kvzip) read it.
  const float* external_scores = nullptr;
  // The model's RoPE (LayerCache::set_rope), or nullptr when the cache was not told: lets a policy
  // relate a rotated query to other positions (expected_attention's mean future rotation).
  const RopeParams* rope = nullptr;
};

inline size_t selection_budget(const SelectionInput& in, const CacheConfig& config) {
  return in.budget != 0 ? in.budget : config.budget;
}

struct SelectionResult {
  std::vector<uint32_t> keep;  // strictly increasing candidate indices, size
                               // min(selection_budget(in, config), n_rows)
  std::vector<float> scores;   // per candidate, after pooling, before selection; empty if unscored
};

class EvictionPolicy {
 public:
  virtual ~EvictionPolicy() = default;
  virtual PolicyKind kind() const = 0;
  // Called only when n_rows > selection_budget(in, config) (the cache keeps everything otherwise;
  // with head_allocation ada the cache calls score() instead). Must keep no state between calls:
  // the cache calls it for several KV heads at once from different threads.
  virtual SelectionResult select(const SelectionInput& in) = 0;
  // The per-row scores select() ranks by (higher = keep), [n_rows], without selecting: what
  // head_allocation ada compares across the KV heads of a layer. Implemented by the policies of
  // policy_scores_rows(); the others throw std::invalid_argument. Same threading rule as select().
  virtual std::vector<float> score(const SelectionInput& in);
  // True when select()/score() read SelectionInput::values (the cache decodes them only then).
  virtual bool needs_values() const { return false; }
  // True when select()/score() read the keys only through SelectionInput::key_rows whenever
  // `keys` is null (both ways must give the same result; the cache may pass either).
  virtual bool reads_key_tiles() const { return false; }
  virtual std::unique_ptr<EvictionPolicy> clone() const = 0;
};

// layer_index decorrelates seeded policies across layers.
std::unique_ptr<EvictionPolicy> make_policy(const CacheConfig& config, size_t layer_index);

}  // namespace snapkv
