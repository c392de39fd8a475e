// fp16 row kernels (kernels/fp16_rows.h): the scalar references, and the public entries, which
// run the active ISA level's kernels (fp16_rows_simd.cpp).
#include "kernels/fp16_rows.h"

#include <cstdlib>

#include "kernels/ops_kernels.h"
#include "kernels/registry.h"

namespace snapkv {
size_t fp16_rows_prefetch_bytes() {
  static const size_t bytes = [] {
    const char* env = std::getenv("SNAPKV_FP16_PREFETCH");
    return env != nullptr && *env != '\0' ? static_cast<size_t>(std::strtoull(env, nullptr, 10))
                                          : kFp16PrefetchDefault;
  }();
  return bytes;
}

void fp16_rows_dot_scalar(float* out, size_t stride, const float* q, size_t n_q, const fp16_t* data,
                          size_t n, size_t head_dim) {
  for (size_t i = 0; i < n; ++i) {
    const fp16_t* row = data + i * head_dim;
    for (size_t j = 0; j < n_q; ++j) {
      out[j * stride + i] = dot_f16_scalar(q + j * head_dim, row, head_dim);
    }
  }
}

void fp16_rows_accumulate_scalar(float* out, const float* w, size_t stride, size_t n_q,
                                 const fp16_t* data, size_t n, size_t head_dim) {
  for (size_t i = 0; i < n; ++i) {
    const fp16_t* row = data + i * head_dim;
    for (size_t j = 0; j < n_q; ++j) {
      axpy_f16_scalar(out + j * head_dim, w[j * stride + i], row, head_dim);
    }
  }
}

void fp16_rows_dot(float* out, size_t stride, const float* q, size_t n_q, const fp16_t* data,
                   size_t n, size_t head_dim, size_t prefetch) {
  if (n == 0 || n_q == 0) return;
  kernels::active().fp16_rows.dot(out, stride, q, n_q, data, n, head_dim, prefetch);
}

void fp16_rows_accumulate(float* out, const float* w, size_t stride, size_t n_q, const fp16_t* data,
                          size_t n, size_t head_dim, size_t prefetch) {
  if (n == 0 || n_q == 0) return;
  kernels::active().fp16_rows.accumulate(out, w, stride, n_q, data, n, head_dim, prefetch);
}

void fp16_rows_dot(float* out, size_t stride, const float* q, size_t n_q, const fp16_t* data,
                   size_t n, size_t head_dim) {
  fp16_rows_dot(out, stride, q, n_q, data, n, head_dim, fp16_rows_prefetch_bytes());
}

void fp16_rows_accumulate(float* out, const float* w, size_t stride, size_t n_q, const fp16_t* data,
                          size_t n, size_t head_dim) {
  fp16_rows_accumulate(out, w, stride, n_q, data, n, head_dim, fp16_rows_prefetch_bytes());
}

}  // namespace snapkv
