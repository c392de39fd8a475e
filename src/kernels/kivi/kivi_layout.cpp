// The decode and the word load of the packed KIVI layouts (snapkv/kernels/kivi_layout.h).
#include "snapkv/kernels/kivi_layout.h"

#include <cstring>

namespace snapkv {

float kivi_decode(uint32_t code, KiviParams p) {
  return kivi_decode(code, fp16_to_fp32(p.scale), fp16_to_fp32(p.zero));
}

uint32_t kivi_load_word(const uint8_t* words, size_t i, int bits) {
  if (bits == 2) {
    uint16_t w;
    std::memcpy(&w, words + 2 * i, sizeof w);
    return w;
  }
  if (bits == 3) {  // three bytes, little-endian
    const uint8_t* b = words + 3 * i;
    return uint32_t{b[0]} | uint32_t{b[1]} << 8 | uint32_t{b[2]} << 16;
  }
  uint32_t w;
  std::memcpy(&w, words + 4 * i, sizeof w);
  return w;
}

}  // namespace snapkv
