// KVzip's context-reconstruction pass (model/kvzip.h): LlamaSession::reconstruction_scores runs the
// repeat prompt + context through the layers without storing anything and keeps, per cached row,
// the largest attention it receives; the max-attention kernel and its double reference.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "ops/cblas.h"
#include "snapkv/model/kvzip.h"
#include "snapkv/model/llama.h"
#include "snapkv/model/tokenizer.h"
#include "snapkv/ops/dot.h"
#include "snapkv/ops/gemm.h"
#include "snapkv/ops/softmax.h"
#include "snapkv/util/error.h"
#include "snapkv/util/parallel.h"
#include "snapkv/util/text.h"
#include "snapkv/util/timer.h"

namespace snapkv {
namespace {

constexpr const char* kComponent = "kvzip";
// Query rows per block (bounds the logits scratch to kQueryBlock * n_rows floats).
constexpr size_t kQueryBlock = 32;

void check_sizes(size_t n_rows, size_t n_group, size_t n_queries, size_t head_dim) {
  if (n_rows == 0 || n_group == 0 || n_queries == 0 || head_dim == 0) {
    throw_invalid(kComponent, "sizes must be positive",
                  "n_rows " + num(n_rows) + ", n_group " + num(n_group) + ", n_queries " +
                      num(n_queries) + ", head_dim " + num(head_dim),
                  "all >= 1");
  }
  if (n_rows > static_cast<size_t>(std::numeric_limits<int>::max() / 2)) {
    throw_invalid(kComponent, "too many rows for BLAS", num(n_rows), "< 2^30");
  }
}

}  // namespace

std::vector<ReconstructionChunk> reconstruction_plan(size_t n_context, size_t n_past, size_t n_ctx,
                                                     const ReconstructionOptions& options) {
  if (options.chunk == 0) throw_invalid(kComponent, "reconstruction chunk", "0", ">= 1 token");
  if (n_past > n_ctx) {
    throw_invalid(kComponent, "cache longer than the model's context", num(n_past),
                  "<= context_length = " + num(n_ctx));
  }
  const size_t fixed = options.prompt.size() + options.overlap;  // a bound for every chunk
  if (fixed + 1 > n_ctx) {
    throw_invalid(kComponent, "repeat prompt + overlap do not fit the model's context",
                  num(options.prompt.size()) + " + " + num(options.overlap) + " tokens",
                  "< context_length = " + num(n_ctx));
  }
  const size_t room = n_ctx - n_past > fixed ? n_ctx - n_past - fixed : 0;
  const size_t chunk = std::min(options.chunk, std::max(room, kMinReconstructionChunk));
  // Even a shrunk chunk must fit the model on its own.
  const size_t length = std::min(chunk, n_ctx - fixed);
  std::vector<ReconstructionChunk> plan;
  for (size_t begin = 0; begin < n_context; begin += length) {
    ReconstructionChunk c;
    c.begin = begin;
    c.end = std::min(n_context, begin + length);
    c.overlap = std::min(options.overlap, begin);
    const size_t tokens = options.prompt.size() + c.overlap + (c.end - c.begin);
    c.first_position = std::min(n_past, n_ctx - tokens);
    plan.push_back(c);
  }
  return plan;
}

std::vector<int32_t> kvzip_repeat_prompt(const Tokenizer& tokenizer) {
  return tokenizer.encode(kRepeatInstruction, false);
}

namespace {

// Both forms: out [n_rows] with the max over every query row (query_weight null), or out
// [n_group][n_rows] with each probability times query_weight[i].
void max_attention(float* out, const float* cached_keys, size_t n_rows, const float* queries,
                   size_t n_group, size_t n_queries, const float* own_keys, size_t head_dim,
                   const float* query_weight) {
  check_sizes(n_rows, n_group, n_queries, head_dim);
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  const size_t n_total = n_group * n_queries;  // query rows, [n_group][n_queries]
  const size_t block = std::min(kQueryBlock, n_total);
  std::vector<float> cached(block * n_rows);  // [block][n_rows]
  std::vector<float> own(block * n_queries);  // [block][n_queries], row r uses i(r) + 1
  for (size_t r0 = 0; r0 < n_total; r0 += block) {
    const size_t m = std::min(block, n_total - r0);
    // queries rows r0 .. r0 + m - 1 are contiguous: [n_group][n_queries][head_dim] flattened.
    // ops' sgemm_nt: the same cblas_sgemm call, or its own loops under an address-space limit
    // (where OpenBLAS would spin on its buffers; ops/gemm.h blas_allowed).
    sgemm_nt(cached.data(), queries + r0 * head_dim, cached_keys, m, n_rows, head_dim, scale,
             n_rows);
    for (size_t r = 0; r < m; ++r) {
      const size_t i = (r0 + r) % n_queries;  // position of the query inside the chunk
      const float* q = queries + (r0 + r) * head_dim;
      float* c_row = cached.data() + r * n_rows;
      float* o_row = own.data() + r * n_queries;
      for (size_t j = 0; j <= i; ++j) o_row[j] = scale * dot(q, own_keys + j * head_dim, head_dim);
      const float shift = std::max(max_value(c_row, n_rows), max_value(o_row, i + 1));
      const float sum = exp_shift_sum(c_row, n_rows, shift) + exp_shift_sum(o_row, i + 1, shift);
      float inv = 1.0f / sum;  // >= 1 term equal to 1
      float* target = out;
      if (query_weight != nullptr) {
        inv *= query_weight[i];
        target = out + ((r0 + r) / n_queries) * n_rows;
      }
      for (size_t j = 0; j < n_rows; ++j) target[j] = std::max(target[j], c_row[j] * inv);
    }
  }
}

}  // namespace

void reconstruction_max_attention(float* out, const float* cached_keys, size_t n_rows,
                                  const float* queries, size_t n_group, size_t n_queries,
                                  const float* own_keys, size_t head_dim) {
  max_attention(out, cached_keys, n_rows, queries, n_group, n_queries, own_keys, head_dim, nullptr);
}

void reconstruction_max_weighted_attention(float* out, const float* cached_keys, size_t n_rows,
                                           const float* queries, size_t n_group, size_t n_queries,
                                           const float* own_keys, size_t head_dim,
                                           const float* query_weight) {
  if (query_weight == nullptr) {
    throw_invalid(kComponent, "weighted attention without weights", "null", "n_queries weights");
  }
  max_attention(out, cached_keys, n_rows, queries, n_group, n_queries, own_keys, head_dim,
                query_weight);
}

void value_output_norms(float* out, const float* wo, size_t n_embd, size_t n_heads,
                        size_t n_kv_heads, size_t head_dim, const float* values, size_t n_rows) {
  if (n_embd == 0 || n_heads == 0 || n_kv_heads == 0 || head_dim == 0 || n_heads % n_kv_heads) {
    throw_invalid(kComponent, "output-norm sizes",
                  "n_embd " + num(n_embd) + ", heads " + num(n_heads) + "/" + num(n_kv_heads) +
                      ", head_dim " + num(head_dim),
                  "positive, n_heads a multiple of n_kv_heads");
  }
  const size_t q_dim = n_heads * head_dim, n_group = n_heads / n_kv_heads;
  parallel_for(n_heads, [&](size_t h) {
    // Head h's columns of W_O as rows: wt [head_dim][n_embd]; its Gram g = wt wt^T.
    std::vector<float> wt(head_dim * n_embd), g(head_dim * head_dim), u(head_dim);
    for (size_t r = 0; r < n_embd; ++r) {
      for (size_t d = 0; d < head_dim; ++d) wt[d * n_embd + r] = wo[r * q_dim + h * head_dim + d];
    }
    for (size_t d = 0; d < head_dim; ++d) {
      for (size_t e = 0; e <= d; ++e) {
        const float v = dot(wt.data() + d * n_embd, wt.data() + e * n_embd, n_embd);
        g[d * head_dim + e] = v;
        g[e * head_dim + d] = v;
      }
    }
    const float* vh = values + (h / n_group) * n_rows * head_dim;
    for (size_t j = 0; j < n_rows; ++j) {
      const float* v = vh + j * head_dim;
      for (size_t d = 0; d < head_dim; ++d) u[d] = dot(g.data() + d * head_dim, v, head_dim);
      out[h * n_rows + j] = std::sqrt(std::max(0.0f, dot(u.data(), v, head_dim)));
    }
  });
}

void reconstruction_max_attention_ref(double* out, const float* cached_keys, size_t n_rows,
                                      const float* queries, size_t n_group, size_t n_queries,
                                      const float* own_keys, size_t head_dim,
                                      const float* query_weight) {
  check_sizes(n_rows, n_group, n_queries, head_dim);
  const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
  auto dot_ref = [head_dim](const float* a, const float* b) {
    double s = 0.0;
    for (size_t d = 0; d < head_dim; ++d)
      s += static_cast<double>(a[d]) * static_cast<double>(b[d]);
    return s;
  };
  std::vector<double> logits(n_rows + n_queries);
  for (size_t g = 0; g < n_group; ++g) {
    for (size_t i = 0; i < n_queries; ++i) {
      const float* q = queries + (g * n_queries + i) * head_dim;
      double max_logit = -std::numeric_limits<double>::infinity();
      for (size_t j = 0; j < n_rows; ++j) {
        logits[j] = scale * dot_ref(q, cached_keys + j * head_dim);
        max_logit = std::max(max_logit, logits[j]);
      }
      for (size_t j = 0; j <= i; ++j) {
        logits[n_rows + j] = scale * dot_ref(q, own_keys + j * head_dim);
        max_logit = std::max(max_logit, logits[n_rows + j]);
      }
      double sum = 0.0;
      for (size_t j = 0; j < n_rows + i + 1; ++j) sum += std::exp(logits[j] - max_logit);
      const double w = query_weight != nullptr ? query_weight[i] : 1.0;
      double* target = query_weight != nullptr ? out + g * n_rows : out;
      for (size_t j = 0; j < n_rows; ++j) {
        target[j] = std::max(target[j], w * std::exp(logits[j] - max_logit) / sum);
      }
    }
  }
}

ReconstructionScores LlamaSession::reconstruction_scores(bool normalized) {
  if (!prefilled_ || prompt_tokens_.empty()) {
    throw_invalid(kComponent, "reconstruction pass before a prefill", "no prompt",
                  "prefill() or prefill_shared() first");
  }
  const ReconstructionOptions& ro = options_.reconstruction;
  const LlamaConfig& c = model_->config();
  for (size_t i = 0; i < ro.prompt.size(); ++i) {
    if (ro.prompt[i] < 0 || static_cast<size_t>(ro.prompt[i]) >= c.n_vocab) {
      throw_invalid(kComponent, "repeat prompt token id out of range at index " + num(i),
                    std::to_string(ro.prompt[i]), "0.." + num(c.n_vocab - 1));
    }
  }
  Timer timer;
  ReconstructionScores result;
  result.normalized = normalized;
  result.n_rows = caches_.front().size();
  const size_t n_kv = c.n_kv_heads, hd = c.head_dim, n_group = c.n_heads / c.n_kv_heads;
  const size_t n_rows = result.n_rows;
  result.layers.assign(c.n_layers, std::vector<float>(n_kv * n_rows, 0.0f));
  // KVzip+: per layer, the weighted maxima per query head [n_heads][n_rows], and the weights of a
  // chunk's queries (1 / ||h_i||).
  std::vector<std::vector<float>> per_head;
  if (normalized) per_head.assign(c.n_layers, std::vector<float>(c.n_heads * n_rows, 0.0f));
  std::vector<float> query_weight;
  // The context to reconstruct: the prompt after its first token (BOS, a sink in every policy).
  const std::span<const int32_t> context = std::span<const int32_t>(prompt_tokens_).subspan(1);

  struct ProbeReset {  // the probe never outlives the pass, even when a forward throws
    LlamaSession* session;
    ~ProbeReset() { session->probe_ = nullptr; }
  } reset{this};
  probe_ = [&](size_t layer, const Tensor3& q, const Tensor3& k, const float* x) {
    const LayerCache& cache = caches_[layer];
    SNAPKV_CHECK(cache.size() == n_rows);
    if (normalized) {
      query_weight.resize(q.dim1);
      for (size_t i = 0; i < q.dim1; ++i) {
        const float norm = std::sqrt(dot(x + i * c.n_embd, x + i * c.n_embd, c.n_embd));
        query_weight[i] = norm > 0.0f ? 1.0f / norm : 0.0f;
      }
    }
    parallel_for(n_kv, [&](size_t h) {
      std::vector<float> keys(n_rows * hd);  // [n_rows][hd], as the cache decodes them
      cache.read_keys(h, keys.data());
      const float* queries = q.data + h * n_group * q.dim1 * hd;
      const float* own = k.data + h * k.dim1 * hd;
      if (normalized) {
        reconstruction_max_weighted_attention(per_head[layer].data() + h * n_group * n_rows,
                                              keys.data(), n_rows, queries, n_group, q.dim1, own,
                                              hd, query_weight.data());
      } else {
        reconstruction_max_attention(result.layers[layer].data() + h * n_rows, keys.data(), n_rows,
                                     queries, n_group, q.dim1, own, hd);
      }
    });
  };
  std::vector<int32_t> tokens;
  for (const ReconstructionChunk& chunk :
       reconstruction_plan(context.size(), next_position(), c.n_ctx, ro)) {
    tokens.assign(ro.prompt.begin(), ro.prompt.end());
    tokens.insert(tokens.end(),
                  context.begin() + static_cast<std::ptrdiff_t>(chunk.begin - chunk.overlap),
                  context.begin() + static_cast<std::ptrdiff_t>(chunk.end));
    forward(tokens, UpdateKind::decode, 0, nullptr, false, chunk.first_position);
  }
  if (normalized) {
    // score(h, j) = max over the group's query heads g of per_head(g, j) * ||W_O^(g) v_j||.
    const size_t q_dim = c.n_heads * hd;
    std::vector<float> wo(c.n_embd * q_dim), values(n_kv * n_rows * hd), norms(c.n_heads * n_rows);
    for (size_t l = 0; l < c.n_layers; ++l) {
      dequantize_rows(wo.data(), model_->weights().layers[l].wo, 0, c.n_embd);
      for (size_t h = 0; h < n_kv; ++h) caches_[l].read_values(h, values.data() + h * n_rows * hd);
      value_output_norms(norms.data(), wo.data(), c.n_embd, c.n_heads, n_kv, hd, values.data(),
                         n_rows);
      for (size_t h = 0; h < n_kv; ++h) {
        float* out = result.layers[l].data() + h * n_rows;
        for (size_t g = h * n_group; g < (h + 1) * n_group; ++g) {
          for (size_t j = 0; j < n_rows; ++j) {
            out[j] = std::max(out[j], per_head[l][g * n_rows + j] * norms[g * n_rows + j]);
          }
        }
      }
    }
  }
  result.seconds = timer.seconds();
  return result;
}

void LlamaSession::compress_kvzip(const ReconstructionScores* scores) {
  const bool normalized = plan_.normalized_scores;
  if (scores != nullptr && scores->normalized != normalized) {
    throw_invalid(kComponent, "reconstruction scores of the other kind",
                  scores->normalized ? "KVzip+ scores" : "KVzip scores",
                  normalized ? "KVzip+ scores (policy kvzip_plus)" : "KVzip scores (policy kvzip)");
  }
  ReconstructionScores computed = scores == nullptr ? reconstruction_scores(normalized) : *scores;
  const size_t n_kv = model_->config().n_kv_heads;
  bool fits = computed.layers.size() == caches_.size();
  for (size_t l = 0; fits && l < caches_.size(); ++l) {
    fits =
        computed.n_rows == caches_[l].size() && computed.layers[l].size() == n_kv * computed.n_rows;
  }
  if (!fits) {
    throw_invalid(kComponent, "reconstruction scores do not match the session",
                  num(computed.layers.size()) + " layers x " + num(computed.n_rows) + " rows",
                  num(caches_.size()) + " layers x " + num(caches_.front().size()) + " rows");
  }
  for (size_t l = 0; l < caches_.size(); ++l) caches_[l].compress_with_scores(computed.layers[l]);
  reconstruction_ = std::move(computed);
}

}  // namespace snapkv
