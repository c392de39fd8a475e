// The reference engine: a CPU forward pass over GGUF weights of a llama, qwen2 or qwen3 model
// (model/arch.h) that drives one snapkv LayerCache per layer.
//
// LlamaModel owns the parsed GGUF file (memory-mapped) and views of its tensors: F32, F16 and Q8_0
// matrices are used in place (ops/gemm.h dequantizes inside the kernels); there is no fp32 copy of
// the weights. 1-D tensors (norms, biases, rope_freqs) must be F32 (as llama.cpp writes them).
// Which tensors each architecture has, with their shapes, is listed in src/model/arch.cpp; a
// missing tensor, a wrong shape or type, or a tensor the architecture does not use is a
// snapkv::RuntimeError naming the tensor ("got {a, b}, expected {c, d}").
//
// LlamaSession runs one request: prefill(prompt) in chunks of `prefill_chunk` tokens, then
// decode(token) step by step. Per layer and chunk: RMSNorm -> q, k, v (+ biases when the file has
// them) -> per-head RMSNorm of q and k (qwen3) -> RoPE (NORM for llama, NEOX for qwen2/qwen3, with
// the file's frequency factors and linear scaling) at positions taken from cache.offset() ->
// cache.attend(q, k, v) -> cache.update(k, v, q_window) -> output projection (+ bias) -> residual
// -> RMSNorm -> SwiGLU FFN -> residual. q_window holds the rotated queries of the chunk's last
// min(window, S) positions whenever the cache config keeps them (kv/core/fork.h
// wants_window_queries: an evicting policy that scores with queries, query_source != keys); the
// last prefill chunk is always extended backwards so that it holds the prompt's last `window`
// positions (the SnapKV observation window), so the chunk boundaries depend on the window alone.
// After the prompt every cache gets end_prompt(). Within the model's context eviction never
// shifts positions: RoPE is applied at the true absolute position. Past it, with an evicting
// policy (kv/core/prefill_plan.h: reindex, and long_prompt for a prompt longer than the context,
// chunk_mode every_chunk), a forward of s tokens that would reach position n_ctx first re-indexes
// every cache (LayerCache::reindex) so that the retained rows end just before position N, the most
// rows any head of any layer retains, and the forward starts at N (N + s <= n_ctx, else
// std::invalid_argument): positions by place in the cache, StreamingLLM's rule.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "snapkv/gguf/gguf.h"
#include "snapkv/kv/core/builder.h"
#include "snapkv/kv/core/config.h"
#include "snapkv/kv/core/layer_cache.h"
#include "snapkv/kv/core/prefill_plan.h"
#include "snapkv/model/head_types.h"
#include "snapkv/model/kvzap.h"
#include "snapkv/model/kvzip.h"
#include "snapkv/model/model_config.h"
#include "snapkv/ops/gemm.h"
#include "snapkv/ops/rope.h"

namespace snapkv {

struct LlamaLayerWeights {
  const float* attn_norm = nullptr;  // [n_embd]
  const float* ffn_norm = nullptr;   // [n_embd]
  WeightMatrix wq;                   // [n_heads*hd][n_embd]
  WeightMatrix wk, wv;               // [n_kv*hd][n_embd]
  WeightMatrix wo;                   // [n_embd][n_heads*hd]
  WeightMatrix w_gate, w_up;         // [n_ff][n_embd]
  WeightMatrix w_down;               // [n_embd][n_ff]
  const float* bq = nullptr;         // [n_heads*hd] or nullptr (no bias)
  const float* bk = nullptr;         // [n_kv*hd] or nullptr
  const float* bv = nullptr;         // [n_kv*hd] or nullptr
  const float* bo = nullptr;         // [n_embd] or nullptr
  const float* q_norm = nullptr;     // [hd] per-head RMSNorm weight of q (qwen3) or nullptr
  const float* k_norm = nullptr;     // [hd] per-head RMSNorm weight of k (qwen3) or nullptr
};

struct LlamaWeights {
  WeightMatrix token_embd;             // [n_vocab][n_embd]
  const float* output_norm = nullptr;  // [n_embd]
  WeightMatrix output;                 // [n_vocab][n_embd] (== token_embd when tied)
  bool tied_output = false;
  const float* rope_freqs = nullptr;  // [n_rot/2] RoPE frequency factors, or nullptr (all 1)
  std::vector<LlamaLayerWeights> layers;
};

class LlamaModel {
 public:
  // Opens and validates a GGUF file (general.architecture llama, qwen2 or qwen3), its bytes held
  // as `storage` says (gguf::File::Storage): by default weight_storage(). Throws
  // snapkv::RuntimeError.
  static LlamaModel load(const std::string& path);
  static LlamaModel load(const std::string& path, gguf::File::Storage storage);
  // How load(path) holds a model file: mapped (the default: a 2 MiB-aligned file map advised for
  // huge pages, util/mapped_file.h, so a file the page cache holds in 2 MiB folios streams on
  // 2 MiB TLB entries; opens in about 0.1 s), or huge_page_copy when the environment sets
  // SNAPKV_WEIGHTS=huge (the file read into anonymous huge pages: 2 MiB pages whatever the page
  // cache holds, for a long generation, at the price of zeroing and copying the whole file at
  // load, about 1.5-3 s of system time for the 1.4 GB F16 0.73B file on the development VM, and
  // the RSS of parts a map would never touch, such as an untied token embedding).
  // SNAPKV_WEIGHTS=mmap names the default; it is read once, any other value throws
  // std::invalid_argument.
  static gguf::File::Storage weight_storage();
  // Takes ownership of a parsed file (e.g. gguf::File::from_bytes for in-memory models).
  explicit LlamaModel(gguf::File file);

