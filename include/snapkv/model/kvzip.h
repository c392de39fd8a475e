// KVzip (arXiv 2505.23416): question-agnostic scores from a context-reconstruction pass.
//
// Promises: after the prompt (the context) is prefilled with every row kept, the model runs a
// forward pass over a repeat prompt followed by the context tokens again, in chunks of
// `chunk` context tokens (chunk i > 0 repeats the previous chunk's last `overlap` tokens first), at
// positions offset() .. offset() + chunk length - 1, attending to the cached rows and causally to
// its own tokens, as long as those positions stay below the model's context_length; near the end
// of the context the chunks shrink to fit (reconstruction_plan() below). Nothing is stored: each
// chunk sees exactly the prefilled cache. A cached row's score is the largest attention probability
// it receives from any reconstruction query of its KV head's GQA group, in any chunk: softmax(q . k
// / sqrt(head_dim)) in fp32 over all cached rows plus the chunk's own keys up to the query.
// LlamaSession::reconstruction_scores() runs the pass; LayerCache::compress_with_scores() selects
// with the scores (policy kvzip; policy kvzip_plus with KVzip+'s normalised scores, below). The
// pass costs about one prefill of the context (plus the attention over the cache) and does not
// alter the cache. The scores are attention probabilities, comparable across heads: with
// head_allocation ada (ada-kvzip) a layer ranks them over all its KV heads, the paper's head-global
// budget within a layer. Leaves out: the paper's ranking across layers (pyramid-kvzip splits the
// total over layers by depth instead), the chat-template suffix (plain text prompts).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

namespace snapkv {

class Tokenizer;

struct ReconstructionOptions {
  std::vector<int32_t> prompt;  // repeat-prompt token ids (no BOS); may be empty (plain repeat)
  size_t chunk = 1024;          // context tokens per reconstruction forward (>= 1)
  size_t overlap = 8;           // tokens of the previous chunk repeated before chunk i > 0
};

struct ReconstructionScores {
  bool normalized = false;                 // KVzip+'s scores (below), else attention probabilities
  size_t n_rows = 0;                       // cached rows per KV head when the pass ran
  std::vector<std::vector<float>> layers;  // [n_layers][n_kv_heads * n_rows], in [0, 1]
  double seconds = 0.0;                    // wall time of the pass
};

// One reconstruction forward: context tokens [begin, end) preceded by the repeat prompt and the
// `overlap` context tokens before begin, at positions first_position .. first_position + length-1
// with length = prompt + overlap + (end - begin).
struct ReconstructionChunk {
  size_t begin = 0, end = 0, overlap = 0;
  size_t first_position = 0;
};

// The smallest chunk the plan shrinks to before it moves positions back instead.
inline constexpr size_t kMinReconstructionChunk = 32;

// The forwards that reconstruct n_context context tokens after a cache of n_past tokens, for a
// model of n_ctx positions, covering [0, n_context) in order. Each chunk starts at n_past and
// holds min(options.chunk, room) context tokens, room = n_ctx - n_past - prompt - overlap, so
// every position stays < n_ctx. When the room is below kMinReconstructionChunk (a context that
// nearly fills the model) the chunk holds min(options.chunk, kMinReconstructionChunk) tokens and
// is moved back to end at position n_ctx - 1 (documented clamp: its last queries then sit a few
// positions before the newest cached rows, a small relative-position error instead of positions
// the model never saw). std::invalid_argument when options.chunk is 0, n_past > n_ctx or one
// minimal forward (prompt + overlap + 1 token) exceeds n_ctx.
std::vector<ReconstructionChunk> reconstruction_plan(size_t n_context, size_t n_past, size_t n_ctx,
                                                     const ReconstructionOptions& options);

// The repeat instruction tokenized with the model's tokenizer (no BOS).
inline constexpr std::string_view kRepeatInstruction = "\n\nRepeat the previous context exactly.\n";
std::vector<int32_t> kvzip_repeat_prompt(const Tokenizer& tokenizer);

// One KV head, one reconstruction chunk: out[j] = max(out[j], max over g, i of the probability
// that query (g, i) puts on cached row j), where query (g, i) attends to every cached row and to
// own_keys[0..i]. out [n_rows] (accumulated, not cleared); cached_keys [n_rows][head_dim];
// queries [n_group][n_queries][head_dim]; own_keys [n_queries][head_dim]. All sizes >= 1.
void reconstruction_max_attention(float* out, const float* cached_keys, size_t n_rows,
                                  const float* queries, size_t n_group, size_t n_queries,
                                  const float* own_keys, size_t head_dim);
// KVzip+ (the normalisation kvpress's KVzap is trained on): query (g, i)'s probability on row j is
// weighted by query_weight[i] = 1 / ||h_i||, the norm of the query token's residual stream
// entering the layer, and kept per query head: out [n_group][n_rows] (accumulated, not cleared)
// = max over i of p(g, i, j) * query_weight[i]. The row's score is then max over g of
// out[g][j] * ||W_O^(g) v_j|| (value_output_norms), the size of what the row adds to the residual
// stream relative to what is there.
void reconstruction_max_weighted_attention(float* out, const float* cached_keys, size_t n_rows,
                                           const float* queries, size_t n_group, size_t n_queries,
                                           const float* own_keys, size_t head_dim,
                                           const float* query_weight);
// out [n_heads][n_rows] = ||W_O^(h) v_j||: wo [n_embd][n_heads * head_dim] in fp32 (the output
// projection, head h's columns h * head_dim ..), values [n_kv_heads][n_rows][head_dim], head h
// reading KV head h / (n_heads / n_kv_heads). Through each head's Gram matrix W_O^(h)T W_O^(h).
void value_output_norms(float* out, const float* wo, size_t n_embd, size_t n_heads,
                        size_t n_kv_heads, size_t head_dim, const float* values, size_t n_rows);

// The same in double precision, plain loops (the tests' reference); with query_weight, the
// weighted form: out [n_group][n_rows].
void reconstruction_max_attention_ref(double* out, const float* cached_keys, size_t n_rows,
                                      const float* queries, size_t n_group, size_t n_queries,
                                      const float* own_keys, size_t head_dim,
                                      const float* query_weight = nullptr);

}  // namespace snapkv
