// IEEE 754 binary16 <-> binary32 conversion. Round-to-nearest-even on the way down; overflow
// becomes +-inf, NaN stays NaN (quiet). Scalar versions are the reference; the bulk versions use
// F16C at the avx2 ISA level and up (snapkv/util/cpu.h) and are held to the scalar ones by tests.
#pragma once

#include <cstddef>
#include <cstdint>

namespace snapkv {

using fp16_t = uint16_t;  // raw binary16 bits

float fp16_to_fp32(fp16_t h);
fp16_t fp32_to_fp16(float f);

// out[i] = convert(in[i]) for i < n
void fp16_to_fp32_n(float* out, const fp16_t* in, size_t n);
void fp32_to_fp16_n(fp16_t* out, const float* in, size_t n);

// out[i] = fp16_to_fp32(fp32_to_fp16(in[i])) for i < n: the value a binary16 store gives back.
// Returns whether every |in[i]| <= kFp16Max (no NaN, no Inf, nothing that would round to Inf or
// to kFp16Max from above), so a caller that must reject such input needs no second read of in.
// out and in: [n], may be the same array.
bool fp16_round_trip_n(float* out, const float* in, size_t n);

// Largest finite binary16 value and the unit roundoff of binary16 (2^-11).
inline constexpr float kFp16Max = 65504.0f;
inline constexpr float kFp16UnitRoundoff = 1.0f / 2048.0f;

}  // namespace snapkv
