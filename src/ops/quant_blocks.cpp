// The public one-pass decoders of the Q4_0 and K-quant blocks (ops/quant_blocks.h): each runs the
// active ISA level's kernel (quant_blocks_simd.cpp, dispatched through ops/kernels.h).
#include "snapkv/ops/quant_blocks.h"

#include "ops/kernels.h"

namespace snapkv {

using ops_internal::ops_kernels;

void decode_block(float* out, const BlockQ4_0& b) {
  ops_kernels().decode_q4_0(out, b);
}
void decode_block(float* out, const BlockQ2_K& b) {
  ops_kernels().decode_q2_K(out, b);
}
void decode_block(float* out, const BlockQ3_K& b) {
  ops_kernels().decode_q3_K(out, b);
}
void decode_block(float* out, const BlockQ4_K& b) {
  ops_kernels().decode_q4_K(out, b);
}
void decode_block(float* out, const BlockQ5_K& b) {
  ops_kernels().decode_q5_K(out, b);
}
void decode_block(float* out, const BlockQ6_K& b) {
  ops_kernels().decode_q6_K(out, b);
}

}  // namespace snapkv
