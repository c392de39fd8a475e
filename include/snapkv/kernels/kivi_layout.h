// The packed KIVI layouts as the kernels read them (the codec itself, its quantizer and the store
// layout are described in snapkv/kv/codecs/kivi.h, which includes this header): one group's
// stored parameters, kitty's boosted-channel index, the code words (8 codes of `bits` bits each,
// little-endian) and the one decode formula.
// Promises: the layouts pinned by static_assert, decode and word load as every kernel and store
// performs them. Leaves out: choosing parameters, encoding and packing (kv).
#pragma once

#include <cstddef>
#include <cstdint>

#include "snapkv/util/fp16.h"

namespace snapkv {

// One quantization group's parameters, as stored.
struct KiviParams {
  fp16_t scale;  // >= 0; 0 only for a constant group
  fp16_t zero;   // the group minimum
};
static_assert(sizeof(KiviParams) == 4, "KiviParams is two binary16 values");
static_assert(offsetof(KiviParams, zero) == 2, "params convert as an fp16 array (scale, zero)");

// Kitty's per-block channel index and per-row boosted value, as stored (see "Kitty" in
// snapkv/kv/codecs/kivi.h).
using KittyChannel = uint16_t;
static_assert(sizeof(KittyChannel) == 2 && sizeof(fp16_t) == 2, "kitty indices and values");

inline constexpr size_t kKiviOctet = 8;  // codes per word

// Bytes of one code word (8 codes of `bits` bits): 2 for 2-bit, 3 for 3-bit, 4 for 4-bit.
constexpr size_t kivi_word_bytes(int bits) {
  return static_cast<size_t>(bits);
}
constexpr uint32_t kivi_max_code(int bits) {
  return (1u << bits) - 1u;
}

// zero + scale * code in fp32 (the one decode formula; -ffp-contract=off keeps it unfused).
inline float kivi_decode(uint32_t code, float scale, float zero) {
  const float step = scale * static_cast<float>(code);
  return zero + step;
}
float kivi_decode(uint32_t code, KiviParams p);

// Reads the word at index i of a packed code array (kivi.h's kivi_store_word writes it).
uint32_t kivi_load_word(const uint8_t* words, size_t i, int bits);

}  // namespace snapkv
