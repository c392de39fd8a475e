// kivimix's wide-channel pass (kv/codecs/kivi/kivi_key_store.cpp): after the packed 2-bit key
// kernel has added each wide channel's high half, this adds the low halves, stored apart per row as
// 2-bit codes. Internal (kv/codecs use it).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/isa_tables.h"
#include "snapkv/kernels/kivi_layout.h"

namespace snapkv {

// qk[j * wide + k] = q[j * head_dim + channels[k]] * (0.25f * scales[channels[k]]): query j's
// weight of wide channel k's low code (a low code counts S / 4 of a 4-bit step). qk: [n_q][wide].
// The fast kernel (the active ISA level) gathers 8 or 16 channels at a time; *_scalar is its
// reference (the same two products per weight: equal bit for bit).
void kivimix_wide_weights(float* qk, const float* q, size_t n_q, size_t head_dim,
                          const float* scales, const KittyChannel* channels, size_t wide);
void kivimix_wide_weights_scalar(float* qk, const float* q, size_t n_q, size_t head_dim,
                                 const float* scales, const KittyChannel* channels, size_t wide);

// out[j * stride + r] += sum_k qk[j * wide + k] * low(r, k) for r < n, where low(r, k) is the 2-bit
// code k of row r: bits 2 (k % 4) of byte k / 4 of low + r * row_bytes (row_bytes >= ceil(wide /
// 4)). Each row's sum starts at 0 and adds qk * code (a product, then a sum: no fma) over k = 0 ..
// wide - 1 in order; then it is added to out. The fast kernel (kernels/kivi/kivimix_simd.cpp, the
// active ISA level) runs 8 (avx2) or 16 (avx512) rows per vector, the same operations in the same
// order, so it equals *_scalar bit for bit.
void kivimix_wide_dot(float* out, size_t stride, const float* qk, size_t n_q, size_t wide,
                      const uint8_t* low, size_t row_bytes, size_t n);
void kivimix_wide_dot_scalar(float* out, size_t stride, const float* qk, size_t n_q, size_t wide,
                             const uint8_t* low, size_t row_bytes, size_t n);

}  // namespace snapkv

// The fast kernels as compiled for each ISA level (kernels/kivi/kivimix_simd.cpp; kernels/isa.h);
// the scalar level runs the *_scalar references.
#define SNAPKV_KIVIMIX_DECLARE(NS)                                                           \
  namespace snapkv::NS {                                                                     \
  void kivimix_wide_dot(float* out, size_t stride, const float* qk, size_t n_q, size_t wide, \
                        const uint8_t* low, size_t row_bytes, size_t n);                     \
  void kivimix_wide_weights(float* qk, const float* q, size_t n_q, size_t head_dim,          \
                            const float* scales, const KittyChannel* channels, size_t wide); \
  }
SNAPKV_ISA_DECLARE(SNAPKV_KIVIMIX_DECLARE)

namespace snapkv::kernels {
struct KivimixKernels {
  void (*wide_dot)(float*, size_t, const float*, size_t, size_t, const uint8_t*, size_t, size_t);
  void (*wide_weights)(float*, const float*, size_t, size_t, const float*, const KittyChannel*,
                       size_t);
};
}  // namespace snapkv::kernels
#define SNAPKV_KIVIMIX_ENTRY(NS)                     \
  kernels::KivimixKernels {                          \
    &NS::kivimix_wide_dot, &NS::kivimix_wide_weights \
  }
