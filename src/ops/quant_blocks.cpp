// The public one-pass decoders of the Q4_0 and K-quant blocks (ops/quant_blocks.h): each runs the
// active ISA level's kernel (quant_blocks_simd.cpp, dispatched through kernels/registry.h).
#include "snapkv/ops/quant_blocks.h"

#include "kernels/registry.h"

namespace snapkv {

void decode_block(float* out, const BlockQ4_0& b) {
  kernels::active().ops.decode_q4_0(out, b);
}
void decode_block(float* out, const BlockQ2_K& b) {
  kernels::active().ops.decode_q2_K(out, b);
}
void decode_block(float* out, const BlockQ3_K& b) {
  kernels::active().ops.decode_q3_K(out, b);
}
void decode_block(float* out, const BlockQ4_K& b) {
  kernels::active().ops.decode_q4_K(out, b);
}
void decode_block(float* out, const BlockQ5_K& b) {
  kernels::active().ops.decode_q5_K(out, b);
}
void decode_block(float* out, const BlockQ6_K& b) {
  kernels::active().ops.decode_q6_K(out, b);
}

}  // namespace snapkv
