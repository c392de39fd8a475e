// Same-length, stride-1, centred 1-D max and average pooling and one-sided (causal) max pooling
// (edge rules in pool.h).
#include "snapkv/ops/pool.h"

#include <algorithm>
#include <string>

#include "snapkv/util/error.h"

namespace snapkv {
namespace {

void check_kernel(size_t kernel, const char* op) {
  if (kernel == 0 || kernel % 2 == 0) {
    throw_invalid(op, "kernel must be odd and positive", std::to_string(kernel),
                  "an odd number >= 1");
  }
}

}  // namespace

void max_pool1d(float* out, const float* in, size_t n, size_t kernel) {
  check_kernel(kernel, "max_pool1d");
  SNAPKV_CHECK(n == 0 || out != in);
  const size_t half = kernel / 2;
  for (size_t i = 0; i < n; ++i) {
    const size_t lo = i >= half ? i - half : 0;
    const size_t hi = std::min(n, i + half + 1);
    float m = in[lo];
    for (size_t j = lo + 1; j < hi; ++j) m = std::max(m, in[j]);
    out[i] = m;
  }
}

void avg_pool1d(float* out, const float* in, size_t n, size_t kernel) {
  check_kernel(kernel, "avg_pool1d");
  SNAPKV_CHECK(n == 0 || out != in);
  const size_t half = kernel / 2;
  const float inv = 1.0f / static_cast<float>(kernel);
  for (size_t i = 0; i < n; ++i) {
    const size_t lo = i >= half ? i - half : 0;
    const size_t hi = std::min(n, i + half + 1);
    float sum = 0.0f;
    for (size_t j = lo; j < hi; ++j) sum += in[j];
    out[i] = sum * inv;
  }
}

void causal_max_pool1d(float* out, const float* in, size_t n, size_t kernel) {
  check_kernel(kernel, "causal_max_pool1d");
  SNAPKV_CHECK(n == 0 || out != in);
  for (size_t i = 0; i < n; ++i) {
    const size_t lo = i + 1 >= kernel ? i + 1 - kernel : 0;
    float m = in[i];
    for (size_t j = lo; j < i; ++j) m = std::max(m, in[j]);
    out[i] = m;
  }
}

}  // namespace snapkv
