// KIVI scalar primitives: guarded min/max parameters, nearest-code encoding, the decode formula and
// code-word packing (layouts in include/snapkv/kv/codecs/kivi.h). These run when rows are quantized
// (a residual flush) and in the reference paths; the attention kernels live in kivi_kernels.cpp.
#include <cmath>
#include <cstring>
#include <string>

#include "snapkv/kv/codecs/kivi.h"
#include "snapkv/util/error.h"

namespace snapkv {
namespace {

// The next binary16 value above h, for h >= +0 finite (bit increment walks subnormals and normals).
fp16_t next_up_positive(fp16_t h) {
  return static_cast<fp16_t>(h + 1u);
}
// The next binary16 value below h, for any finite h.
fp16_t next_down(fp16_t h) {
  if (h == 0x0000u) return 0x8001u;                     // +0 -> smallest negative subnormal
  if (h & 0x8000u) return static_cast<fp16_t>(h + 1u);  // negative: magnitude grows
  return static_cast<fp16_t>(h - 1u);                   // positive: magnitude shrinks
}

}  // namespace

KiviParams kivi_choose_params(float lo, float hi, int bits) {
  if (bits != 2 && bits != 3 && bits != 4) {
    throw_invalid("kivi", "unsupported bit width", std::to_string(bits), "2, 3 or 4");
  }
  if (!(lo <= hi) || !std::isfinite(lo) || !std::isfinite(hi) || std::fabs(lo) > kFp16Max ||
      std::fabs(hi) > kFp16Max) {
    std::string got = "[";  // built with += (GCC 12 -Wrestrict misfires on chained operator+)
    got += std::to_string(lo);
    got += ", ";
    got += std::to_string(hi);
    got += "]";
    throw_invalid("kivi", "group range must be finite, ordered and within fp16", got,
                  "lo <= hi, |lo|, |hi| <= 65504");
  }
  // zero: lo rounded toward -inf to fp16 (exact when lo is already an fp16 value).
  fp16_t zero = fp32_to_fp16(lo);
  if (fp16_to_fp32(zero) > lo) zero = next_down(zero);
  const float z = fp16_to_fp32(zero);
  KiviParams p{0, zero};
  if (hi == z) return p;  // constant group: scale 0, every code 0, exact
  const float levels = static_cast<float>(kivi_max_code(bits));
  // scale: rounded up until the top grid point, decoded as everywhere else, reaches hi. The range
  // hi - z is at most 2 * 65504, so scale <= 2 * 65504 / 3 stays finite in fp16.
  fp16_t scale = fp32_to_fp16((hi - z) / levels);
  if (scale == 0) scale = 1;  // smallest subnormal: a positive range never gets scale 0
  for (int step = 0; kivi_decode(kivi_max_code(bits), fp16_to_fp32(scale), z) < hi; ++step) {
    SNAPKV_CHECK(step < 8);
    scale = next_up_positive(scale);
  }
  p.scale = scale;
  return p;
}

uint32_t kivi_encode(float x, KiviParams p, int bits) {
  const float scale = fp16_to_fp32(p.scale);
  if (scale == 0.0f) return 0;  // constant group (guarded: never divide by a zero scale)
  const float zero = fp16_to_fp32(p.zero);
  const uint32_t max_code = kivi_max_code(bits);
  const float t = std::floor((x - zero) / scale);
  if (!(t >= 0.0f)) return 0;  // x at or below the minimum (also catches NaN defensively)
  if (t >= static_cast<float>(max_code)) return max_code;
  // Pick the nearer of the two neighbouring grid points as they decode, so the error bound
  // |x - decode| <= scale/2 (+ decode rounding) holds whatever the division rounded to.
  const auto below = static_cast<uint32_t>(t);
  const float d_below = std::fabs(x - kivi_decode(below, scale, zero));
  const float d_above = std::fabs(kivi_decode(below + 1, scale, zero) - x);
  return d_above < d_below ? below + 1 : below;
}

uint32_t kivi_pack_word(const uint8_t* codes, int bits) {
  uint32_t word = 0;
  for (size_t k = 0; k < kKiviOctet; ++k) {
    word |= static_cast<uint32_t>(codes[k]) << (static_cast<uint32_t>(bits) * k);
  }
  return word;
}

void kivi_unpack_word(uint8_t* codes, uint32_t word, int bits) {
  const uint32_t mask = kivi_max_code(bits);
  for (size_t k = 0; k < kKiviOctet; ++k) {
    codes[k] = static_cast<uint8_t>((word >> (static_cast<uint32_t>(bits) * k)) & mask);
  }
}

void kivi_store_word(uint8_t* words, size_t i, uint32_t word, int bits) {
  if (bits == 2) {
    const auto w = static_cast<uint16_t>(word);
    std::memcpy(words + 2 * i, &w, sizeof w);
    return;
  }
  if (bits == 3) {
    uint8_t* b = words + 3 * i;
    b[0] = static_cast<uint8_t>(word);
    b[1] = static_cast<uint8_t>(word >> 8);
    b[2] = static_cast<uint8_t>(word >> 16);
    return;
  }
  std::memcpy(words + 4 * i, &word, sizeof word);
}

}  // namespace snapkv
