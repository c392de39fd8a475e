// The one seam for SIMD: which instruction-set level the kernels run at.
//
// Promises: the CPU's SIMD features, detected once (x86-64: cpuid, with the OS's register-state
// support, via __builtin_cpu_supports; arm64 Linux: the kernel's HWCAP bits via getauxval; arm64
// macOS: sysctlbyname's hw.optional keys); the active level, the highest one this build compiled
// and the CPU supports, or the one named by the environment variable SNAPKV_ISA (scalar, avx2,
// avx512, neon, neon_dot) read at first use; a level the CPU lacks, or one of another
// architecture, is refused with std::invalid_argument, never run.
//   scalar    portable C++ only (the baseline every object outside the kernels is compiled for)
//   avx2      x86-64: AVX2 + FMA + F16C (the floor of the x86 kernels: Haswell, Zen 1 and later)
//   avx512    x86-64: the avx2 set plus AVX-512 F, BW, VL, DQ and VNNI
//   neon      arm64: Advanced SIMD of ARMv8.0-A (every arm64 CPU; fp16 conversions included)
//   neon_dot  arm64: neon plus the ARMv8.2 dot product (sdot / udot: Cortex-A76 / Neoverse N1,
//             Apple M1 and later)
// Kernel files listed in SNAPKV_ISA_SOURCES (CMakeLists.txt) are compiled once per level of the
// target architecture into the namespaces snapkv::isa_<level>; the kernel registry
// (src/kernels/registry.h) holds their entry points per level, and the public functions call the
// active level's entry (isa_select).
// Leaves out: choosing per kernel (one level for the whole process), SVE, fp16 arithmetic (the
// kernels convert fp16 to fp32 and compute in fp32, which keeps them equal to the scalar
// references), and SIMD on other architectures (they build the scalar level only).
#pragma once

#include <atomic>
#include <string>
#include <string_view>

namespace snapkv {

enum class IsaLevel : int { scalar = 0, avx2 = 1, avx512 = 2, neon = 3, neon_dot = 4 };
inline constexpr int kIsaLevelCount = 5;
// Every level, scalar first, each architecture's levels in increasing order.
inline constexpr IsaLevel kIsaLevels[kIsaLevelCount] = {
    IsaLevel::scalar, IsaLevel::avx2, IsaLevel::avx512, IsaLevel::neon, IsaLevel::neon_dot};

struct CpuFeatures {
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512vl = false;
  bool avx512dq = false;
  bool avx512vnni = false;
  bool asimd = false;    // arm64 Advanced SIMD (NEON)
  bool asimddp = false;  // arm64 dot product (sdot / udot)
};

// The features of the CPU this process runs on (detected once).
const CpuFeatures& cpu_features();

// "scalar", "avx2", "avx512", "neon", "neon_dot".
const char* to_string(IsaLevel level);
// The inverse of to_string; throws std::invalid_argument for any other name.
IsaLevel parse_isa_level(std::string_view name);

// True when this build holds kernels compiled for `level` (scalar always; avx2 / avx512 on x86-64,
// neon / neon_dot on arm64, each with a compiler that accepts its flags).
bool isa_compiled(IsaLevel level);
// The features `level` needs that `cpu` lacks, comma-separated ("" when it has them all).
std::string isa_missing_features(IsaLevel level, const CpuFeatures& cpu);
// Throws std::invalid_argument ("[cpu] ...") unless `level` is compiled and `cpu` has its features.
void check_isa_level(IsaLevel level, const CpuFeatures& cpu);

// The highest compiled level the running CPU supports.
IsaLevel best_isa_level();
// The active level: SNAPKV_ISA when set (checked against the CPU: an unknown name or a level the
// CPU lacks throws std::invalid_argument, on this and every later call), else best_isa_level().
IsaLevel isa_level();
// Makes `level` active for the whole process after check_isa_level against the running CPU
// (tests and benchmarks force each path with it). Not meant to race with running kernels.
void set_isa_level(IsaLevel level);

namespace detail {
extern std::atomic<int> g_isa_level;  // the active level, -1 until first resolved
int resolve_isa_level();              // reads SNAPKV_ISA once; throws like isa_level()
}  // namespace detail

// The active level's entry of a table indexed by level (the dispatch of every kernel).
template <class T>
const T& isa_select(const T (&per_level)[kIsaLevelCount]) {
  int level = detail::g_isa_level.load(std::memory_order_relaxed);
  if (level < 0) level = detail::resolve_isa_level();
  return per_level[level];
}

}  // namespace snapkv
