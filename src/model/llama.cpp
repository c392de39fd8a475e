// The forward pass (llama, qwen2, qwen3) over GGUF weights used in place, driving one LayerCache
// per layer. Which tensors each architecture has and how they are bound: src/model/arch.cpp.
#include "snapkv/model/llama.h"

#include "model/arch_weights.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>

#include "snapkv/kv/core/fork.h"
#include "snapkv/ops/activation.h"
#include "snapkv/ops/gemm.h"
#include "snapkv/ops/rmsnorm.h"
#include "snapkv/ops/rope.h"
#include "snapkv/util/error.h"
#include "snapkv/util/text.h"

namespace snapkv {
namespace {

constexpr const char* kComponent = "llama";

// dst [n_heads][S][hd] <- src [S][n_heads][hd]
void to_head_major(float* dst, const float* src, size_t n_tokens, size_t n_heads, size_t hd) {
  for (size_t t = 0; t < n_tokens; ++t) {
    for (size_t h = 0; h < n_heads; ++h) {
      std::memcpy(dst + (h * n_tokens + t) * hd, src + (t * n_heads + h) * hd, hd * sizeof(float));
    }
  }
}

// dst [S][n_heads][hd] <- src [n_heads][S][hd]
void to_token_major(float* dst, const float* src, size_t n_tokens, size_t n_heads, size_t hd) {
  for (size_t h = 0; h < n_heads; ++h) {
    for (size_t t = 0; t < n_tokens; ++t) {
      std::memcpy(dst + (t * n_heads + h) * hd, src + (h * n_tokens + t) * hd, hd * sizeof(float));
    }
  }
}

void add_in_place(float* x, const float* y, size_t n) {
  for (size_t i = 0; i < n; ++i) x[i] += y[i];
}

// x [n_rows][n] += bias [n] on every row (no-op for a null bias).
void add_bias_rows(float* x, const float* bias, size_t n_rows, size_t n) {
  if (bias == nullptr) return;
  for (size_t r = 0; r < n_rows; ++r) add_in_place(x + r * n, bias, n);
}

}  // namespace

// ---- LlamaModel -------------------------------------------------------------------------------

LlamaModel LlamaModel::load(const std::string& path) {
  return load(path, weight_storage());
}

LlamaModel LlamaModel::load(const std::string& path, gguf::File::Storage storage) {
  LlamaModel model(gguf::File::open(path, storage));
  model.find_kvzap_sidecar(path);
  model.find_head_types_sidecar(path);
  return model;
}

gguf::File::Storage LlamaModel::weight_storage() {
  static const gguf::File::Storage storage = [] {
    const char* env = std::getenv("SNAPKV_WEIGHTS");
    const std::string s = env != nullptr ? env : "";
    if (s.empty() || s == "mmap") return gguf::File::Storage::mapped;
    if (s == "huge") return gguf::File::Storage::huge_page_copy;
    throw_invalid(kComponent, "SNAPKV_WEIGHTS not a known storage", s, "mmap or huge");
  }();
  return storage;
}

LlamaModel::LlamaModel(gguf::File file) : file_(std::make_unique<gguf::File>(std::move(file))) {
  config_ = read_llama_config(*file_);
  weights_ = bind_weights(*file_, config_, &weight_bytes_);
}

RopeParams LlamaModel::rope_params() const {
  return RopeParams{config_.n_rot, config_.rope_freq_base, config_.rope_freq_scale,
                    config_.info().rope, weights_.rope_freqs};
}

LlamaModel::LlamaModel(LlamaModel&&) noexcept = default;
LlamaModel& LlamaModel::operator=(LlamaModel&&) noexcept = default;
LlamaModel::~LlamaModel() = default;

// ---- LlamaSession -----------------------------------------------------------------------------

LlamaSession::LlamaSession(const LlamaModel& model, const CacheConfig& cache_config,
                           SessionOptions options)
    : LlamaSession(model, cache_config, options,
                   build_caches(model.config().dims(), cache_config)) {
  check_model_supports(model, cache_config_);
}

void LlamaSession::check_model_supports(const LlamaModel& model, const CacheConfig& cache_config) {
  if (prefill_plan(cache_config).learned_scores) check_kvzap(model, cache_config.policy);
  check_head_types(model, cache_config);
}

LlamaSession::LlamaSession(const LlamaModel& model, const CacheConfig& cache_config,
                           SessionOptions options, std::vector<LayerCache> caches)
    : model_(&model), cache_config_(cache_config), options_(options), caches_(std::move(caches)) {
  if (options_.prefill_chunk == 0) {
    throw_invalid(kComponent, "prefill chunk size", "0", ">= 1");
  }
  for (LayerCache& cache : caches_) cache.set_rope(model.rope_params());
  plan_ = prefill_plan(cache_config_);
  apply_head_types();
}

size_t LlamaSession::n_past() const {
  return caches_.front().offset();
}

size_t LlamaSession::next_position() const {
  return caches_.front().next_position();
}

namespace {

// The most rows any KV head of any layer retains: where re-indexing puts the next token.
size_t most_rows(const std::vector<LayerCache>& caches) {
  size_t rows = 0;
  for (const LayerCache& cache : caches) rows = std::max(rows, cache.size());
  return rows;
}

}  // namespace

std::optional<size_t> LlamaSession::position_for(size_t s) const {
  const size_t n_ctx = model_->config().n_ctx;
  const size_t next = next_position();
  if (next + s <= n_ctx) return next;
  if (!plan_.reindex || cache_config_.codec != CodecKind::fp16) return std::nullopt;
  const size_t rows = most_rows(caches_);
  if (rows + s > n_ctx) return std::nullopt;
  return rows;
}

void LlamaSession::make_room_check(size_t s, const std::string& what) const {
  const LlamaConfig& c = model_->config();
  const size_t next = next_position();
  if (next + s <= c.n_ctx) return;
  if (!plan_.reindex) {
    throw_invalid(kComponent, what + " past the context", num(next) + " + " + num(s) + " tokens",
                  "<= " + std::string(c.arch_name()) + ".context_length = " + num(c.n_ctx) +
                      " (an evicting cache can go on past it)");
  }
  LayerCache::check_reindexable(cache_config_);
  const size_t rows = most_rows(caches_);
  if (rows + s > c.n_ctx) {
    throw_invalid(kComponent, what + ": context full of retained rows",
                  num(rows) + " rows + " + num(s) + " tokens",
                  "<= " + std::string(c.arch_name()) + ".context_length = " + num(c.n_ctx) +
                      " (a smaller budget, prefill chunk or decode budget)");
  }
}

void LlamaSession::make_room(size_t s, const std::string& what) {
  make_room_check(s, what);
  if (next_position() + s <= model_->config().n_ctx) return;
  const size_t rows = most_rows(caches_);
  for (LayerCache& cache : caches_) cache.reindex(rows);
}

std::vector<float> LlamaSession::prefill(std::span<const int32_t> tokens,
                                         std::vector<float>* all_logits) {
  return run_prompt(tokens, all_logits, true);
}

std::vector<float> LlamaSession::prefill_shared(std::span<const int32_t> tokens) {
  if (!can_be_fork_base(cache_config_)) {
    throw_invalid(kComponent, "shared prefill needs an open prompt",
                  "policy " + std::string(to_string(cache_config_.policy)) + ", chunk_mode " +
                      std::string(to_string(cache_config_.chunk_mode)),
                  "an evicting policy with chunk_mode end_of_prompt");
  }
  std::vector<float> logits = run_prompt(tokens, nullptr, false);
  shared_prompt_ = true;
  return logits;
}

LlamaSession LlamaSession::fork(const CacheConfig& config,
                                const ReconstructionScores* scores) const {
  if (!shared_prompt_) {
    throw_invalid(kComponent, "fork without a shared prefill",
                  prefilled_ ? "a prefill that ended its prompt" : "no prompt",
                  "prefill_shared() first");
  }
  config.validate();
  check_head_types(*model_, config);
  std::vector<LayerCache> forked;
  forked.reserve(caches_.size());
  for (size_t l = 0; l < caches_.size(); ++l) forked.push_back(caches_[l].fork(config, l));
  LlamaSession out(*model_, config, options_, std::move(forked));
  out.prefilled_ = true;
  out.prompt_tokens_ = prompt_tokens_;
  if (out.plan_.learned_scores) {
    out.compress_kvzap();
  } else if (out.plan_.scoring_pass) {
    out.compress_kvzip(scores);
  } else {
    for (LayerCache& cache : out.caches_) cache.end_prompt();
  }
  return out;
}

void LlamaSession::check_not_shared(const char* what) const {
  if (shared_prompt_) {
    throw_invalid(kComponent, std::string(what) + " on a shared prefill", "prompt left open",
                  "fork() the session, then run the fork");
  }
}

std::vector<float> LlamaSession::run_prompt(std::span<const int32_t> tokens,
                                            std::vector<float>* all_logits, bool end_prompt) {
  const LlamaConfig& c = model_->config();
  if (prefilled_) {
    throw_invalid(kComponent, "prefill called twice", "a second prompt",
                  "one prefill per session, then decode");
  }
  if (tokens.empty()) throw_invalid(kComponent, "empty prompt", "0 tokens", ">= 1 token");
  if (tokens.size() > c.n_ctx) {
    if (!plan_.long_prompt) {
      throw_invalid(kComponent, "prompt longer than the context", num(tokens.size()) + " tokens",
                    "<= " + std::string(c.arch_name()) + ".context_length = " + num(c.n_ctx));
    }
    LayerCache::check_reindexable(cache_config_);
    // Rows held between chunks stay within the budget (uniform allocation; AdaKV and PyramidKV
    // shares are checked chunk by chunk): the budget and one forward must fit the context.
    const size_t forward_rows = std::max(options_.prefill_chunk, plan_.window_rows);
    if (cache_config_.budget + forward_rows > c.n_ctx) {
      throw_invalid(
          kComponent, "a prompt longer than the context needs room for its chunks",
          "budget " + num(cache_config_.budget) + " + forward " + num(forward_rows) + " tokens",
          "<= " + std::string(c.arch_name()) + ".context_length = " + num(c.n_ctx));
    }
  }
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || static_cast<size_t>(tokens[i]) >= c.n_vocab) {
      throw_invalid(kComponent, "token id out of range at prompt index " + num(i),
                    std::to_string(tokens[i]), "0.." + num(c.n_vocab - 1));
    }
  }
  prefilled_ = true;
  prompt_tokens_.assign(tokens.begin(), tokens.end());
  const size_t n = tokens.size();
  // Chunk boundaries: every prefill_chunk tokens, except that the last chunk is extended backwards
  // to hold the prompt's last min(window, n) positions (the observation window's queries).
  const size_t chunk = options_.prefill_chunk;
  const size_t last_start = std::min(((n - 1) / chunk) * chunk, n - std::min(plan_.window_rows, n));
  if (all_logits != nullptr) all_logits->assign(n * c.n_vocab, 0.0f);
  std::vector<float> last(c.n_vocab);
  size_t start = 0;
  while (start < n) {
    const size_t end = start >= last_start ? n : std::min(start + chunk, last_start);
    const size_t s = end - start;
    const size_t window_rows = plan_.window_queries ? std::min(plan_.window_rows, s) : 0;
    const bool is_last = end == n;
    make_room(s, "prompt");
    if (all_logits != nullptr) {
      forward(tokens.subspan(start, s), UpdateKind::prefill, window_rows,
              all_logits->data() + start * c.n_vocab, true);
    } else {
      forward(tokens.subspan(start, s), UpdateKind::prefill, window_rows,
              is_last ? last.data() : nullptr, false);
    }
    start = end;
    if (options_.progress) options_.progress("prefill", end, n);
  }
  if (end_prompt && plan_.learned_scores) {
    compress_kvzap();
  } else if (end_prompt && plan_.scoring_pass) {
    if (options_.progress) options_.progress("kvzip", 0, 1);
    compress_kvzip(nullptr);
    if (options_.progress) options_.progress("kvzip", 1, 1);
  } else if (end_prompt) {
    for (LayerCache& cache : caches_) cache.end_prompt();
  }
  if (all_logits != nullptr) {
    std::copy_n(all_logits->data() + (n - 1) * c.n_vocab, c.n_vocab, last.data());
  }
  return last;
}

