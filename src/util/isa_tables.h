// For the per-level dispatch tables (e.g. ops/kernels.cpp): SNAPKV_ISA_NS_AVX2 / _AVX512 name the
// namespace whose kernels serve that level, the next level down when this build does not compile
// it (CMake defines SNAPKV_ISA_AVX2 / SNAPKV_ISA_AVX512 for the levels it compiles).
#pragma once

#if defined(SNAPKV_ISA_AVX2)
#define SNAPKV_ISA_NS_AVX2 isa_avx2
#else
#define SNAPKV_ISA_NS_AVX2 isa_scalar
#endif
#if defined(SNAPKV_ISA_AVX512)
#define SNAPKV_ISA_NS_AVX512 isa_avx512
#else
#define SNAPKV_ISA_NS_AVX512 SNAPKV_ISA_NS_AVX2
#endif