  LlamaModel(LlamaModel&&) noexcept;
  LlamaModel& operator=(LlamaModel&&) noexcept;
  LlamaModel(const LlamaModel&) = delete;
  LlamaModel& operator=(const LlamaModel&) = delete;
  ~LlamaModel();

  const LlamaConfig& config() const { return config_; }
  const LlamaWeights& weights() const { return weights_; }
  const gguf::File& file() const { return *file_; }
  // Bytes of all weight tensors as stored (the mapped size the forward pass reads).
  size_t weight_bytes() const { return weight_bytes_; }
  // The RoPE parameters of the model (layout, base, linear scale, frequency factors).
  RopeParams rope_params() const;

  // Policy kvzap's learned scorer (model/kvzap.h): load(path) reads the sidecar
  // kvzap_sidecar_path(path), or the file the environment variable SNAPKV_KVZAP names when it is
  // set and not empty, when it exists and was trained for this model; null otherwise, and
  // kvzap_status() then says why (absent, another model's, unreadable).
  const KvzapScorer* kvzap() const { return kvzap_.get(); }
  const std::string& kvzap_status() const { return kvzap_status_; }
  // Reads the scorer from another path; throws snapkv::RuntimeError when it is unreadable or was
  // trained for another model (the model keeps its previous scorer then).
  void load_kvzap(const std::string& path);
  void set_kvzap(KvzapScorer scorer);
  KvzapDims kvzap_dims() const;

  // Head types for head_allocation duo / duo_ada (model/head_types.h), found as kvzap's scorer
  // is: head_types_sidecar_path(path), or the file SNAPKV_HEADS names when set and not empty; null
  // otherwise, and head_types_status() says why.
  const HeadTypes* head_types() const { return head_types_.get(); }
  const std::string& head_types_status() const { return head_types_status_; }
  // Reads head types from another path; throws snapkv::RuntimeError when unreadable or measured
  // on another model (the model keeps its previous ones then).
  void load_head_types(const std::string& path);
  void set_head_types(HeadTypes types);

 private:
  // Tries head_types_sidecar_path(model_path); records why not in head_types_status_.
  void find_head_types_sidecar(const std::string& model_path);
  // Tries kvzap_sidecar_path(model_path); records why not in kvzap_status_.
  void find_kvzap_sidecar(const std::string& model_path);

  std::unique_ptr<gguf::File> file_;  // stable address: weights_ point into its mapping
  LlamaConfig config_;
  LlamaWeights weights_;
  size_t weight_bytes_ = 0;
  std::shared_ptr<const KvzapScorer> kvzap_;
  std::string kvzap_status_ = "no scorer weights (a model not loaded from a file)";
  std::shared_ptr<const HeadTypes> head_types_;
  std::string head_types_status_ = "no head types (a model not loaded from a file)";
};

struct SessionOptions {
  size_t prefill_chunk = 512;  // tokens per prefill forward (>= 1)
  // Policy kvzip: the context-reconstruction pass run after the prompt (model/kvzip.h).
  ReconstructionOptions reconstruction = {};
  // Called by prefill() after each chunk with ("prefill", positions done, prompt length), and
  // around policy kvzip's reconstruction pass with ("kvzip", 0, 1) and ("kvzip", 1, 1). For
  // progress displays; it must not touch the session.
  std::function<void(const char* phase, size_t done, size_t total)> progress = {};
};

class LlamaSession {
 public:
  // Builds one cache per layer with build_caches(model dims, cache_config). The model must outlive
  // the session. Throws std::invalid_argument for a bad config or options.
  LlamaSession(const LlamaModel& model, const CacheConfig& cache_config,
               SessionOptions options = {});
  // What the constructor checks of the model for a config, on its own: throws
  // std::invalid_argument naming what is missing when the config needs more than the weights
  // (policy kvzap: the model's scorer; head_allocation duo / duo_ada: its head types). For a
  // front end that must refuse a request before it answers (the server, before a stream starts).
  static void check_model_supports(const LlamaModel& model, const CacheConfig& cache_config);

