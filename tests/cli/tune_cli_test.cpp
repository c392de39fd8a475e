// The defaults sweep (scripts/tune_defaults.sh + scripts/tune_table.py) on a tiny grid: every
// setting of the grid is run in both protocols, and the summary names the best setting of every
// method and keep. Skipped when python3 is missing.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "cli/cli_test_util.h"

namespace snapkv::clitest {
namespace {

TEST(TuneCli, TinySweepOutputIsComplete) {
  if (std::system("command -v python3 >/dev/null 2>&1") != 0) GTEST_SKIP() << "no python3";
  TempDir dir("tune");
  const std::string src = SNAPKV_SOURCE_DIR;
  const std::string out = dir.file("sweep"), log = dir.file("log.txt");
  const std::string cmd = "cd '" + src + "' && SNAPKV='" + SNAPKV_CLI_PATH +
                          "' N=1 CONTEXT=256 KEEPS=0.5 KERNELS='7 15' WINDOWS=16 POOLS=max "
                          "bash scripts/tune_defaults.sh '" +
                          out + "' >'" + log + "' 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << read_text(log);
  const std::string text = read_text(log);
  size_t files = 0;
  for (const auto& e : std::filesystem::directory_iterator(out)) {
    EXPECT_EQ(e.path().extension(), ".json") << e.path();  // no .tmp left behind
    ++files;
  }
  EXPECT_EQ(files, 4u);  // 2 kernels x 2 protocols
  for (const std::string part :
       {"### query_aware", "### question_agnostic", "| window 16, max 7 |", "| window 16, max 15 |",
        "- snapkv @ keep 0.5: window 16", "- snapkv-proxy @ keep 0.5: window 16",
        "- chunkkv @ keep 0.5: window 16", "Best mean over every method"}) {
    EXPECT_NE(text.find(part), std::string::npos) << part << "\n" << text;
  }
}

}  // namespace
}  // namespace snapkv::clitest
