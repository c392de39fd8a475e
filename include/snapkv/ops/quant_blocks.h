// The one-pass decoders of the Q4_0 and K-quant blocks whose layouts util/quant_blocks.h gives:
//   decode_block(out, block)     every weight of one block, in one pass, by the active ISA level's
//                                kernel (src/kernels/quant_blocks_simd.cpp); used by the gemm.h
//                                kernels.
// Each weight is the fp32 expression of util/quant_blocks.h, evaluated in the same order as its
// reference decoder (*_value there), so the two agree bit for bit.
// Leaves out: the layouts, the references and the encoders (util/quant_blocks.h).
#pragma once

#include "snapkv/util/quant_blocks.h"

namespace snapkv {

// out [block elements]
void decode_block(float* out, const BlockQ4_0& b);
void decode_block(float* out, const BlockQ2_K& b);
void decode_block(float* out, const BlockQ3_K& b);
void decode_block(float* out, const BlockQ4_K& b);
void decode_block(float* out, const BlockQ5_K& b);
void decode_block(float* out, const BlockQ6_K& b);

}  // namespace snapkv
