// The default span methods of RowStore (include/snapkv/kv/core/row_store.h): decode the span with
// read() into a per-thread buffer, then dot / accumulate in fp32. Correct for every codec; codecs
// with their own span kernels (fp16, KIVI, rotated KIVI) override them.
#include <algorithm>
#include <string>
#include <vector>

#include "snapkv/kv/core/row_store.h"
#include "snapkv/ops/dot.h"
#include "snapkv/util/error.h"

namespace snapkv {
namespace {

void check_span(const RowStore& s, size_t begin, size_t end) {
  if (begin > end || end > s.rows()) {
    throw_invalid("row_store", "span out of bounds",
                  "[" + std::to_string(begin) + ", " + std::to_string(end) + ")",
                  "a range within [0, " + std::to_string(s.rows()) + "]");
  }
}

}  // namespace

size_t RowStore::span_end(size_t begin, size_t max_rows) const {
  check_span(*this, begin, begin);
  return std::min(rows(), begin + std::max<size_t>(max_rows, 1));
}

void RowStore::dot_span(float* out, size_t stride, const float* q, size_t n_q, size_t begin,
                        size_t end) const {
  check_span(*this, begin, end);
  const size_t d = head_dim();
  thread_local std::vector<float> rows_fp32;  // [end - begin][head_dim]
  rows_fp32.resize((end - begin) * d);
  read(rows_fp32.data(), begin, end);
  for (size_t i = 0; i < end - begin; ++i) {
    for (size_t j = 0; j < n_q; ++j) {
      out[j * stride + i] = dot(q + j * d, rows_fp32.data() + i * d, d);
    }
  }
}

void RowStore::accumulate_span(float* out, const float* w, size_t stride, size_t n_q, size_t begin,
                               size_t end) const {
  check_span(*this, begin, end);
  const size_t d = head_dim();
  thread_local std::vector<float> rows_fp32;  // [end - begin][head_dim]
  rows_fp32.resize((end - begin) * d);
  read(rows_fp32.data(), begin, end);
  for (size_t i = 0; i < end - begin; ++i) {
    for (size_t j = 0; j < n_q; ++j) {
      axpy(out + j * d, w[j * stride + i], rows_fp32.data() + i * d, d);
    }
  }
}

}  // namespace snapkv