  // Runs the whole prompt (at least one token, each in [0, n_vocab)) and returns the logits of its
  // last position [n_vocab]. With all_logits, also fills it with every position's logits
  // [n_tokens][n_vocab]. Only once per session, before any decode(); the prompt must fit in
  // n_ctx (std::invalid_argument otherwise) unless the plan allows a long prompt (see above).
  std::vector<float> prefill(std::span<const int32_t> tokens,
                             std::vector<float>* all_logits = nullptr);
  // Shared prefill: runs the prompt like prefill() but leaves every cache's prompt open (no
  // end_prompt()), so that fork() can hand the same prefill to several cache configs. Needs a
  // config that can be a fork base (kv/core/fork.h can_be_fork_base: chunk_mode end_of_prompt and
  // an evicting policy; std::invalid_argument otherwise); a config that wants window queries keeps
  // them, and every target then shares them. The session itself can then only be forked:
  // decode() and extend() throw.
  std::vector<float> prefill_shared(std::span<const int32_t> tokens);
  // A new session on the same model with `config`, in exactly the state a session built with
  // `config` reaches after prefill() of the same tokens (LayerCache::fork on every layer, then
  // end_prompt(): the prompt is compressed by config's policy). Only after prefill_shared();
  // config must have this session's fork key (kv/core/fork.h can_fork: the same window and codec;
  // the window also fixes the prefill's chunk boundaries) and the session options are copied.
  // Policy kvzip: the fork runs the reconstruction pass on its own (uncompressed) caches, unless
  // `scores` holds the pass's result for this prefill (the pass does not depend on the target
  // config's policy or budget, so one pass serves every kvzip fork of a prefill).
  LlamaSession fork(const CacheConfig& config, const ReconstructionScores* scores = nullptr) const;
  // KVzip's context-reconstruction pass over the prompt (model/kvzip.h): per layer and KV head,
  // the largest attention each retained row receives. Leaves every cache exactly as it was
  // (rows, positions, offset). Needs a prefill; runs on the rows retained now (a kvzip or
  // shared-prefill session keeps them all until it compresses). normalized: KVzip+'s scores
  // (policy kvzip_plus; model/kvzip.h).
  ReconstructionScores reconstruction_scores(bool normalized = false);
  // The scores a kvzip session compressed its prompt with (computed or handed to fork()); null
  // for other policies or before the prompt ended.
  const ReconstructionScores* reconstruction() const {
    return reconstruction_.layers.empty() ? nullptr : &reconstruction_;
  }
  // Appends one token at position offset() and returns its logits [n_vocab].
  std::vector<float> decode(int32_t token);
  // One decode step of several sessions at once: sessions[b] appends tokens[b] at its own
  // position offset() and the result holds its logits at [b][n_vocab] (B = sessions.size() >= 1,
  // == tokens.size()). The sessions must be distinct, run on this same model object, and each be
  // able to decode() (prefilled, not a shared prefill, context not full; std::invalid_argument
  // otherwise, before any session changes). Every weight product runs once over the B rows (the
  // weights are read once per step instead of B times); RoPE, attention and the cache update stay
  // per session, each with its own compressed cache, config and position, exactly as decode()
  // does them. B = 1 has decode()'s bits, and so has every B where the products over B rows
  // have the per-row gemv's: Q8_0 weights under the default precision (integer dots per block),
  // F32 / F16 weights below kGemmMinTokens rows (ops/gemm.h); above that F32 / F16 products run
  // through sgemm and differ in summation order only. Defined in src/model/llama_batch.cpp.
  static std::vector<float> decode_batch(std::span<LlamaSession* const> sessions,
                                         std::span<const int32_t> tokens);
  // Appends tokens after the prompt WITHOUT compression (UpdateKind::decode: every row is kept,
  // nothing is evicted, unless the config sets a decode-time budget, which then applies to these
  // rows as to decode()'s), in forwards of prefill_chunk tokens, and returns the logits of the last
  // one [n_vocab]; with all_logits, every position's [n_tokens][n_vocab]. For the
  // question-agnostic protocol (context compressed alone, question appended) and perplexity of a
  // continuation. Only after prefill(); must fit in n_ctx. Defined in src/model/llama_extend.cpp.
  std::vector<float> extend(std::span<const int32_t> tokens,
                            std::vector<float>* all_logits = nullptr);

