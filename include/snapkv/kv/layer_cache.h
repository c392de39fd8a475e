// LayerCache: the KV cache of one attention layer, the heart of the project (ARCHITECTURE.md,
// "The cache contract"). Owns one key RowStore and one value RowStore per KV head, the original
// position of every retained row, and the eviction policy. Move-only; clone() copies.
//
// Shapes are row-major fp32 at the boundary:
//   k, v      [n_kv_heads][S][head_dim]   already rotated by RoPE at their true positions
//   q_window  [n_heads][w][head_dim]      the rotated queries of the chunk's last w positions
// NaN/Inf anywhere in k, v or q_window is rejected with std::invalid_argument before anything is
// stored: the cache is left exactly as it was (as for every other invalid input). NaN is never
// propagated into stored rows or scores.
//
// q_window may hold more rows than config.window: the last min(w, window) rows are used. Without
// it (or with query_source keys) SnapKV scores with the last `window` candidate keys as proxies.
// Threads: update()/end_prompt() score the KV heads in parallel (util/parallel.h); a LayerCache
// is not safe to mutate from several threads at once, const members may be called concurrently.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "snapkv/kv/config.h"
#include "snapkv/kv/policy.h"
#include "snapkv/kv/row_store.h"

namespace snapkv {

struct CacheDims {
  size_t n_heads = 0;     // query heads
  size_t n_kv_heads = 0;  // key/value heads (n_heads % n_kv_heads == 0)
  size_t head_dim = 0;
};

// Non-owning view of a row-major fp32 tensor [dim0][dim1][dim2].
struct Tensor3 {
  const float* data = nullptr;
  size_t dim0 = 0, dim1 = 0, dim2 = 0;
};

enum class UpdateKind {
  automatic,  // S > 1: prefill chunk, S == 1: decode step (the method notes' rule)
  prefill,    // a prefill chunk, whatever S is (chunked prefill with chunk size 1)
  decode,     // append, never evict
};

struct CacheStats {
  size_t tokens_seen = 0;      // == offset()
  size_t tokens_kept = 0;      // retained rows per KV head, == size()
  size_t bytes_stored = 0;     // all heads, keys + values, true codec bytes
  size_t bytes_full_fp16 = 0;  // what an fp16 cache of every seen token would hold
  // seen / kept (> 1 once something was dropped; 1 when nothing was seen)
  double eviction_ratio() const;
  // kept / seen, in (0, 1] (1 when nothing was seen)
  double keep_rate() const;
  // Adds every field (tokens too; total_stats() keeps the per-layer token counts instead).
  CacheStats& operator+=(const CacheStats& other);
};

class LayerCache {
 public:
  LayerCache(CacheDims dims, const CacheConfig& config, size_t layer_index = 0);
  ~LayerCache();
  LayerCache(LayerCache&&) noexcept;
  LayerCache& operator=(LayerCache&&) noexcept;
  LayerCache(const LayerCache&) = delete;
  LayerCache& operator=(const LayerCache&) = delete;
  LayerCache clone() const;

  // The cache that `config` would have built from the same prefill updates, for sharing one
  // prompt's prefill among several methods (eval). Allowed only while this cache's prompt is open
  // in end_of_prompt mode (nothing compressed yet) and when the stored rows and kept window queries
  // would be identical: `config` has chunk_mode end_of_prompt, the same codec (and KIVI
  // parameters) and the same window, and, when its policy scores with queries, this cache holds
  // the window's queries. In end_of_prompt mode the prefill forward never depends on the policy
  // (attend() reads every row), so the result equals a dedicated cache bit for bit; the caller
  // then ends the prompt as a dedicated run would. layer_index seeds the random policy as the
  // constructor's does. Throws std::invalid_argument naming the mismatch otherwise.
  LayerCache fork(const CacheConfig& config, size_t layer_index) const;

  // Adds S = k.dim1 new tokens at positions offset() .. offset()+S-1. On a prefill update with
  // chunk_mode every_chunk, enforces the budget over retained + new rows; in end_of_prompt mode it
  // only appends (and remembers q_window for end_prompt()). Decode updates only append; in
  // end_of_prompt mode the first decode update after a prefill calls end_prompt() first, so the
  // prompt is compressed before generation even if the caller forgot to end it.
  // With config.decode_budget > 0 a decode update's q_window (its last rows' queries) joins the
  // recent-query window, and when the appended rows make size() exceed decode_budget the policy
  // re-selects down to decode_budget - decode_interval + 1 rows with that window (the longest run
  // of recent queries whose rows every head still holds at its end), so size() <= decode_budget
  // after every decode update. Positions stay absolute.
  void update(Tensor3 k, Tensor3 v, const Tensor3* q_window = nullptr,
              UpdateKind kind = UpdateKind::automatic);

