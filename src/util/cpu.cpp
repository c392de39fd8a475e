// CPU feature detection and the active ISA level (see cpu.h). SNAPKV_ISA_AVX2 / _AVX512 / _NEON /
// _NEON_DOT are defined by CMake when this build compiles the kernels for those levels.
#include "snapkv/util/cpu.h"

#include <cstdlib>
#include <stdexcept>
#include <vector>

#include "snapkv/util/error.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#elif defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#elif defined(__aarch64__) && defined(__APPLE__)
#include <sys/sysctl.h>
#include <sys/types.h>
#endif

namespace snapkv {

namespace detail {
std::atomic<int> g_isa_level{-1};
}  // namespace detail

namespace {

CpuFeatures detect() {
  CpuFeatures f;
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  // libgcc's checks include the OS's XSAVE support for the YMM / ZMM state.
  f.avx2 = __builtin_cpu_supports("avx2");
  f.fma = __builtin_cpu_supports("fma");
  // clang 14's __builtin_cpu_supports has no "f16c": CPUID leaf 1, ECX bit 29 (F16C uses the
  // YMM state that the avx2 check above already requires the OS to save).
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  f.f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & (1u << 29)) != 0;
  f.avx512f = __builtin_cpu_supports("avx512f");
  f.avx512bw = __builtin_cpu_supports("avx512bw");
  f.avx512vl = __builtin_cpu_supports("avx512vl");
  f.avx512dq = __builtin_cpu_supports("avx512dq");
  f.avx512vnni = __builtin_cpu_supports("avx512vnni");
#elif defined(__aarch64__) && defined(__linux__)
  // The kernel's HWCAP bits (arch/arm64 uapi hwcap.h): ASIMD bit 1, ASIMDDP bit 20.
  const unsigned long hwcap = getauxval(AT_HWCAP);
  f.asimd = (hwcap & (1ul << 1)) != 0;
  f.asimddp = (hwcap & (1ul << 20)) != 0;
#elif defined(__aarch64__) && defined(__APPLE__)
  const auto has = [](const char* key) {
    int value = 0;
    size_t size = sizeof value;
    return sysctlbyname(key, &value, &size, nullptr, 0) == 0 && value != 0;
  };
  f.asimd = has("hw.optional.AdvSIMD") || has("hw.optional.neon");
  f.asimddp = has("hw.optional.arm.FEAT_DotProd");
#endif
  return f;
}

bool is_arm_level(IsaLevel level) {
  return level == IsaLevel::neon || level == IsaLevel::neon_dot;
}

// The architecture this build targets, for the refusal of another architecture's level.
constexpr const char* kBuildArch =
#if defined(__x86_64__) || defined(__i386__)
    "x86-64";
#elif defined(__aarch64__)
    "arm64";
#else
    "neither x86-64 nor arm64";
#endif

// (name, has) for each feature a level needs, in the order they are reported.
struct Need {
  const char* name;
  bool CpuFeatures::*has;
};
std::vector<Need> needs(IsaLevel level) {
  std::vector<Need> n;
  if (level == IsaLevel::scalar) return n;
  if (is_arm_level(level)) {
    n = {{"asimd", &CpuFeatures::asimd}};
    if (level == IsaLevel::neon_dot) n.push_back({"asimddp", &CpuFeatures::asimddp});
    return n;
  }
  n = {{"avx2", &CpuFeatures::avx2}, {"fma", &CpuFeatures::fma}, {"f16c", &CpuFeatures::f16c}};
  if (level == IsaLevel::avx512) {
    n.insert(n.end(), {{"avx512f", &CpuFeatures::avx512f},
                       {"avx512bw", &CpuFeatures::avx512bw},
                       {"avx512vl", &CpuFeatures::avx512vl},
                       {"avx512dq", &CpuFeatures::avx512dq},
                       {"avx512vnni", &CpuFeatures::avx512vnni}});
  }
  return n;
}

constexpr const char* kLevelNames = "scalar, avx2, avx512, neon or neon_dot";

IsaLevel best_level_for(const CpuFeatures& cpu) {
  for (const IsaLevel level :
       {IsaLevel::avx512, IsaLevel::avx2, IsaLevel::neon_dot, IsaLevel::neon}) {
    if (isa_compiled(level) && isa_missing_features(level, cpu).empty()) return level;
  }
  return IsaLevel::scalar;
}

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = detect();
  return features;
}

