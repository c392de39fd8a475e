// `snapkv run --verbose`: the load / prefill / decode times and the resident memory after the load,
// after the prefill and at its peak, on one stderr line.
#include <gtest/gtest.h>

#include <string>

#include "cli/cli_test_util.h"

namespace snapkv::clitest {
namespace {

const std::string kTiny = std::string(SNAPKV_SOURCE_DIR) + "/models/snapkv-tiny4.gguf";

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

TEST(RunVerboseCli, LogsTimesAndResidentMemory) {
  TempDir dir("run_verbose");
  const CliResult r = run_cli("run --model '" + kTiny +
                                  "' --prompt 'Once upon a time' --max-tokens 3 --verbose "
                                  "--threads 1",
                              dir);
  ASSERT_EQ(r.rc, 0) << r.err;
  for (const char* part : {"[run] times: load ", "prefill ", "decode ", "RSS: after load ",
                           "after prefill ", "peak ", "mapped (file ", "KV "}) {
    EXPECT_TRUE(contains(r.err, part)) << part << " missing in: " << r.err;
  }
  // Without --verbose the line is absent; with --quiet too it is a usage error.
  const CliResult plain =
      run_cli("run --model '" + kTiny + "' --prompt 'Once upon a time' --max-tokens 3", dir);
  ASSERT_EQ(plain.rc, 0) << plain.err;
  EXPECT_FALSE(contains(plain.err, "[run] times:")) << plain.err;
  const CliResult both =
      run_cli("run --model '" + kTiny + "' --prompt 'Once upon a time' --verbose --quiet", dir);
  EXPECT_EQ(both.rc, 2) << both.err;
  EXPECT_TRUE(contains(both.err, "--quiet")) << both.err;
}

}  // namespace
}  // namespace snapkv::clitest