std::vector<float> LlamaSession::decode(int32_t token) {
  const LlamaConfig& c = model_->config();
  if (!prefilled_) throw_invalid(kComponent, "decode before prefill", "no prompt", "prefill first");
  check_not_shared("decode");
  if (!plan_.reindex && next_position() >= c.n_ctx) {
    throw_invalid(kComponent, "context full", num(n_past()) + " tokens",
                  "< " + std::string(c.arch_name()) + ".context_length = " + num(c.n_ctx));
  }
  if (token < 0 || static_cast<size_t>(token) >= c.n_vocab) {
    throw_invalid(kComponent, "token id out of range", std::to_string(token),
                  "0.." + num(c.n_vocab - 1));
  }
  make_room(1, "decode");
  std::vector<float> logits(c.n_vocab);
  // With a decode-time budget the step's query joins the cache's recent-query window.
  const size_t window_rows = plan_.decode_query_rows;
  forward(std::span<const int32_t>(&token, 1), UpdateKind::decode, window_rows, logits.data(),
          false);
  return logits;
}

void LlamaSession::forward(std::span<const int32_t> tokens, UpdateKind kind, size_t n_window_rows,
                           float* logits, bool all_rows, std::optional<size_t> first_position) {
  const LlamaConfig& c = model_->config();
  const LlamaWeights& w = model_->weights();
  const size_t S = tokens.size();
  const size_t hd = c.head_dim, nh = c.n_heads, nkv = c.n_kv_heads;
  const size_t q_dim = c.q_dim(), kv_dim = c.kv_dim();
  SNAPKV_CHECK(!first_position || probe_);  // only a probe that stores nothing moves positions
  const size_t p0 = first_position.value_or(next_position());
  SNAPKV_CHECK(p0 + S <= c.n_ctx);  // callers check the context; the kvzip pass plans within it

  std::vector<int64_t> positions(S);
  for (size_t t = 0; t < S; ++t) positions[t] = static_cast<int64_t>(p0 + t);
  const RopeTable rope(positions.data(), S, model_->rope_params());

  std::vector<float> x(S * c.n_embd);  // [S][n_embd] residual stream
  for (size_t t = 0; t < S; ++t) {
    const auto id = static_cast<size_t>(tokens[t]);
    dequantize_rows(x.data() + t * c.n_embd, w.token_embd, id, id + 1);
  }
  std::vector<float> xb(S * c.n_embd);                               // [S][n_embd] normed input
  std::vector<float> q(S * q_dim), k(S * kv_dim), v(S * kv_dim);     // token-major projections
  std::vector<float> qh(S * q_dim), kh(S * kv_dim), vh(S * kv_dim);  // head-major copies
  std::vector<float> att_h(S * q_dim), att(S * q_dim);   // attention output, both layouts
  std::vector<float> proj(S * c.n_embd);                 // [S][n_embd] output projections
  std::vector<float> gate(S * c.n_ff), up(S * c.n_ff);   // [S][n_ff]
  std::vector<float> q_window(nh * n_window_rows * hd);  // [n_heads][w][hd]

  for (size_t l = 0; l < c.n_layers; ++l) {
    const LlamaLayerWeights& lw = w.layers[l];
    LayerCache& cache = caches_[l];
    rmsnorm_rows(xb.data(), x.data(), lw.attn_norm, S, c.n_embd, c.rms_eps);
    if (S == 1) {  // decode: the three products in one parallel region, gemv's bits
      float* const outs[] = {q.data(), k.data(), v.data()};
      const WeightMatrix ws[] = {lw.wq, lw.wk, lw.wv};
      gemv_multi(outs, xb.data(), ws, 3);
    } else {
      matmul(q.data(), xb.data(), lw.wq, S);
      matmul(k.data(), xb.data(), lw.wk, S);
      matmul(v.data(), xb.data(), lw.wv, S);
    }
    add_bias_rows(q.data(), lw.bq, S, q_dim);
    add_bias_rows(k.data(), lw.bk, S, kv_dim);
    add_bias_rows(v.data(), lw.bv, S, kv_dim);
    if (lw.q_norm != nullptr) rmsnorm_rows(q.data(), q.data(), lw.q_norm, S * nh, hd, c.rms_eps);
    if (lw.k_norm != nullptr) rmsnorm_rows(k.data(), k.data(), lw.k_norm, S * nkv, hd, c.rms_eps);
    rope.apply(q.data(), nh, hd);
    rope.apply(k.data(), nkv, hd);
    to_head_major(qh.data(), q.data(), S, nh, hd);
    to_head_major(kh.data(), k.data(), S, nkv, hd);
    to_head_major(vh.data(), v.data(), S, nkv, hd);
    const Tensor3 qt{qh.data(), nh, S, hd}, kt{kh.data(), nkv, S, hd}, vt{vh.data(), nkv, S, hd};
    cache.attend(att_h.data(), qt, kt, vt);
    if (probe_) {
      probe_(l, qt, kt, x.data());  // reconstruction pass: observe, store nothing
    } else if (n_window_rows > 0) {
      for (size_t h = 0; h < nh; ++h) {
        std::memcpy(q_window.data() + h * n_window_rows * hd,
                    qh.data() + (h * S + (S - n_window_rows)) * hd,
                    n_window_rows * hd * sizeof(float));
      }
      const Tensor3 qw{q_window.data(), nh, n_window_rows, hd};
      cache.update(kt, vt, &qw, kind);
    } else {
      cache.update(kt, vt, nullptr, kind);
    }
    to_token_major(att.data(), att_h.data(), S, nh, hd);
    matmul(proj.data(), att.data(), lw.wo, S);
    add_bias_rows(proj.data(), lw.bo, S, c.n_embd);
    add_in_place(x.data(), proj.data(), S * c.n_embd);

    rmsnorm_rows(xb.data(), x.data(), lw.ffn_norm, S, c.n_embd, c.rms_eps);
    if (S == 1) {
      float* const outs[] = {gate.data(), up.data()};
      const WeightMatrix ws[] = {lw.w_gate, lw.w_up};
      gemv_multi(outs, xb.data(), ws, 2);
    } else {
      matmul(gate.data(), xb.data(), lw.w_gate, S);
      matmul(up.data(), xb.data(), lw.w_up, S);
    }
    swiglu(gate.data(), gate.data(), up.data(), S * c.n_ff);
    matmul(proj.data(), gate.data(), lw.w_down, S);
    add_in_place(x.data(), proj.data(), S * c.n_embd);
  }
  if (logits == nullptr) return;
  const size_t first = all_rows ? 0 : S - 1;
  const size_t n_rows = S - first;
  rmsnorm_rows(xb.data(), x.data() + first * c.n_embd, w.output_norm, n_rows, c.n_embd, c.rms_eps);
  matmul(logits, xb.data(), w.output, n_rows);
}

}  // namespace snapkv
