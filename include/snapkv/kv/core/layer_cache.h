// LayerCache: the KV cache of one attention layer, the heart of the project (README.md,
// "The library"). Owns one key RowStore and one value RowStore per KV head, the original
// position of every retained row, and the eviction policy. Move-only; clone() copies.
//
// Shapes are row-major fp32 at the boundary:
//   k, v      [n_kv_heads][S][head_dim]   already rotated by RoPE at their true positions
//   q_window  [n_heads][w][head_dim]      the rotated queries of the chunk's last w positions
// NaN/Inf anywhere in k, v or q_window, and any k or v value outside the fp16 range (|x| > 65504:
// every codec stores rows in fp16 or in fp16-based ranges), are rejected with std::invalid_argument
// before anything is stored: the cache is left exactly as it was (as for every other invalid
// input). NaN or Inf is never propagated into stored rows or scores.
//
// q_window may hold more rows than config.window: the last min(w, window) rows are used. Without
// it (or with query_source keys) SnapKV scores with the last `window` candidate keys as proxies.
// Threads: update()/end_prompt() score the KV heads in parallel (util/parallel.h); a LayerCache
// is not safe to mutate from several threads at once, const members may be called concurrently.
//
// Budgets (kv/core/allocation.h): the per-head budget of this layer is config.budget, or its
// PyramidKV share when layer_allocation is pyramid (it needs the layer's index and the model's
// n_layers). With head_allocation ada the KV heads keep different row counts ("ragged" heads):
// size(h) is exact per head, the layer keeps n_kv_heads * budget rows in all, and attend(), the
// codecs and decode appends work per head on whatever each head holds. Head types (duo,
// kv/core/head_types.h) make heads ragged the same way.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "snapkv/kv/core/config.h"
#include "snapkv/kv/core/policy.h"
#include "snapkv/kv/core/row_store.h"

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
  automatic,  // S > 1: prefill chunk, S == 1: decode step (SnapKV's rule)
  prefill,    // a prefill chunk, whatever S is (chunked prefill with chunk size 1)
  decode,     // append, never evict
};

struct CacheStats {
  size_t tokens_seen = 0;  // == offset()
  // Retained rows per KV head: the mean over the KV heads counted (and over the layers in
  // total_stats), rounded to the nearest integer; exact whenever the heads hold the same count
  // (uniform allocation), and == size() then. rows_kept / kv_heads is the exact mean.
  size_t tokens_kept = 0;
  size_t rows_kept = 0;        // retained rows summed over every KV head counted (exact)
  size_t kv_heads = 0;         // KV heads counted in rows_kept (n_kv_heads per layer)
  size_t bytes_stored = 0;     // all heads, keys + values, true codec bytes
  size_t bytes_full_fp16 = 0;  // what an fp16 cache of every seen token would hold
  // The exact mean retained rows per KV head (rows_kept / kv_heads; tokens_kept when kv_heads 0).
  double mean_kept() const;
  // seen / mean kept (> 1 once something was dropped; 1 when nothing was seen)
  double eviction_ratio() const;
  // mean kept / seen, in (0, 1] (1 when nothing was seen)
  double keep_rate() const;
};

// The decode-time budget's state that outlives a prompt (LayerCache::restore, decode_window()).
struct LayerDecodeWindow {
  std::vector<int64_t> positions;  // [n_recent] increasing, < tokens_seen
  std::vector<float> queries;      // [n_recent][n_heads][head_dim]
  size_t reselections = 0;         // decode_reselections() (<= compressions)
};

class LayerCache {
 public:
  // layer_index seeds the random policy and, with n_layers, places the layer in a PyramidKV
  // allocation. n_layers 0 means "not known" (a lone cache; layer_allocation pyramid then throws
  // std::invalid_argument); otherwise layer_index < n_layers.
  LayerCache(CacheDims dims, const CacheConfig& config, size_t layer_index = 0,
             size_t n_layers = 0);
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
  // constructor's does (n_layers stays this cache's). Throws std::invalid_argument naming the
  // mismatch otherwise.
  LayerCache fork(const CacheConfig& config, size_t layer_index) const;

