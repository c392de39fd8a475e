// For the per-level dispatch tables (kernels/registry.cpp): SNAPKV_ISA_NS_AVX2 / _AVX512 / _NEON /
// _NEON_DOT name the namespace whose kernels serve that level: the level's own when this build
// compiles it (CMake defines SNAPKV_ISA_AVX2 etc. for the levels it compiles), else the next one
// down (isa_scalar for a level of another architecture, which is never selected: util/cpu.cpp
// refuses it). SNAPKV_ISA_TABLE(ENTRY) is the initializer of a table indexed by IsaLevel, ENTRY(NS)
// one level's entry; SNAPKV_ISA_DECLARE(DECL) applies DECL(NS) to every level's namespace.
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
#if defined(SNAPKV_ISA_NEON)
#define SNAPKV_ISA_NS_NEON isa_neon
#else
#define SNAPKV_ISA_NS_NEON isa_scalar
#endif
#if defined(SNAPKV_ISA_NEON_DOT)
#define SNAPKV_ISA_NS_NEON_DOT isa_neon_dot
#else
#define SNAPKV_ISA_NS_NEON_DOT SNAPKV_ISA_NS_NEON
#endif

// In the order of IsaLevel (snapkv/util/cpu.h).
#define SNAPKV_ISA_TABLE(ENTRY)                                                \
  {                                                                            \
    ENTRY(isa_scalar), ENTRY(SNAPKV_ISA_NS_AVX2), ENTRY(SNAPKV_ISA_NS_AVX512), \
        ENTRY(SNAPKV_ISA_NS_NEON), ENTRY(SNAPKV_ISA_NS_NEON_DOT)               \
  }
#define SNAPKV_ISA_DECLARE(DECL) \
  DECL(isa_scalar)               \
  DECL(isa_avx2)                 \
  DECL(isa_avx512)               \
  DECL(isa_neon)                 \
  DECL(isa_neon_dot)
