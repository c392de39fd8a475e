// Block layouts of the quantized weight types that GGUF files downloaded today contain (Q8_0, Q4_0
// and the "K-quants" Q2_K, Q3_K, Q4_K, Q5_K, Q6_K), byte for byte as ggml stores them, and the
// scalar code every layer above may use on them:
//   *_value(block, i)            the reference decoder: element i computed on its own from the
//                                layout description below, the way a reader of the format would;
//   quantize_block(out, x)       simple K-quant encoders for tests and random-model generation,
//                                round-to-nearest with an error bound, not ggml's search for the
//                                best scales;
//   bf16_bits_to_fp32            bf16 -> fp32.
// The one-pass decoders the matmul kernels use (decode_block) are in ops/quant_blocks.h; they
// evaluate the same fp32 expression per element (e.g. (d*sc)*q - (dmin*m)) in the same order as
// the references and as ggml, so all three agree bit for bit. The gguf layer reads and writes
// files through these layouts without depending on ops.
// Leaves out: Q4_1 / Q5_0 / Q5_1 / Q8_1 / Q8_K and the IQ* / TQ* types (not in the common files).
//
// Terms: a "super-block" holds kQK_K = 256 weights and one or two fp16 super-scales d (and dmin);
// it is split into sub-blocks of 16 or 32 weights, each with a small integer scale sc (and min m).
// A weight is w = (d * sc) * q - (dmin * m), or (d * sc) * q for the symmetric types.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "snapkv/util/fp16.h"