  // Persisted caches (kv/file/kvc_file.h): a cache whose prompt was ended, rebuilt from its parts
  // without re-running anything. positions [n_kv_heads][rows of that head] (strictly increasing,
  // each < tokens_seen; the same count in every head unless config.head_allocation is ada), keys
  // and values [n_kv_heads] stores made for `config`, one row per position. layer_index and
  // n_layers as for the constructor (pyramid needs n_layers). `decode` is the decode-time budget's
  // window (empty unless config.decode_budget > 0). The policy is made from config and
  // layer_index as the constructor does; last_scores() is empty. `position_shift` is
  // tokens_seen - next_position() of a re-indexed cache (0 otherwise, < tokens_seen); positions
  // (and the decode window's) are then < tokens_seen - position_shift. Throws
  // std::invalid_argument naming the part that does not fit. Defined in
  // src/kv/core/layer_cache_restore.cpp.
  using DecodeWindow = LayerDecodeWindow;
  static LayerCache restore(CacheDims dims, const CacheConfig& config, size_t layer_index,
                            size_t n_layers, size_t tokens_seen, size_t compressions,
                            std::vector<std::vector<int64_t>> positions,
                            std::vector<std::unique_ptr<RowStore>> keys,
                            std::vector<std::unique_ptr<RowStore>> values, DecodeWindow decode = {},
                            size_t position_shift = 0);
  // The decode-time budget's recent-query window as restore() takes it (empty without one).
  DecodeWindow decode_window() const;
  // True between the prefill updates of an end_of_prompt cache and end_prompt() (its rows are not
  // compressed yet and the window's queries are pending): such a cache cannot be persisted.
  bool prompt_open() const { return prompt_open_; }
  // The window queries an open prompt keeps for its compression: [n_heads][pending_window()]
  // [head_dim], rotated, the prompt's last pending_window() positions (empty when none).
  std::span<const float> pending_queries() const { return pending_queries_; }
  size_t pending_window() const { return pending_window_; }

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
  // A routing codec (zipcache) gets the policy's scores of the kept rows after each compression;
  // rows it still holds unrouted here (no compression, or a policy without scores) are ranked by
  // SnapKV's window attention with the last prefill's queries (proxy keys without them).
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
  // in one fused pass per KV head for all its query heads (span kernels and an online softmax,
  // src/kv/core/span_attention.h) when both stores have span kernels, else through dot_rows /
  // accumulate_rows: no dequantised copy of the cache is made. Logits
  // q.k / sqrt(head_dim) and the max-subtracted softmax are fp32; the chunk's own rows are used
  // in fp32 as given (not rounded to the codec). Same shape and finiteness checks as update().
  //   out [n_heads][S][head_dim], q [n_heads][S][head_dim], k, v [n_kv_heads][S][head_dim]
  void attend(float* out, Tensor3 q, Tensor3 k, Tensor3 v) const;

  // The model's RoPE (the freq_factors array, if any, must outlive the cache), handed to the
  // policies through SelectionInput::rope: expected_attention relates the rotated window queries
  // to the next positions with it. Optional: without it such policies use the rotated rows as
  // they are. clone() and fork() keep it; throws std::invalid_argument for an n_rot that is odd,
  // zero or above head_dim.
  void set_rope(const RopeParams& rope);
  const std::optional<RopeParams>& rope() const { return rope_; }

  // Head types (kv/core/head_types.h) for head_allocation duo / duo_ada: streaming [n_kv_heads],
  // nonzero = a streaming head (sinks + recent rows only). A duo cache that compresses without
  // them throws std::invalid_argument. clone() and fork() keep them; the engine sets them from
  // its model (model/head_types.h). Decode-time re-selection (decode_budget) treats every head
  // alike, as it does under ada. Throws std::invalid_argument for a wrong size.
  void set_head_types(std::vector<uint8_t> streaming);
  std::span<const uint8_t> head_types() const { return head_types_; }

