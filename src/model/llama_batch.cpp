// LlamaSession::decode_batch (model/llama.h): one decode step of B sessions, the weight products
// run once over the B rows, RoPE / attention / cache update per session.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "snapkv/model/llama.h"
#include "snapkv/ops/activation.h"
#include "snapkv/ops/gemm.h"
#include "snapkv/ops/rmsnorm.h"
#include "snapkv/ops/rope.h"
#include "snapkv/util/error.h"
#include "snapkv/util/text.h"

namespace snapkv {
namespace {

constexpr const char* kComponent = "llama";

void add_in_place(float* x, const float* y, size_t n) {
  for (size_t i = 0; i < n; ++i) x[i] += y[i];
}

void add_bias_rows(float* x, const float* bias, size_t n_rows, size_t n) {
  if (bias == nullptr) return;
  for (size_t r = 0; r < n_rows; ++r) add_in_place(x + r * n, bias, n);
}

// outs[i] [B][ws[i].rows] = x [B][cols] ws[i]^T. One row goes through gemv_multi (one parallel
// region, decode()'s bits); several through matmul, which reads each weight row once for all.
void products(float* const* outs, const float* x, const WeightMatrix* ws, size_t count, size_t B) {
  if (B == 1) {
    gemv_multi(outs, x, ws, count);
    return;
  }
  for (size_t i = 0; i < count; ++i) matmul(outs[i], x, ws[i], B);
}

}  // namespace

std::vector<float> LlamaSession::decode_batch(std::span<LlamaSession* const> sessions,
                                              std::span<const int32_t> tokens) {
  const size_t B = sessions.size();
  if (B == 0) throw_invalid(kComponent, "batched decode of no sessions", "0", ">= 1");
  if (tokens.size() != B) {
    throw_invalid(kComponent, "batched decode tokens", num(tokens.size()) + " tokens",
                  num(B) + " (one per session)");
  }
  const LlamaModel* model = sessions[0] != nullptr ? sessions[0]->model_ : nullptr;
  for (size_t b = 0; b < B; ++b) {
    LlamaSession* s = sessions[b];
    if (s == nullptr)
      throw_invalid(kComponent, "batched decode session " + num(b), "null", "a session");
    if (s->model_ != model) {
      throw_invalid(kComponent, "batched decode session " + num(b) + " model",
                    "another model object", "the model of session 0");
    }
    for (size_t a = 0; a < b; ++a) {
      if (sessions[a] == s) {
        throw_invalid(kComponent, "batched decode session " + num(b),
                      "the same as session " + num(a), "distinct sessions");
      }
    }
    const LlamaConfig& c = model->config();
    if (!s->prefilled_) {
      throw_invalid(kComponent, "batched decode session " + num(b) + " before prefill", "no prompt",
                    "prefill first");
    }
    s->check_not_shared("decode");
    if (!s->plan_.reindex && s->next_position() >= c.n_ctx) {
      throw_invalid(kComponent, "batched decode session " + num(b) + " context full",
                    num(s->n_past()) + " tokens",
                    "< " + std::string(c.arch_name()) + ".context_length = " + num(c.n_ctx));
    }
    if (tokens[b] < 0 || static_cast<size_t>(tokens[b]) >= c.n_vocab) {
      throw_invalid(kComponent, "batched decode token id out of range at " + num(b),
                    std::to_string(tokens[b]), "0.." + num(c.n_vocab - 1));
    }
    s->make_room_check(1, "batched decode session " + num(b));
  }
  // Every session can step: re-index those at the context, as decode() would.
  for (size_t b = 0; b < B; ++b) sessions[b]->make_room(1, "batched decode session " + num(b));

  const LlamaConfig& c = model->config();
  const LlamaWeights& w = model->weights();
  const size_t hd = c.head_dim, nh = c.n_heads, nkv = c.n_kv_heads;
  const size_t q_dim = c.q_dim(), kv_dim = c.kv_dim();

  // Row b is session b's token at its own position: one RoPE table row per session.
  std::vector<int64_t> positions(B);
  for (size_t b = 0; b < B; ++b) positions[b] = static_cast<int64_t>(sessions[b]->next_position());
  const RopeTable rope(positions.data(), B, model->rope_params());

  std::vector<float> x(B * c.n_embd);  // [B][n_embd] residual stream
  for (size_t b = 0; b < B; ++b) {
    const auto id = static_cast<size_t>(tokens[b]);
    dequantize_rows(x.data() + b * c.n_embd, w.token_embd, id, id + 1);
  }
  std::vector<float> xb(B * c.n_embd);
  // With one token per session, [n_heads][1][hd] (the cache's layout) is [1][n_heads][hd] (the
  // projection's): row b of q / k / v is session b's head-major tensor as it stands.
  std::vector<float> q(B * q_dim), k(B * kv_dim), v(B * kv_dim);
  std::vector<float> att(B * q_dim), proj(B * c.n_embd);
  std::vector<float> gate(B * c.n_ff), up(B * c.n_ff);

  for (size_t l = 0; l < c.n_layers; ++l) {
    const LlamaLayerWeights& lw = w.layers[l];
    rmsnorm_rows(xb.data(), x.data(), lw.attn_norm, B, c.n_embd, c.rms_eps);
    {
      float* const outs[] = {q.data(), k.data(), v.data()};
      const WeightMatrix ws[] = {lw.wq, lw.wk, lw.wv};
      products(outs, xb.data(), ws, 3, B);
    }
    add_bias_rows(q.data(), lw.bq, B, q_dim);
    add_bias_rows(k.data(), lw.bk, B, kv_dim);
    add_bias_rows(v.data(), lw.bv, B, kv_dim);
    if (lw.q_norm != nullptr) rmsnorm_rows(q.data(), q.data(), lw.q_norm, B * nh, hd, c.rms_eps);
    if (lw.k_norm != nullptr) rmsnorm_rows(k.data(), k.data(), lw.k_norm, B * nkv, hd, c.rms_eps);
    rope.apply(q.data(), nh, hd);
    rope.apply(k.data(), nkv, hd);
    for (size_t b = 0; b < B; ++b) {
      LayerCache& cache = sessions[b]->caches_[l];
      float* qb = q.data() + b * q_dim;
      const Tensor3 qt{qb, nh, 1, hd};
      const Tensor3 kt{k.data() + b * kv_dim, nkv, 1, hd}, vt{v.data() + b * kv_dim, nkv, 1, hd};
      cache.attend(att.data() + b * q_dim, qt, kt, vt);
      // A decode-time budget takes the step's query into the cache's recent-query window.
      SNAPKV_CHECK(sessions[b]->plan_.decode_query_rows <= 1);  // one query row per step
      if (sessions[b]->plan_.decode_query_rows > 0) {
        cache.update(kt, vt, &qt, UpdateKind::decode);
      } else {
        cache.update(kt, vt, nullptr, UpdateKind::decode);
      }
    }
    matmul(proj.data(), att.data(), lw.wo, B);
    add_bias_rows(proj.data(), lw.bo, B, c.n_embd);
    add_in_place(x.data(), proj.data(), B * c.n_embd);

    rmsnorm_rows(xb.data(), x.data(), lw.ffn_norm, B, c.n_embd, c.rms_eps);
    {
      float* const outs[] = {gate.data(), up.data()};
      const WeightMatrix ws[] = {lw.w_gate, lw.w_up};
      products(outs, xb.data(), ws, 2, B);
    }
    swiglu(gate.data(), gate.data(), up.data(), B * c.n_ff);
    matmul(proj.data(), gate.data(), lw.w_down, B);
    add_in_place(x.data(), proj.data(), B * c.n_embd);
  }
  std::vector<float> logits(B * c.n_vocab);
  rmsnorm_rows(xb.data(), x.data(), w.output_norm, B, c.n_embd, c.rms_eps);
  matmul(logits.data(), xb.data(), w.output, B);
  return logits;
}

}  // namespace snapkv
