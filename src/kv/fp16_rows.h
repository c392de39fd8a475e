// fp16 rows [n][head_dim] read through the F16C kernels of ops/dot.h: the dot products and weighted
// sums every fp16 region uses (Fp16RowStore's rows, the KIVI stores' sinks and residual), and the
// in-place compaction eviction applies to them. One definition, so every fp16 region of every
// codec rounds alike. Private to kv/.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "snapkv/ops/dot.h"
#include "snapkv/util/fp16.h"

namespace snapkv {

// out[j * stride + i] = dot(q[j], row i) for i < n.  q: [n_q][head_dim], data: [n][head_dim].
inline void fp16_rows_dot(float* out, size_t stride, const float* q, size_t n_q, const fp16_t* data,
                          size_t n, size_t head_dim) {
  for (size_t i = 0; i < n; ++i) {
    const fp16_t* row = data + i * head_dim;
    for (size_t j = 0; j < n_q; ++j) out[j * stride + i] = dot_f16(q + j * head_dim, row, head_dim);
  }
}

// out[j][:] += w[j * stride + i] * row i for i < n.  out: [n_q][head_dim], data: [n][head_dim].
inline void fp16_rows_accumulate(float* out, const float* w, size_t stride, size_t n_q,
                                 const fp16_t* data, size_t n, size_t head_dim) {
  for (size_t i = 0; i < n; ++i) {
    const fp16_t* row = data + i * head_dim;
    for (size_t j = 0; j < n_q; ++j) axpy_f16(out + j * head_dim, w[j * stride + i], row, head_dim);
  }
}

// Keeps rows keep[i] - base of data [rows][head_dim], in place and in order; resizes data.
// keep: strictly increasing, each >= base and < base + rows (the caller checked).
inline void fp16_rows_compact(std::vector<fp16_t>& data, std::span<const uint32_t> keep,
                              size_t base, size_t head_dim) {
  size_t write = 0;
  for (const uint32_t row : keep) {
    const size_t from = row - base;
    if (from != write) {
      std::copy_n(data.data() + from * head_dim, head_dim, data.data() + write * head_dim);
    }
    ++write;
  }
  data.resize(write * head_dim);
}

}  // namespace snapkv