  size_t offset() const { return tokens_seen_; }
  // The position the next token's key is rotated at: offset() until the cache is re-indexed,
  // then reindex()'s `next` plus the tokens seen since. Every retained position is below it.
  size_t next_position() const { return tokens_seen_ - position_shift_; }

  // Re-indexing (StreamingLLM's positions within the cache), for an engine that runs past its
  // model's trained context: row i of the n_h rows of KV head h gets position next - n_h + i (the
  // rows of every head end just before `next`; heads that hold the same count get the same
  // positions, 0..n-1 when next == n), each key is turned by RoPE from its old position to the new
  // one (decoded, rotated by the difference, stored again: one more fp16 rounding), and the next
  // token takes position `next`. Values, the order of rows and the decode-time window (renumbered
  // like the rows it matches) are kept; offset() and the accounting still count tokens seen.
  // Needs set_rope(), a prompt that is not open, size(h) <= next <= next_position() for every
  // head, and keys stored as plain fp16 rows (codec fp16): quantized keys cannot be turned
  // without a second quantization, so every other codec throws std::invalid_argument naming it
  // (check_reindexable). Throws before changing anything. Defined in
  // src/kv/core/layer_cache_reindex.cpp.
  void reindex(size_t next);
  // The codec check of reindex() alone, for an engine that refuses a long prompt before it
  // starts: std::invalid_argument "[layer_cache] ... keys stored quantized ..." unless config's
  // keys are plain fp16 rows.
  static void check_reindexable(const CacheConfig& config);
  // A copy holding only the first n positions (0 <= n <= offset()): exactly the cache that the
  // same updates of those n tokens alone would have built, for reusing the common prefix of two
  // prompts. Only for a cache that keeps every row exactly: policy full, codec fp16 (rows
  // independent of one another, so a kept row is the row as first stored), no decode-time
  // budget (such a cache never holds an open prompt and is never re-indexed);
  // std::invalid_argument naming the condition otherwise. Rows at positions >= n are not copied;
  // this cache is unchanged. Defined in src/kv/core/layer_cache_truncate.cpp.
  LayerCache truncated(size_t n) const;
  // Whether truncated() accepts a cache built with `config` (policy full, codec fp16, no
  // decode-time budget).
  static bool truncatable(const CacheConfig& config);
  // Retained rows of one KV head (heads differ under head_allocation ada).
  size_t size(size_t kv_head) const;
  // The largest size(h) over the KV heads: every head's count under uniform allocation, and
  // with ragged heads a bound, so a buffer of size() * head_dim holds any head's rows.
  size_t size() const;
  // The per-head budget of this layer now (config.budget, or its PyramidKV share of the tokens
  // seen so far); the layer keeps n_kv_heads * layer_budget() rows under ada.
  size_t layer_budget() const;
  size_t layer_index() const { return layer_index_; }
  size_t n_layers() const { return n_layers_; }
  const CacheDims& dims() const { return dims_; }
  const CacheConfig& config() const { return config_; }

  // Positions of the retained rows of one KV head, increasing: the positions their keys are rotated
  // at (the original absolute positions unless the cache was re-indexed).
  std::span<const int64_t> positions(size_t kv_head) const;
  const RowStore& keys(size_t kv_head) const;
  const RowStore& values(size_t kv_head) const;
  // Decoded copies: out [size(kv_head)][head_dim].
  void read_keys(size_t kv_head, float* out) const;
  void read_values(size_t kv_head, float* out) const;

  // Scores (after pooling, before selection) of the last compressing update, per KV head, over
  // that update's candidates; empty when the policy does not score or nothing was compressed.
  std::span<const float> last_scores(size_t kv_head) const;
  // Number of compressing updates so far (an update that actually ran the policy).
  size_t compressions() const { return compressions_; }
  // Decode-time re-selections so far (config.decode_budget > 0; also counted in compressions()).
  size_t decode_reselections() const { return decode_reselections_; }

