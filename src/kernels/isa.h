// For kernel files compiled once per ISA level (CMakeLists.txt: SNAPKV_ISA_SOURCES; the levels are
// described in include/snapkv/util/cpu.h). CMake defines SNAPKV_ISA as the level's namespace
// (isa_scalar, isa_avx2, isa_avx512, isa_neon or isa_neon_dot); such a file puts everything it
// defines in `namespace snapkv::SNAPKV_ISA` (or in an anonymous namespace), so its copies never
// share a symbol: the linker keeps one copy of an inline function with external linkage for the
// whole program, and that copy may hold the instructions of another level (the isa.objects test
// checks the built objects for it). Its `#if defined(__AVX2__)` style guards see the level's target
// flags (scalar: none, so the portable fallback is what compiles). On arm64, where NEON is part of
// every target, NEON paths are guarded by SNAPKV_NEON_KERNELS (defined at the neon and neon_dot
// levels only) and dot-product ones also by __ARM_FEATURE_DOTPROD (neon_dot).
#pragma once

#if !defined(SNAPKV_ISA)
#error "a per-ISA kernel file: list it in SNAPKV_ISA_SOURCES (CMakeLists.txt)"
#endif
