// The 3-bit KIVI key kernel (codec kivi32's keys; layout in include/snapkv/kv/codecs/kivi.h: 8
// codes in a 3-byte little-endian word per channel and octet of rows). kivi_key_block_dot
// (kernels/kivi/kivi_kernels.h) sends width 3 here; kivi_key_block_dot_scalar stays its
// reference. Internal (kv/codecs use it).
#pragma once

#include <cstddef>
#include <cstdint>

namespace snapkv {

// One key block of n_rows rows, as kivi_key_block_dot with bits = 3:
//   out[j * out_stride + r] = sum_c (q[j][c] * scales[c]) * code(r, c) + sum_c q[j][c] * zeros[c]
// The two sums run in fp32 in channel order (no dequantized rows). Its distance from the scalar
// twin, which sums q_c * (scale_c * code + zero_c) per channel, is float rounding only: at most
// about 2 (head_dim + 2) u * sum_c |q_c| (|scale_c code(r, c)| + |zero_c|) (u = 2^-24), the bound
// tests/kv/kivi_mixed_test.cpp holds it to.
void kivi3_key_block_dot(float* out, size_t out_stride, const float* q, size_t n_q,
                         const float* scales, const float* zeros, const uint8_t* words,
                         size_t n_rows, size_t head_dim);

}  // namespace snapkv