  CacheStats stats() const;
  double eviction_ratio() const { return stats().eviction_ratio(); }
  double keep_rate() const { return stats().keep_rate(); }

 private:
  // Shapes and values of an update's inputs; with `k_values_later`, k's values are left to the
  // caller (select_then_store checks them as it reads them), except when another input is bad:
  // then k is checked first, so the error names the same input as a check of k, v, q in order.
  void validate_update(Tensor3 k, Tensor3 v, const Tensor3* q_window, bool k_values_later) const;
  // Runs `policy` on every KV head (queries [n_heads][n_window][head_dim] or nullptr; external
  // [n_kv_heads][size()] or nullptr) and keeps min(budget, size(h)) rows per head (uniform), or
  // n_kv_heads * budget rows over the layer (ada: AdaKV, kv/core/allocation.h; duo, duo_ada: head
  // types, kv/core/head_types.h, which need set_head_types()).
  void compress(const float* queries, size_t n_window, EvictionPolicy& policy, size_t budget,
                HeadAllocation allocation, const float* external = nullptr);
  bool over_budget() const;
  size_t layer_budget_at(size_t tokens_seen) const;
  // every_chunk with fp16 rows and one budget per head (kv/core/layer_cache_select.cpp): when the
  // chunk k, v [n_kv_heads][S][head_dim] takes the layer over `budget`, selects among the stored
  // rows and the chunk's before storing, so rows evicted at once are never written. The same
  // rows, positions and scores as appending the chunk and then compress(). tokens_seen_ already
  // counts the chunk. k's values are checked (|x| <= 65504, finite) in the same pass that rounds
  // the chunk's keys through fp16 for the policy. Nothing is stored when it returns chunk_fits
  // (the chunk fits the budget; k not read) or keys_out_of_range (some k value is not).
  enum class SelectOutcome { selected, chunk_fits, keys_out_of_range };
  SelectOutcome select_then_store(Tensor3 k, Tensor3 v, const float* queries, size_t n_window,
                                  size_t budget);
  // Routes the rows a routing codec (zipcache) holds unrouted in head h: with `scores` (the
  // policy's, one per retained row) when given, else SnapKV's window attention with `queries`
  // ([n_heads][n_window][head_dim] or nullptr: the last `window` keys as proxies).
  void settle_head(size_t h, std::span<const float> scores, const float* queries, size_t n_window);
  // Decode-time budget: remembers the newest decode queries (q_window rows of decode updates).
  void remember_recent_queries(const Tensor3* q_window);
  // Re-selects down to decode_budget - decode_interval + 1 rows with the recent queries.
  void reselect_for_decode();

  CacheDims dims_;
  CacheConfig config_;
  std::unique_ptr<EvictionPolicy> policy_;
  std::vector<std::unique_ptr<RowStore>> key_stores_;    // [n_kv_heads]
  std::vector<std::unique_ptr<RowStore>> value_stores_;  // [n_kv_heads]
  std::vector<std::vector<int64_t>> positions_;          // [n_kv_heads][size(h)]
  std::vector<std::vector<float>> last_scores_;          // [n_kv_heads][candidates]
  std::vector<float> pending_queries_;  // end_of_prompt: [n_heads][w][head_dim] of last prefill
  size_t pending_window_ = 0;
  size_t layer_index_ = 0;
  size_t n_layers_ = 0;              // 0: unknown
  std::optional<RopeParams> rope_;   // set_rope()
  std::vector<uint8_t> head_types_;  // set_head_types(): [n_kv_heads], 1 = streaming; or empty
  size_t tokens_seen_ = 0;
  size_t position_shift_ = 0;  // tokens_seen_ - next_position() (reindex())
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
