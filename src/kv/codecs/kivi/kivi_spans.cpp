// The span methods of KiviStore (kv/codecs/kivi/kivi_store.h, RowStore's contract in
// snapkv/kv/core/row_store.h): a span lies inside one region (fp16 sinks, quantized rows, fp16
// residual); the fp16 regions run kernels/fp16_rows.h, the quantized rows the role's span kernels
// (key blocks, packed value rows). With gear the decoding defaults of RowStore run (they read() the
// corrected rows).
#include <algorithm>
#include <string>
#include <vector>

#include "kernels/fp16_rows.h"
#include "kv/codecs/kivi/kivi_store.h"
#include "snapkv/ops/dot.h"
#include "snapkv/util/error.h"

namespace snapkv {
namespace {

void check_span(size_t begin, size_t end, size_t rows) {
  if (begin > end || end > rows) {
    throw_invalid("kivi", "span out of bounds",
                  "[" + std::to_string(begin) + ", " + std::to_string(end) + ")",
                  "a range within [0, " + std::to_string(rows) + "]");
  }
}

}  // namespace

size_t KiviStore::span_end(size_t begin, size_t max_rows) const {
  check_span(begin, begin + 1, rows());
  const size_t limit = std::min(rows(), begin + std::max<size_t>(max_rows, 1));
  if (begin < n_sinks_) return std::min(limit, n_sinks_);
  const size_t quant_end = n_sinks_ + n_quant_;
  if (begin < quant_end) {
    return n_sinks_ + quantized_span_end(begin - n_sinks_, std::min(limit, quant_end) - n_sinks_);
  }
  return limit;
}

void KiviStore::dot_span(float* out, size_t stride, const float* q, size_t n_q, size_t begin,
                         size_t end) const {
  check_span(begin, end, rows());
  if (gear_) return RowStore::dot_span(out, stride, q, n_q, begin, end);
  const size_t quant_end = n_sinks_ + n_quant_;
  if (begin < n_sinks_) {  // sinks [begin, min(end, n_sinks))
    const size_t stop = std::min(end, n_sinks_);
    fp16_rows_dot(out, stride, q, n_q, sinks_.data() + begin * head_dim_, stop - begin, head_dim_);
  }
  const size_t qb = std::max(begin, n_sinks_), qe = std::min(end, quant_end);
  if (qb < qe) dot_quantized_span(out + (qb - begin), stride, q, n_q, qb - n_sinks_, qe - n_sinks_);
  const size_t rb = std::max(begin, quant_end);
  if (rb < end) {
    fp16_rows_dot(out + (rb - begin), stride, q, n_q,
                  residual_.data() + (rb - quant_end) * head_dim_, end - rb, head_dim_);
  }
}

void KiviStore::accumulate_span(float* out, const float* w, size_t stride, size_t n_q, size_t begin,
                                size_t end) const {
  check_span(begin, end, rows());
  if (gear_) return RowStore::accumulate_span(out, w, stride, n_q, begin, end);
  const size_t quant_end = n_sinks_ + n_quant_;
  if (begin < n_sinks_) {
    const size_t stop = std::min(end, n_sinks_);
    fp16_rows_accumulate(out, w, stride, n_q, sinks_.data() + begin * head_dim_, stop - begin,
                         head_dim_);
  }
  const size_t qb = std::max(begin, n_sinks_), qe = std::min(end, quant_end);
  if (qb < qe) {
    accumulate_quantized_span(out, w + (qb - begin), stride, n_q, qb - n_sinks_, qe - n_sinks_);
  }
  const size_t rb = std::max(begin, quant_end);
  if (rb < end) {
    fp16_rows_accumulate(out, w + (rb - begin), stride, n_q,
                         residual_.data() + (rb - quant_end) * head_dim_, end - rb, head_dim_);
  }
}

void KiviStore::dot_quantized_span(float* out, size_t stride, const float* q, size_t n_q,
                                   size_t begin, size_t end) const {
  thread_local std::vector<float> buf;  // [end - begin][head_dim]
  buf.resize((end - begin) * head_dim_);
  read_quantized(buf.data(), begin, end);
  for (size_t r = 0; r < end - begin; ++r) {
    for (size_t j = 0; j < n_q; ++j) {
      out[j * stride + r] = dot(q + j * head_dim_, buf.data() + r * head_dim_, head_dim_);
    }
  }
}

void KiviStore::accumulate_quantized_span(float* out, const float* w, size_t stride, size_t n_q,
                                          size_t begin, size_t end) const {
  thread_local std::vector<float> buf;  // [end - begin][head_dim]
  buf.resize((end - begin) * head_dim_);
  read_quantized(buf.data(), begin, end);
  for (size_t r = 0; r < end - begin; ++r) {
    for (size_t j = 0; j < n_q; ++j) {
      axpy(out + j * head_dim_, w[j * stride + r], buf.data() + r * head_dim_, head_dim_);
    }
  }
}

}  // namespace snapkv
