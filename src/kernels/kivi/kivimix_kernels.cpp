// kivimix's wide-channel pass (kernels/kivi/kivimix_kernels.h): the scalar reference, and the
// public entry, which runs the active ISA level's kernel (kernels/kivi/kivimix_simd.cpp).
#include "kernels/kivi/kivimix_kernels.h"

#include <algorithm>
#include <vector>

#include "kernels/registry.h"

namespace snapkv {
void kivimix_wide_weights_scalar(float* qk, const float* q, size_t n_q, size_t head_dim,
                                 const float* scales, const KittyChannel* channels, size_t wide) {
  for (size_t j = 0; j < n_q; ++j) {
    for (size_t k = 0; k < wide; ++k) {
      qk[j * wide + k] = q[j * head_dim + channels[k]] * (0.25f * scales[channels[k]]);
    }
  }
}

// The low codes are unpacked once, straight from their bytes (byte i holds codes 4i .. 4i + 3),
// into [wide][n] floats so the sums run across rows; each row's sum adds its channels in order.
void kivimix_wide_dot_scalar(float* out, size_t stride, const float* qk, size_t n_q, size_t wide,
                             const uint8_t* low, size_t row_bytes, size_t n) {
  thread_local std::vector<float> by_channel, sums;  // [wide][n], [n]
  by_channel.resize(wide * n);
  sums.resize(n);
  for (size_t r = 0; r < n; ++r) {
    for (size_t k = 0; k < wide; ++k) {
      const uint32_t byte = low[r * row_bytes + k / 4];
      by_channel[k * n + r] = static_cast<float>((byte >> (2 * (k % 4))) & 3u);
    }
  }
  for (size_t j = 0; j < n_q; ++j) {
    std::fill(sums.begin(), sums.end(), 0.0f);
    for (size_t k = 0; k < wide; ++k) {
      const float w = qk[j * wide + k];
      const float* v = by_channel.data() + k * n;
      for (size_t r = 0; r < n; ++r) sums[r] += w * v[r];
    }
    for (size_t r = 0; r < n; ++r) out[j * stride + r] += sums[r];
  }
}

void kivimix_wide_dot(float* out, size_t stride, const float* qk, size_t n_q, size_t wide,
                      const uint8_t* low, size_t row_bytes, size_t n) {
  kernels::active().kivimix.wide_dot(out, stride, qk, n_q, wide, low, row_bytes, n);
}

void kivimix_wide_weights(float* qk, const float* q, size_t n_q, size_t head_dim,
                          const float* scales, const KittyChannel* channels, size_t wide) {
  kernels::active().kivimix.wide_weights(qk, q, n_q, head_dim, scales, channels, wide);
}

}  // namespace snapkv
