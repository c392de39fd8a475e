// The bulk binary16 conversions as compiled for each ISA level (fp16_simd.cpp; see kernels/isa.h),
// with the contracts of fp16_to_fp32_n / fp32_to_fp16_n / fp16_round_trip_n in snapkv/util/fp16.h
// (their public definitions, kernels/fp16.cpp, call the active level's entries of
// kernels/registry.h). The scalar references are util's fp16_to_fp32 / fp32_to_fp16.
#pragma once

#include <cstddef>

#include "kernels/isa_tables.h"
#include "snapkv/util/fp16.h"

namespace snapkv::kernels {
struct Fp16Kernels {
  void (*to_fp32)(float* out, const fp16_t* in, size_t n);
  void (*to_fp16)(fp16_t* out, const float* in, size_t n);
  bool (*round_trip)(float* out, const float* in, size_t n);
};
}  // namespace snapkv::kernels

#define SNAPKV_FP16_KERNELS_DECLARE(NS)                          \
  namespace snapkv::NS {                                         \
  void fp16_to_fp32_n(float* out, const fp16_t* in, size_t n);   \
  void fp32_to_fp16_n(fp16_t* out, const float* in, size_t n);   \
  bool fp16_round_trip_n(float* out, const float* in, size_t n); \
  }
SNAPKV_ISA_DECLARE(SNAPKV_FP16_KERNELS_DECLARE)

#define SNAPKV_FP16_KERNELS_ENTRY(NS)                                \
  kernels::Fp16Kernels {                                             \
    &NS::fp16_to_fp32_n, &NS::fp32_to_fp16_n, &NS::fp16_round_trip_n \
  }