const char* to_string(IsaLevel level) {
  switch (level) {
    case IsaLevel::scalar:
      return "scalar";
    case IsaLevel::avx2:
      return "avx2";
    case IsaLevel::avx512:
      return "avx512";
    case IsaLevel::neon:
      return "neon";
    case IsaLevel::neon_dot:
      return "neon_dot";
  }
  return "?";
}

IsaLevel parse_isa_level(std::string_view name) {
  for (const IsaLevel level : kIsaLevels) {
    if (name == to_string(level)) return level;
  }
  throw_invalid("cpu", "unknown ISA level", "'" + std::string(name) + "'", kLevelNames);
}

bool isa_compiled(IsaLevel level) {
  switch (level) {
    case IsaLevel::scalar:
      return true;
    case IsaLevel::avx2:
#if defined(SNAPKV_ISA_AVX2)
      return true;
#else
      return false;
#endif
    case IsaLevel::avx512:
#if defined(SNAPKV_ISA_AVX512)
      return true;
#else
      return false;
#endif
    case IsaLevel::neon:
#if defined(SNAPKV_ISA_NEON)
      return true;
#else
      return false;
#endif
    case IsaLevel::neon_dot:
#if defined(SNAPKV_ISA_NEON_DOT)
      return true;
#else
      return false;
#endif
  }
  return false;
}

std::string isa_missing_features(IsaLevel level, const CpuFeatures& cpu) {
  std::string missing;
  for (const Need& need : needs(level)) {
    if (cpu.*need.has) continue;
    if (!missing.empty()) missing += ", ";
    missing += need.name;
  }
  return missing;
}

void check_isa_level(IsaLevel level, const CpuFeatures& cpu) {
  const char* level_arch = level == IsaLevel::scalar ? kBuildArch
                           : is_arm_level(level)     ? "arm64"
                                                     : "x86-64";
  if (std::string_view(level_arch) != kBuildArch) {
    throw_invalid(
        "cpu",
        std::string("ISA level ") + to_string(level) + " is for " + level_arch +
            " CPUs, this build runs on " + kBuildArch,
        to_string(level),
        std::string("a level of this architecture, at most ") + to_string(best_level_for(cpu)));
  }
  if (!isa_compiled(level)) {
    throw_invalid("cpu",
                  std::string("ISA level ") + to_string(level) + " not compiled into this build",
                  to_string(level), "a level this build holds (see SNAPKV_ISA_SOURCES)");
  }
  const std::string missing = isa_missing_features(level, cpu);
  if (!missing.empty()) {
    throw_invalid(
        "cpu", std::string("ISA level ") + to_string(level) + " needs CPU features this CPU lacks",
        "missing " + missing,
        std::string("a level the CPU supports, at most ") + to_string(best_level_for(cpu)));
  }
}

IsaLevel best_isa_level() {
  return best_level_for(cpu_features());
}

int detail::resolve_isa_level() {
  IsaLevel level = best_isa_level();
  if (const char* env = std::getenv("SNAPKV_ISA"); env != nullptr && *env != '\0') {
    try {
      level = parse_isa_level(env);
      check_isa_level(level, cpu_features());
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(std::string(e.what()) +
                                  " (from the environment: SNAPKV_ISA=" + env + ")");
    }
  }
  int expected = -1;
  // A concurrent first use resolves to the same level; set_isa_level wins over the environment.
  detail::g_isa_level.compare_exchange_strong(expected, static_cast<int>(level));
  return detail::g_isa_level.load(std::memory_order_relaxed);
}

IsaLevel isa_level() {
  const int level = detail::g_isa_level.load(std::memory_order_relaxed);
  return static_cast<IsaLevel>(level >= 0 ? level : detail::resolve_isa_level());
}

void set_isa_level(IsaLevel level) {
  check_isa_level(level, cpu_features());
  detail::g_isa_level.store(static_cast<int>(level));
}

}  // namespace snapkv
