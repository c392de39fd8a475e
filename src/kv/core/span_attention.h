// Fused decode attention over one KV head's stores: one pass over the kept rows serves every
// query row of the GQA group. The rows are read a span at a time (RowStore::span_end): the span's
// keys are dotted with all n_q queries (each key row decoded or converted once), an online-softmax
// step rescales the running sums, and the same span's values are added with the span's weights,
// so the scores never exist for more than one span and no pass over all scores follows.
// Promises: acc, row_max, row_sum such that the attention output of query j over the stored rows
// is acc[j] / row_sum[j] (logits scale * q.k, softmax with running maximum row_max[j]); a caller
// merges further rows (a chunk's own rows) with online_softmax_merge. Leaves out: masking (every
// stored row is visible) and the choice of the path (LayerCache::attend takes it when both stores
// have span kernels). Private to kv/.
#pragma once

#include <cstddef>

#include "snapkv/kv/core/row_store.h"

namespace snapkv {

// acc: [n_q][head_dim] (overwritten), row_max, row_sum: [n_q] (overwritten; -inf and 0 when the
// stores are empty), q: [n_q][head_dim]. keys and values hold the same number of rows.
void span_attention(float* acc, float* row_max, float* row_sum, const float* q, size_t n_q,
                    const RowStore& keys, const RowStore& values, float scale);

// One query row's online-softmax step with new raw logits: logits [n] (finite, q.k unscaled;
// overwritten with exp_fma(fma(logit, scale, -new max)), softmax.h), scale > 0; row_max, the
// running maximum of the scaled logits, becomes max(row_max, scale * max logit) (the largest of
// the rounded products: rounding keeps their order), and acc [head_dim] and row_sum are rescaled
// to it. Returns the factor the old sums were multiplied by.
float online_softmax_merge(float* logits, size_t n, float scale, float* acc, size_t head_dim,
                           float& row_max, float& row_sum);

}  // namespace snapkv
