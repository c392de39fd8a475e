// Internal to util/: the bulk binary16 conversions compiled once per ISA level (fp16_simd.cpp; see
// util/isa.h), with the contracts of fp16_to_fp32_n / fp32_to_fp16_n in snapkv/util/fp16.h.
#pragma once

#include <cstddef>

#include "snapkv/util/fp16.h"
#include "util/isa_tables.h"

#define SNAPKV_FP16_KERNELS_DECLARE(NS)                          \
  namespace snapkv::NS {                                         \
  void fp16_to_fp32_n(float* out, const fp16_t* in, size_t n);   \
  void fp32_to_fp16_n(fp16_t* out, const float* in, size_t n);   \
  bool fp16_round_trip_n(float* out, const float* in, size_t n); \
  }

SNAPKV_ISA_DECLARE(SNAPKV_FP16_KERNELS_DECLARE)
