// Eviction policies: given the candidate rows of one KV head (retained rows followed by the rows
// of the current chunk), choose which to keep. Policies see fp32 keys and original positions and
// never touch storage.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "snapkv/kv/config.h"

namespace snapkv {

struct SelectionInput {
  size_t kv_head = 0;
  size_t head_dim = 0;
  size_t n_rows = 0;                   // candidates
  const float* keys = nullptr;         // [n_rows][head_dim], rotated keys, fp32
  const int64_t* positions = nullptr;  // [n_rows], original absolute positions, increasing
  // True window queries of this KV head's GQA group, or nullptr (then proxy keys are used when
  // the policy needs queries): [n_group][n_window][head_dim]. Query row r of the window sits at
  // candidate index n_rows - n_window + r.
  const float* queries = nullptr;
  size_t n_group = 0;
  size_t n_window = 0;
  // Scores supplied from outside the cache (LayerCache::compress_with_scores, e.g. kvzip's
  // reconstruction pass), one per candidate, higher = keep: [n_rows]; nullptr when none. Only
  // policies that take external scores (kvzip) read it.
  const float* external_scores = nullptr;
};

struct SelectionResult {
  std::vector<uint32_t> keep;  // strictly increasing candidate indices, size min(budget, n_rows)
  std::vector<float> scores;   // per candidate, after pooling, before selection; empty if unscored
};

class EvictionPolicy {
 public:
  virtual ~EvictionPolicy() = default;
  virtual PolicyKind kind() const = 0;
  // Called only when n_rows > budget (the cache keeps everything otherwise). Must keep no state
  // between calls: the cache calls it for several KV heads at once from different threads.
  virtual SelectionResult select(const SelectionInput& in) = 0;
  virtual std::unique_ptr<EvictionPolicy> clone() const = 0;
};

// layer_index decorrelates seeded policies across layers.
std::unique_ptr<EvictionPolicy> make_policy(const CacheConfig& config, size_t layer_index);

}  // namespace snapkv
