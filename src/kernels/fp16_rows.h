// fp16 rows [n][head_dim]: the dot products and weighted sums every fp16 region uses
// (Fp16RowStore's rows, the KIVI stores' sinks and residual), and the in-place compaction eviction
// applies to them. One definition, so every fp16 region of every codec rounds alike. Private to
// the library.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "kernels/isa_tables.h"
#include "snapkv/util/fp16.h"

namespace snapkv {

// out[j * stride + i] = dot(q[j], row i) for i < n.  q: [n_q][head_dim], data: [n][head_dim].
// The fast kernel (kernels/fp16_rows_simd.cpp, the active ISA level) converts each row to fp32
// once and dots it with every query of the group, several rows in flight; *_scalar is its reference
// (one dot_f16_scalar per row and query, summed in channel order).
void fp16_rows_dot(float* out, size_t stride, const float* q, size_t n_q, const fp16_t* data,
                   size_t n, size_t head_dim);
void fp16_rows_dot_scalar(float* out, size_t stride, const float* q, size_t n_q, const fp16_t* data,
                          size_t n, size_t head_dim);

// Software prefetch distance of the fast kernels, in bytes ahead of the rows being read (into
// L2: a decode step streams every row from DRAM once, and the hardware prefetcher alone leaves
// the core waiting): the environment variable SNAPKV_FP16_PREFETCH (read once; 0 turns
// prefetching off, to compare), else kFp16PrefetchDefault. Prefetching changes no result.
inline constexpr size_t kFp16PrefetchDefault = 16384;
size_t fp16_rows_prefetch_bytes();
// The same kernels with an explicit prefetch distance (bytes; 0 = none).
void fp16_rows_dot(float* out, size_t stride, const float* q, size_t n_q, const fp16_t* data,
                   size_t n, size_t head_dim, size_t prefetch);
void fp16_rows_accumulate(float* out, const float* w, size_t stride, size_t n_q, const fp16_t* data,
                          size_t n, size_t head_dim, size_t prefetch);

// out[j][:] += w[j * stride + i] * row i for i < n.  out: [n_q][head_dim], data: [n][head_dim].
// The fast kernel walks a tile of rows per slice of channels with the group's outputs in
// registers (each row converted once per query group); *_scalar adds row by row (axpy order).
void fp16_rows_accumulate(float* out, const float* w, size_t stride, size_t n_q, const fp16_t* data,
                          size_t n, size_t head_dim);
void fp16_rows_accumulate_scalar(float* out, const float* w, size_t stride, size_t n_q,
                                 const fp16_t* data, size_t n, size_t head_dim);

// Keeps rows keep[i] - base of data [rows][head_dim], in place and in order; resizes data.
// keep: strictly increasing, each >= base and < base + rows (the caller checked).
template <class Rows>  // std::vector<fp16_t> or RowBuffer<fp16_t> (kv/codecs/row_buffer.h)
void fp16_rows_compact(Rows& data, std::span<const uint32_t> keep, size_t base, size_t head_dim) {
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

// The fast kernels as compiled for each ISA level (kernels/fp16_rows_simd.cpp; kernels/isa.h).
// `prefetch`: bytes ahead of the rows being read to prefetch (0 = none); see
// fp16_rows_prefetch_bytes.
#define SNAPKV_FP16_ROWS_DECLARE(NS)                                                            \
  namespace snapkv::NS {                                                                        \
  void fp16_rows_dot(float* out, size_t stride, const float* q, size_t n_q, const fp16_t* data, \
                     size_t n, size_t head_dim, size_t prefetch);                               \
  void fp16_rows_accumulate(float* out, const float* w, size_t stride, size_t n_q,              \
                            const fp16_t* data, size_t n, size_t head_dim, size_t prefetch);    \
  }
SNAPKV_ISA_DECLARE(SNAPKV_FP16_ROWS_DECLARE)

namespace snapkv::kernels {
struct Fp16RowKernels {
  void (*dot)(float*, size_t, const float*, size_t, const fp16_t*, size_t, size_t, size_t);
  void (*accumulate)(float*, const float*, size_t, size_t, const fp16_t*, size_t, size_t, size_t);
};
}  // namespace snapkv::kernels
#define SNAPKV_FP16_ROWS_ENTRY(NS)                \
  kernels::Fp16RowKernels {                       \
    &NS::fp16_rows_dot, &NS::fp16_rows_accumulate \
  }
