// The SIMD seam (snapkv/util/cpu.h): level names, the features each level needs, refusal of a
// level a CPU lacks (on made-up CPUs, so it is tested on any machine, and on the running one for
// the levels it lacks), and forcing each level this machine supports.
#include "snapkv/util/cpu.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "util/isa_levels_test.h"

namespace snapkv {
namespace {

// A Zen 1 class CPU: AVX2, FMA, F16C, no AVX-512.
CpuFeatures zen1() {
  CpuFeatures f;
  f.avx2 = f.fma = f.f16c = true;
  return f;
}

std::string error_of(IsaLevel level, const CpuFeatures& cpu) {
  try {
    check_isa_level(level, cpu);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(Cpu, LevelNamesRoundTripAndUnknownNamesAreRefused) {
  for (const IsaLevel level : kIsaLevels) EXPECT_EQ(parse_isa_level(to_string(level)), level);
  try {
    parse_isa_level("avx3");
    FAIL() << "avx3 accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()),
              "[cpu] unknown ISA level, got 'avx3', expected scalar, avx2, avx512, neon or "
              "neon_dot");
  }
  EXPECT_THROW(parse_isa_level(""), std::invalid_argument);
  EXPECT_THROW(parse_isa_level("AVX2"), std::invalid_argument);
}

TEST(Cpu, EachLevelNeedsItsFeatures) {
  const CpuFeatures none;
  EXPECT_EQ(isa_missing_features(IsaLevel::scalar, none), "");
  EXPECT_EQ(isa_missing_features(IsaLevel::avx2, none), "avx2, fma, f16c");
  EXPECT_EQ(isa_missing_features(IsaLevel::avx2, zen1()), "");
  EXPECT_EQ(isa_missing_features(IsaLevel::avx512, zen1()),
            "avx512f, avx512bw, avx512vl, avx512dq, avx512vnni");
  CpuFeatures no_f16c = zen1();
  no_f16c.f16c = false;
  EXPECT_EQ(isa_missing_features(IsaLevel::avx2, no_f16c), "f16c");
  CpuFeatures skylake_x = zen1();  // AVX-512 without VNNI
  skylake_x.avx512f = skylake_x.avx512bw = skylake_x.avx512vl = skylake_x.avx512dq = true;
  EXPECT_EQ(isa_missing_features(IsaLevel::avx512, skylake_x), "avx512vnni");
  CpuFeatures cortex_a72;  // ARMv8.0-A: NEON, no dot product
  cortex_a72.asimd = true;
  EXPECT_EQ(isa_missing_features(IsaLevel::neon, none), "asimd");
  EXPECT_EQ(isa_missing_features(IsaLevel::neon, cortex_a72), "");
  EXPECT_EQ(isa_missing_features(IsaLevel::neon_dot, cortex_a72), "asimddp");
  CpuFeatures neoverse_n1 = cortex_a72;
  neoverse_n1.asimddp = true;
  EXPECT_EQ(isa_missing_features(IsaLevel::neon_dot, neoverse_n1), "");
}

// Every level of the other architecture is refused by name, whatever the CPU's features say.
TEST(Cpu, AnotherArchitecturesLevelIsRefusedByName) {
  CpuFeatures all;
  all.avx2 = all.fma = all.f16c = all.avx512f = all.avx512bw = all.avx512vl = all.avx512dq =
      all.avx512vnni = all.asimd = all.asimddp = true;
#if defined(__aarch64__)
  const IsaLevel foreign[] = {IsaLevel::avx2, IsaLevel::avx512};
  const std::string arch = "x86-64", here = "arm64";
#else
  const IsaLevel foreign[] = {IsaLevel::neon, IsaLevel::neon_dot};
  const std::string arch = "arm64", here = "x86-64";
#endif
  for (const IsaLevel level : foreign) {
    EXPECT_FALSE(isa_compiled(level));
    const std::string err = error_of(level, all);
    EXPECT_EQ(err.rfind("[cpu] ISA level " + std::string(to_string(level)) + " is for " + arch +
                            " CPUs, this build runs on " + here,
                        0),
              0u)
        << err;
  }
}

TEST(Cpu, ALevelTheCpuLacksIsRefusedWithTheMissingFeatures) {
#if defined(__aarch64__)
  CpuFeatures cortex_a72;
  cortex_a72.asimd = true;
  if (!isa_compiled(IsaLevel::neon_dot)) GTEST_SKIP() << "neon_dot not compiled into this build";
  EXPECT_EQ(error_of(IsaLevel::neon_dot, cortex_a72),
            "[cpu] ISA level neon_dot needs CPU features this CPU lacks, got missing asimddp, "
            "expected a level the CPU supports, at most neon");
  EXPECT_EQ(error_of(IsaLevel::neon, cortex_a72), "");
  return;
#endif
  const std::string err = error_of(IsaLevel::avx512, zen1());
  if (!isa_compiled(IsaLevel::avx512)) {
    EXPECT_NE(err.find("not compiled into this build"), std::string::npos) << err;
    return;
  }
  EXPECT_EQ(
      err,
      "[cpu] ISA level avx512 needs CPU features this CPU lacks, got missing avx512f, "
      "avx512bw, avx512vl, avx512dq, avx512vnni, expected a level the CPU supports, at most " +
          std::string(isa_compiled(IsaLevel::avx2) ? "avx2" : "scalar"));
  EXPECT_EQ(error_of(IsaLevel::scalar, CpuFeatures{}), "");
  if (isa_compiled(IsaLevel::avx2)) {
    EXPECT_EQ(error_of(IsaLevel::avx2, zen1()), "");
  }
}

TEST(Cpu, TheRunningCpuGetsItsBestLevelAndIsRefusedTheOthers) {
  const isa_test::IsaLevelGuard guard;
  const IsaLevel best = best_isa_level();
  for (const IsaLevel level : kIsaLevels) {
    const bool usable = isa_compiled(level) && isa_missing_features(level, cpu_features()).empty();
    // Levels are ordered within an architecture: the usable ones are scalar and those of the
    // best level's architecture up to it.
    const bool expected =
        level == IsaLevel::scalar || (best != IsaLevel::scalar && level <= best &&
                                      (level >= IsaLevel::neon) == (best >= IsaLevel::neon));
    EXPECT_EQ(usable, expected) << to_string(level);
    if (usable) {
      set_isa_level(level);
      EXPECT_EQ(isa_level(), level);
    } else {
      const IsaLevel before = isa_level();
      EXPECT_THROW(set_isa_level(level), std::invalid_argument) << to_string(level);
      EXPECT_EQ(isa_level(), before);  // a refused level changes nothing
    }
  }
}

TEST(Cpu, IsaSelectFollowsTheActiveLevel) {
  const isa_test::IsaLevelGuard guard;
  const int table[kIsaLevelCount] = {10, 20, 30, 40, 50};
  for (const IsaLevel level : kIsaLevels) {
    if (!isa_compiled(level) || !isa_missing_features(level, cpu_features()).empty()) continue;
    set_isa_level(level);
    EXPECT_EQ(isa_select(table), 10 * (static_cast<int>(level) + 1));
  }
}

}  // namespace
}  // namespace snapkv