namespace snapkv {

inline constexpr size_t kQK_K = 256;  // weights per K-quant super-block
inline constexpr size_t kQ4_0BlockSize = 32;
inline constexpr size_t kQ8BlockSize = 32;

// Q8_0: 32 weights share one fp16 scale, w[j] = d * qs[j]. 34 bytes. The matmul kernels read it in
// place; gguf/quant.h reads, writes and quantizes it (gguf::quantize_row_q8_0).
struct BlockQ8_0 {
  fp16_t d;
  int8_t qs[kQ8BlockSize];
};
static_assert(sizeof(BlockQ8_0) == 34, "Q8_0 block must be 34 bytes as in ggml");

// Q4_0: 32 weights, w[j] = (nib[j] - 8) * d; nib[j] is the low nibble of qs[j] for j < 16 and
// the high nibble of qs[j - 16] otherwise. 18 bytes.
struct BlockQ4_0 {
  fp16_t d;
  uint8_t qs[kQ4_0BlockSize / 2];
};
static_assert(sizeof(BlockQ4_0) == 18, "Q4_0 block must be 18 bytes as in ggml");

// Q2_K: 2-bit weights, 16 sub-blocks of 16, asymmetric. 84 bytes = 2.625 bits per weight.
//   scales[s]: low nibble = sc, high nibble = m of sub-block s.
//   qs: weight i (i = 128*h + 32*j + l, h < 2, j < 4, l < 32) is bits 2j..2j+1 of qs[32*h + l];
//       it belongs to sub-block s = 8*h + 2*j + l/16.
//   w = (d * sc) * q - (dmin * m).
struct BlockQ2_K {
  uint8_t scales[kQK_K / 16];
  uint8_t qs[kQK_K / 4];
  fp16_t d;
  fp16_t dmin;
};
static_assert(sizeof(BlockQ2_K) == 84, "Q2_K block must be 84 bytes as in ggml");

// Q3_K: 3-bit weights, 16 sub-blocks of 16, symmetric. 110 bytes = 3.4375 bits per weight.
//   Low 2 bits as in Q2_K (qs, same index map). High bit: bit (4*h + j) of hmask[l]; the weight's
//   3-bit value is q = low2 - 4 when that bit is clear and low2 when it is set (range -4..3).
//   scales: 16 6-bit values stored with an offset of 32 in 12 bytes: for sub-block s the low
//   4 bits are scales[s] & 15 (s < 8) or scales[s - 8] >> 4 (s >= 8), the high 2 bits are
//   (scales[8 + s % 4] >> (2 * (s / 4))) & 3.
//   w = (d * (sc - 32)) * q.
struct BlockQ3_K {
  uint8_t hmask[kQK_K / 8];
  uint8_t qs[kQK_K / 4];
  uint8_t scales[12];
  fp16_t d;
};
static_assert(sizeof(BlockQ3_K) == 110, "Q3_K block must be 110 bytes as in ggml");

// Q4_K: 4-bit weights, 8 sub-blocks of 32, asymmetric. 144 bytes = 4.5 bits per weight.
//   scales: 8 6-bit scales sc and 8 6-bit mins m in 12 bytes (k4 packing): for s < 4,
//   sc = scales[s] & 63, m = scales[s + 4] & 63; for s >= 4, sc = (scales[s + 4] & 15) |
//   ((scales[s - 4] >> 6) << 4), m = (scales[s + 4] >> 4) | ((scales[s] >> 6) << 4).
//   qs: weight i (i = 64*g + 32*k + l) is the low (k = 0) or high (k = 1) nibble of
//   qs[32*g + l]; sub-block s = 2*g + k.
//   w = (d * sc) * q - (dmin * m).
struct BlockQ4_K {
  fp16_t d;
  fp16_t dmin;
  uint8_t scales[12];
  uint8_t qs[kQK_K / 2];
};
static_assert(sizeof(BlockQ4_K) == 144, "Q4_K block must be 144 bytes as in ggml");

// Q5_K: Q4_K plus a fifth bit: bit (2*g + k) of qh[l] adds 16 to the nibble of weight
// i = 64*g + 32*k + l. 176 bytes = 5.5 bits per weight.
struct BlockQ5_K {
  fp16_t d;
  fp16_t dmin;
  uint8_t scales[12];
  uint8_t qh[kQK_K / 8];
  uint8_t qs[kQK_K / 2];
};
static_assert(sizeof(BlockQ5_K) == 176, "Q5_K block must be 176 bytes as in ggml");

// Q6_K: 6-bit weights, 16 sub-blocks of 16 with int8 scales, symmetric. 210 bytes = 6.5625 bits.
//   Weight i = 128*h + 32*k + l (h < 2, k < 4, l < 32): low 4 bits are the low (k = 0, 1) or high
//   (k = 2, 3) nibble of ql[64*h + 32*(k % 2) + l]; high 2 bits are bits 2k..2k+1 of
//   qh[32*h + l]; q = that 6-bit value - 32; sub-block s = 8*h + 2*k + l/16.
//   w = (d * sc) * q.
struct BlockQ6_K {
  uint8_t ql[kQK_K / 2];
  uint8_t qh[kQK_K / 4];
  int8_t scales[kQK_K / 16];
  fp16_t d;
};
static_assert(sizeof(BlockQ6_K) == 210, "Q6_K block must be 210 bytes as in ggml");

// ---- bf16 ----------------------------------------------------------------------------------
inline float bf16_bits_to_fp32(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// ---- reference decoders: element i (i < block elements) -----------------------------------
float q4_0_value(const BlockQ4_0& b, size_t i);
float q2_K_value(const BlockQ2_K& b, size_t i);
float q3_K_value(const BlockQ3_K& b, size_t i);
float q4_K_value(const BlockQ4_K& b, size_t i);
float q5_K_value(const BlockQ5_K& b, size_t i);
float q6_K_value(const BlockQ6_K& b, size_t i);

// ---- K-quant encoders: x [256] -> one block ------------------------------------------------
// (Q4_0's encoder is gguf::quantize_row_q4_0, which follows ggml's rule.)
// Round to nearest on the stored (already rounded) scales, so every weight of a finite block is
// reproduced within half a quantization step of its sub-block plus fp16 rounding of d/dmin:
// |w - x| <= 0.5 * |d * sc| (+ |dmin| * m-rounding for the asymmetric types; tests derive the
// exact bound). An all-zero block gives all-zero scales (never a division by zero).
void quantize_block(BlockQ2_K* out, const float* x);
void quantize_block(BlockQ3_K* out, const float* x);
void quantize_block(BlockQ4_K* out, const float* x);
void quantize_block(BlockQ5_K* out, const float* x);
void quantize_block(BlockQ6_K* out, const float* x);

}  // namespace snapkv
