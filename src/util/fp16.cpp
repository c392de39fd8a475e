// binary16 conversion: portable bit manipulation, the reference of the bulk conversions (those are
// defined by the kernel layer: src/kernels/fp16.cpp).
#include "snapkv/util/fp16.h"

#include <cstring>

namespace snapkv {
namespace {

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

}  // namespace

float fp16_to_fp32(fp16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  const uint32_t mant = h & 0x3FFu;
  if (exp == 0) {
    if (mant == 0) return float_of(sign);
    // subnormal: value = mant * 2^-24
    const float v = static_cast<float>(mant) * (1.0f / 16777216.0f);
    return sign ? -v : v;
  }
  if (exp == 31) return float_of(sign | 0x7F800000u | (mant << 13) | (mant ? 0x00400000u : 0u));
  return float_of(sign | ((exp + 112u) << 23) | (mant << 13));
}

fp16_t fp32_to_fp16(float f) {
  const uint32_t u = bits_of(f);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t abs = u & 0x7FFFFFFFu;
  if (abs >= 0x7F800000u) {  // inf or NaN
    return static_cast<fp16_t>(sign | 0x7C00u | (abs > 0x7F800000u ? 0x0200u : 0u));
  }
  if (abs >= 0x477FF000u) return static_cast<fp16_t>(sign | 0x7C00u);  // rounds to >= 65520: inf
  if (abs < 0x38800000u) {  // below the smallest normal half (2^-14): subnormal or zero
    // value in units of 2^-24, rounded to nearest even
    const float a = float_of(abs);
    const float scaled = a * 16777216.0f;  // exact (power of two)
    // round half to even on a value < 1024
    uint32_t q = static_cast<uint32_t>(scaled);
    const float frac = scaled - static_cast<float>(q);
    if (frac > 0.5f || (frac == 0.5f && (q & 1u))) ++q;
    return static_cast<fp16_t>(sign | q);
  }
  // normal: rebias exponent, round mantissa from 23 to 10 bits, nearest even
  uint32_t mant = abs & 0x7FFFFFu;
  uint32_t exp = (abs >> 23) - 112u;
  uint32_t half = (exp << 10) | (mant >> 13);
  const uint32_t rest = mant & 0x1FFFu;
  if (rest > 0x1000u || (rest == 0x1000u && (half & 1u))) ++half;  // carry may bump exponent: ok
  return static_cast<fp16_t>(sign | half);
}

}  // namespace snapkv
