// `snapkv coverage` end to end: a small run prints the table on stdout, nothing on stderr when
// stderr is not a terminal, writes a JSON report with every number; usage errors exit 2 and an
// unwritable --json file exits 1.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "cli/cli_test_util.h"

namespace snapkv::clitest {
namespace {

const std::string kSmall =
    "coverage --lengths 256,320 --budgets 24,48 --kv-heads 1 --group 2 --head-dim 32 --window 16 "
    "--seed 5";

TEST(CoverageCli, SmallRunWritesTableAndJson) {
  TempDir dir("coverage");
  const std::string json_path = dir.file("cov.json");
  const CliResult r = run_cli(kSmall + " --json " + json_path, dir);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.err, "");  // stderr is a file here: no progress output
  EXPECT_NE(r.out.find("length 256"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("length 320"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("snapkv-proxy/max7"), std::string::npos) << r.out;
  const nlohmann::json j = nlohmann::json::parse(read_text(json_path));
  EXPECT_EQ(j["config"]["budgets"], nlohmann::json({24, 48}));
  EXPECT_EQ(j["generator"]["n_kv_heads"], 1);
  EXPECT_EQ(j["generator"]["seed"], 5);
  ASSERT_EQ(j["results"].size(), 2u * 10u * 2u);
  for (const auto& row : j["results"]) {
    EXPECT_GE(row["coverage"].get<double>(), 0.0);
    EXPECT_LE(row["coverage"].get<double>(), 1.0 + 1e-12);
  }
  // Same seed, same numbers.
  const std::string json2 = dir.file("cov2.json");
  ASSERT_EQ(run_cli(kSmall + " --quiet --json " + json2, dir).rc, 0);
  EXPECT_EQ(nlohmann::json::parse(read_text(json2))["results"], j["results"]);
}

TEST(CoverageCli, UsageAndRuntimeErrors) {
  TempDir dir("coverage");
  for (const std::string& args : {kSmall + " --budgets 3",    // below sinks + 1
                                  kSmall + " --head-dim 20",  // not a multiple of 8
                                  kSmall + " --lengths 20",   // too short
                                  kSmall + " --window 0", kSmall + " --bogus"}) {
    const CliResult r = run_cli(args, dir);
    EXPECT_EQ(r.rc, 2) << args << "\n" << r.err;
    EXPECT_NE(r.err.find("snapkv: error: "), std::string::npos) << r.err;
  }
  const CliResult r = run_cli(kSmall + " --json /nonexistent-dir/x.json", dir);
  EXPECT_EQ(r.rc, 1) << r.err;
  EXPECT_NE(r.err.find("--json"), std::string::npos) << r.err;
  const CliResult h = run_cli("coverage --help", dir);
  EXPECT_EQ(h.rc, 0);
  EXPECT_NE(h.out.find("needle"), std::string::npos);
}

}  // namespace
}  // namespace snapkv::clitest
