// The SIMD level through the `snapkv` binary: --version names the level in use, SNAPKV_ISA forces
// one, and an unknown level or one this CPU lacks is a usage error (exit 2) before any work.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "cli/cli_test_util.h"
#include "snapkv/util/cpu.h"

namespace snapkv::clitest {
namespace {

// Runs the binary with SNAPKV_ISA set to `level` ("" = unset).
CliResult run_with_isa(const std::string& level, const std::string& args, const TempDir& dir) {
  const char* saved = std::getenv("SNAPKV_ISA");
  const std::string saved_value = saved ? saved : "";
  if (level.empty()) {
    ::unsetenv("SNAPKV_ISA");
  } else {
    ::setenv("SNAPKV_ISA", level.c_str(), 1);
  }
  CliResult r = run_cli(args, dir);
  if (saved) {
    ::setenv("SNAPKV_ISA", saved_value.c_str(), 1);
  } else {
    ::unsetenv("SNAPKV_ISA");
  }
  return r;
}

TEST(IsaCli, VersionNamesTheLevelAndSnapkvIsaForcesIt) {
  TempDir dir("isa_cli");
  const std::string best = to_string(best_isa_level());
  const CliResult r = run_with_isa("", "--version", dir);
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("SIMD kernels: " + best + ", best on this CPU: " + best), std::string::npos)
      << r.out;
  const CliResult s = run_with_isa("scalar", "--version", dir);
  EXPECT_EQ(s.rc, 0) << s.err;
  EXPECT_NE(s.out.find("SIMD kernels: scalar,"), std::string::npos) << s.out;
}

TEST(IsaCli, UnknownOrUnsupportedLevelIsAUsageError) {
  TempDir dir("isa_cli");
  const CliResult r = run_with_isa("avx3", "--version", dir);
  EXPECT_EQ(r.rc, 2);
  EXPECT_EQ(
      r.err.rfind("snapkv: error: [cpu] unknown ISA level, got 'avx3', expected scalar, avx2, "
                  "avx512, neon or neon_dot (from the environment: SNAPKV_ISA=avx3)",
                  0),
      0u)
      << r.err;
  // Another architecture's level is refused by name before any kernel runs (never SIGILL).
#if defined(__aarch64__)
  const std::string foreign = "avx2", foreign_arch = "x86-64";
#else
  const std::string foreign = "neon", foreign_arch = "arm64";
#endif
  const CliResult f = run_with_isa(foreign, "--version", dir);
  EXPECT_EQ(f.rc, 2);
  EXPECT_NE(f.err.find("ISA level " + foreign + " is for " + foreign_arch + " CPUs"),
            std::string::npos)
      << f.err;
  const IsaLevel top = isa_compiled(IsaLevel::neon_dot) ? IsaLevel::neon_dot : IsaLevel::avx512;
  if (best_isa_level() == top || !isa_compiled(top)) {
    GTEST_SKIP() << "this CPU has every compiled level; cpu_test covers the refusal";
  }
  const CliResult s = run_with_isa(to_string(top), "--version", dir);
  EXPECT_EQ(s.rc, 2);
  EXPECT_NE(s.err.find("needs CPU features this CPU lacks"), std::string::npos) << s.err;
}

}  // namespace
}  // namespace snapkv::clitest