  // Persisted prompt caches (model/prompt_cache.h): a session whose prompt has already run,
  // built from its caches (one per layer, this model's dimensions, one config, prompts ended, the
  // same offset <= n_ctx; std::invalid_argument otherwise). decode() and extend() go on from
  // there exactly as in the session that produced the caches. Defined in
  // src/model/llama_restore.cpp.
  static LlamaSession from_caches(const LlamaModel& model, std::vector<LayerCache> caches,
                                  SessionOptions options = {});
  // An independent copy (every cache cloned), e.g. one loaded prompt forked per question.
  LlamaSession clone() const;

  // An independent copy holding only the first n tokens (1 <= n <= n_past()): the state a
  // session with the same config and options reaches after the first n tokens alone, ready for
  // extend() and decode(); this session is unchanged. Only for caches that keep every row exactly
  // (LayerCache::truncated: policy full, codec fp16, no decode-time budget) and a prefilled
  // session that is not a shared prefill; std::invalid_argument otherwise. For reusing the
  // common prefix of a stored prompt and a new one.
  LlamaSession truncated(size_t n) const;

  size_t n_past() const;  // tokens seen (== every cache's offset())
  // The position the next token is rotated at (every cache's next_position()): n_past() until
  // the caches are re-indexed.
  size_t next_position() const;
  // The position a forward of s tokens would start at: next_position() while that leaves room
  // (next_position() + s <= n_ctx), else the position re-indexing would give (the most rows any
  // head of any layer retains) when the plan allows it; nullopt when the forward cannot run.
  std::optional<size_t> position_for(size_t s) const;
  const std::vector<LayerCache>& caches() const { return caches_; }
  CacheStats cache_stats() const { return total_stats(caches_); }
  const LlamaModel& model() const { return *model_; }

 private:
  // Adopts `caches` (one per layer: built, restored, cloned or forked) instead of building them;
  // validates the options and sets the caches' RoPE and the prefill plan.
  LlamaSession(const LlamaModel& model, const CacheConfig& cache_config, SessionOptions options,
               std::vector<LayerCache> caches);

  // Forward of S tokens at positions n_past() .. n_past()+S-1 (or first_position .. when given:
  // only for the reconstruction probe, which stores nothing); logits for the rows requested.
  void forward(std::span<const int32_t> tokens, UpdateKind kind, size_t n_window_rows,
               float* logits, bool all_rows, std::optional<size_t> first_position = {});
  std::vector<float> run_prompt(std::span<const int32_t> tokens, std::vector<float>* all_logits,
                                bool end_prompt);
  void check_not_shared(const char* what) const;
  // Before a forward of s tokens: re-indexes every cache when next_position() + s would pass
  // n_ctx and the plan allows it (LayerCache::reindex); throws std::invalid_argument (`what`
  // names the caller) when the forward cannot fit. make_room_check only throws, changing nothing.
  void make_room(size_t s, const std::string& what);
  void make_room_check(size_t s, const std::string& what) const;
  // Policy kvzip: ends the prompt of every cache with the reconstruction pass's scores (computed
  // here when `scores` is null). Defined in src/model/kvzip_pass.cpp.
  void compress_kvzip(const ReconstructionScores* scores);
  // Policies kvzap and kvzap_snapkv: end the prompt of every cache with the learned scorer's
  // scores (defined in src/model/kvzap_session.cpp); check_kvzap throws, naming the policy, when
  // the model has no scorer.
  void compress_kvzap();
  static void check_kvzap(const LlamaModel& model, PolicyKind policy);
  // head_allocation duo / duo_ada with an evicting policy: check_head_types throws when the model
  // has no head types; apply_head_types hands each cache its layer's streaming mask (defined in
  // src/model/head_types_session.cpp).
  static void check_head_types(const LlamaModel& model, const CacheConfig& config);
  void apply_head_types();

  const LlamaModel* model_;
  CacheConfig cache_config_;
  SessionOptions options_;
  std::vector<LayerCache> caches_;
  bool prefilled_ = false;
  PrefillPlan plan_;            // what the caches need from the forwards (kv/core/prefill_plan.h)
  bool shared_prompt_ = false;  // prefill_shared(): prompt left open for fork()
  std::vector<int32_t> prompt_tokens_;  // [n_prompt] (the reconstruction pass repeats them)
  // Set only during reconstruction_scores(): forward() then calls it per layer with the rotated
  // queries [n_heads][S][hd], keys [n_kv_heads][S][hd] and the residual stream entering the layer
  // [S][n_embd] instead of updating the cache.
  std::function<void(size_t, const Tensor3&, const Tensor3&, const float*)> probe_;
  ReconstructionScores reconstruction_;  // see reconstruction()
};

}  // namespace snapkv
