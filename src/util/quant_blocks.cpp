// The element-at-a-time reference decoders of the Q4_0 and K-quant blocks, following the layout
// description in util/quant_blocks.h. The fast decoders (ops/quant_blocks.h) evaluate the same
// fp32 expression per weight in the same order, so the two agree bit for bit.
#include "snapkv/util/quant_blocks.h"

#include "util/quant_scales.h"

namespace snapkv {

using namespace quant_internal;  // the packed scales

// ---- Q4_0 ------------------------------------------------------------------------------------

float q4_0_value(const BlockQ4_0& b, size_t i) {
  const uint8_t byte = b.qs[i % 16];
  const int nib = i < 16 ? (byte & 0x0F) : (byte >> 4);
  return static_cast<float>(nib - 8) * fp16_to_fp32(b.d);
}

// ---- Q2_K ------------------------------------------------------------------------------------

float q2_K_value(const BlockQ2_K& b, size_t i) {
  const size_t h = i / 128, j = (i % 128) / 32, l = i % 32;
  const int q = (b.qs[32 * h + l] >> (2 * j)) & 3;
  const uint8_t sm = b.scales[8 * h + 2 * j + l / 16];
  const float dl = fp16_to_fp32(b.d) * static_cast<float>(sm & 0x0F);
  const float ml = fp16_to_fp32(b.dmin) * static_cast<float>(sm >> 4);
  return dl * static_cast<float>(q) - ml;
}

// ---- Q3_K ------------------------------------------------------------------------------------

float q3_K_value(const BlockQ3_K& b, size_t i) {
  const size_t h = i / 128, j = (i % 128) / 32, l = i % 32;
  const int low = (b.qs[32 * h + l] >> (2 * j)) & 3;
  const bool high_set = ((b.hmask[l] >> (4 * h + j)) & 1) != 0;
  const int q = high_set ? low : low - 4;
  const float dl =
      fp16_to_fp32(b.d) * static_cast<float>(scale_q3_K(b.scales, 8 * h + 2 * j + l / 16));
  return dl * static_cast<float>(q);
}

// ---- Q4_K ------------------------------------------------------------------------------------

float q4_K_value(const BlockQ4_K& b, size_t i) {
  const size_t g = i / 64, k = (i % 64) / 32, l = i % 32;
  const uint8_t byte = b.qs[32 * g + l];
  const int q = k == 0 ? (byte & 0x0F) : (byte >> 4);
  int sc, m;
  scale_min_k4(b.scales, 2 * g + k, sc, m);
  const float dl = fp16_to_fp32(b.d) * static_cast<float>(sc);
  const float ml = fp16_to_fp32(b.dmin) * static_cast<float>(m);
  return dl * static_cast<float>(q) - ml;
}

// ---- Q5_K ------------------------------------------------------------------------------------

float q5_K_value(const BlockQ5_K& b, size_t i) {
  const size_t g = i / 64, k = (i % 64) / 32, l = i % 32;
  const uint8_t byte = b.qs[32 * g + l];
  const int low = k == 0 ? (byte & 0x0F) : (byte >> 4);
  const int q = low + (((b.qh[l] >> (2 * g + k)) & 1) ? 16 : 0);
  int sc, m;
  scale_min_k4(b.scales, 2 * g + k, sc, m);
  const float dl = fp16_to_fp32(b.d) * static_cast<float>(sc);
  const float ml = fp16_to_fp32(b.dmin) * static_cast<float>(m);
  return dl * static_cast<float>(q) - ml;
}

// ---- Q6_K ------------------------------------------------------------------------------------

float q6_K_value(const BlockQ6_K& b, size_t i) {
  const size_t h = i / 128, k = (i % 128) / 32, l = i % 32;
  const uint8_t low_byte = b.ql[64 * h + 32 * (k % 2) + l];
  const int low = k < 2 ? (low_byte & 0x0F) : (low_byte >> 4);
  const int high = (b.qh[32 * h + l] >> (2 * k)) & 3;
  const int q = (low | (high << 4)) - 32;
  const float dl = fp16_to_fp32(b.d) * static_cast<float>(b.scales[8 * h + 2 * k + l / 16]);
  return dl * static_cast<float>(q);
}

}  // namespace snapkv