  // The prompt is complete: in end_of_prompt mode compress now (with the q_window of the last
  // prefill update, or proxy keys); in every_chunk mode nothing is left to do. Idempotent.
  // Policy kvzip cannot score by itself: its prompt is ended by compress_with_scores(), and
  // end_prompt() on an open kvzip prompt that exceeds the budget throws std::invalid_argument.
  void end_prompt();

  // Ends the prompt by compressing with scores computed outside the cache (kvzip: the model's
  // context-reconstruction pass, model/kvzip.h), one per retained row, higher = keep:
  // scores [n_kv_heads][size()], finite. The policy (kvzip) pools them as configured, keeps the
  // sinks (and the window with keep_window) and the top-scoring rest, per KV head; nothing is
  // evicted when size() <= budget. Only for policy kvzip with an open prompt (after prefill
  // updates, before end_prompt()); std::invalid_argument otherwise or for a wrong size or a
  // non-finite score, with the cache unchanged.
  void compress_with_scores(std::span<const float> scores);

  // Attention of a chunk's queries over the retained rows plus the chunk's own (not yet stored)
  // rows, causal inside the chunk. Call before update() with the same k, v. Reads the stores
  // through dot_rows / accumulate_rows: no dequantised copy of the cache is made. Logits
  // q.k / sqrt(head_dim) and the max-subtracted softmax are fp32; the chunk's own rows are used
  // in fp32 as given (not rounded to the codec). Same shape and finiteness checks as update().
  //   out [n_heads][S][head_dim], q [n_heads][S][head_dim], k, v [n_kv_heads][S][head_dim]
  void attend(float* out, Tensor3 q, Tensor3 k, Tensor3 v) const;

  size_t offset() const { return tokens_seen_; }
  size_t size() const { return positions_.empty() ? 0 : positions_[0].size(); }
  const CacheDims& dims() const { return dims_; }
  const CacheConfig& config() const { return config_; }

  // Original absolute positions of the retained rows of one KV head, increasing.
  std::span<const int64_t> positions(size_t kv_head) const;
  const RowStore& keys(size_t kv_head) const;
  const RowStore& values(size_t kv_head) const;
  // Decoded copies: out [size()][head_dim].
  void read_keys(size_t kv_head, float* out) const;
  void read_values(size_t kv_head, float* out) const;

  // Scores (after pooling, before selection) of the last compressing update, per KV head, over
  // that update's candidates; empty when the policy does not score or nothing was compressed.
  std::span<const float> last_scores(size_t kv_head) const;
  // Number of compressing updates so far (an update that actually ran the policy).
  size_t compressions() const { return compressions_; }
  // Decode-time re-selections so far (config.decode_budget > 0; also counted in compressions()).
  size_t decode_reselections() const { return decode_reselections_; }
  // True while prefill rows wait for end_prompt() / compress_with_scores() (end_of_prompt mode).
  bool prompt_open() const { return prompt_open_; }

  CacheStats stats() const;
  double eviction_ratio() const { return stats().eviction_ratio(); }
  double keep_rate() const { return stats().keep_rate(); }

 private:
  void validate_update(Tensor3 k, Tensor3 v, const Tensor3* q_window) const;
  // Runs `policy` on every KV head (queries [n_heads][n_window][head_dim] or nullptr; external
  // [n_kv_heads][size()] or nullptr) and keeps min(target, size()) rows per head.
  void compress(const float* queries, size_t n_window, EvictionPolicy& policy, size_t target,
                const float* external = nullptr);
  // Decode-time budget: remembers the newest decode queries (q_window rows of decode updates).
  void remember_recent_queries(const Tensor3* q_window);
  // Re-selects down to decode_budget - decode_interval + 1 rows with the recent queries.
  void reselect_for_decode();

  CacheDims dims_;
  CacheConfig config_;
  std::unique_ptr<EvictionPolicy> policy_;
  std::vector<std::unique_ptr<RowStore>> key_stores_;    // [n_kv_heads]
  std::vector<std::unique_ptr<RowStore>> value_stores_;  // [n_kv_heads]
  std::vector<std::vector<int64_t>> positions_;          // [n_kv_heads][size()]
  std::vector<std::vector<float>> last_scores_;          // [n_kv_heads][candidates]
  std::vector<float> pending_queries_;  // end_of_prompt: [n_heads][w][head_dim] of last prefill
  size_t pending_window_ = 0;
  size_t tokens_seen_ = 0;
  size_t compressions_ = 0;
  bool prompt_open_ = false;  // end_of_prompt: prefill rows not yet compressed
  // Decode-time budget (config.decode_budget > 0): the policy built with the re-selection target
  // as its budget, and the newest query rows with their positions (oldest first).
  std::unique_ptr<EvictionPolicy> decode_policy_;
  std::vector<float> recent_queries_;      // [n_recent][n_heads][head_dim]
  std::vector<int64_t> recent_positions_;  // [n_recent]
  size_t decode_reselections_ = 0;
};

}  // namespace snapkv
