// The bulk binary16 conversions of snapkv/util/fp16.h: the active ISA level's kernels
// (fp16_simd.cpp: F16C from the avx2 level up, NEON at the arm64 levels), each equal bit for bit
// to util's scalar conversions applied element by element.
#include "snapkv/util/fp16.h"
#include "kernels/registry.h"

namespace snapkv {

void fp16_to_fp32_n(float* out, const fp16_t* in, size_t n) {
  kernels::active().fp16.to_fp32(out, in, n);
}

void fp32_to_fp16_n(fp16_t* out, const float* in, size_t n) {
  kernels::active().fp16.to_fp16(out, in, n);
}

bool fp16_round_trip_n(float* out, const float* in, size_t n) {
  return kernels::active().fp16.round_trip(out, in, n);
}

}  // namespace snapkv
