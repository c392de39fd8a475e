// Fused span-by-span decode attention (kv/core/span_attention.h).
#include "kv/core/span_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "snapkv/ops/softmax.h"
#include "snapkv/util/error.h"

namespace snapkv {
namespace {

// Rows per span: the span's scores ([n_q][span] floats) stay within 16 KiB (L1), at least 32
// rows (one KIVI key block); long spans spread the per-span work (the rotated codecs turn the
// queries and the partial sum once per span) over more rows.
size_t span_rows(size_t n_q) {
  return std::clamp<size_t>(4096 / std::max<size_t>(n_q, 1), 32, 1024);
}

}  // namespace

float online_softmax_merge(float* logits, size_t n, float scale, float* acc, size_t head_dim,
                           float& row_max, float& row_sum) {
  SNAPKV_CHECK(scale > 0.0f && std::isfinite(scale));
  if (n == 0) return 1.0f;
  const float span_max = scale * max_value(logits, n);
  float factor = 1.0f;
  if (span_max > row_max) {
    // exp(-inf) is 0: nothing was summed before the first span
    factor =
        row_max == -std::numeric_limits<float>::infinity() ? 0.0f : std::exp(row_max - span_max);
    for (size_t c = 0; c < head_dim; ++c) acc[c] *= factor;
    row_sum *= factor;
    row_max = span_max;
  }
  row_sum += exp_scale_shift_sum(logits, n, scale, row_max);
  return factor;
}

void span_attention(float* acc, float* row_max, float* row_sum, const float* q, size_t n_q,
                    const RowStore& keys, const RowStore& values, float scale) {
  SNAPKV_CHECK(keys.rows() == values.rows() && keys.head_dim() == values.head_dim());
  const size_t head_dim = keys.head_dim(), rows = keys.rows();
  std::fill_n(acc, n_q * head_dim, 0.0f);
  std::fill_n(row_max, n_q, -std::numeric_limits<float>::infinity());
  std::fill_n(row_sum, n_q, 0.0f);
  const size_t max_rows = span_rows(n_q);
  thread_local std::vector<float> scores;  // [n_q][stride], one span
  for (size_t begin = 0; begin < rows;) {
    const size_t end = keys.span_end(begin, max_rows);
    SNAPKV_CHECK(end > begin && end <= rows);
    const size_t n = end - begin;
    scores.resize(n_q * n);
    keys.dot_span(scores.data(), n, q, n_q, begin, end);
    for (size_t j = 0; j < n_q; ++j) {
      online_softmax_merge(scores.data() + j * n, n, scale, acc + j * head_dim, head_dim,
                           row_max[j], row_sum[j]);
    }
    values.accumulate_span(acc, scores.data(), n, n_q, begin, end);
    begin = end;
  }
}

}  // namespace snapkv
