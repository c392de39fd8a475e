// Progress lines (cli/progress.h) through the real binary: drawn on stderr under a
// pseudo-terminal (`script`), never when stderr is a file, never with --no-progress or --quiet,
// and never inside --json output on stdout.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/cli_test_util.h"

namespace snapkv::clitest {
namespace {

const std::string kModel = std::string(SNAPKV_SOURCE_DIR) + "/models/snapkv-tiny4.gguf";

// Runs `args` with stderr on a pseudo-terminal (stdout to `stdout_file`); returns what the
// terminal showed.
std::string under_pty(const std::string& args, const std::string& stdout_file, const TempDir& dir) {
  const std::string log = dir.file("pty.log");
  const std::string inner =
      std::string("'") + SNAPKV_CLI_PATH + "' " + args + " >'" + stdout_file + "' </dev/null";
  const std::string cmd = "script -qec \"" + inner + "\" '" + log + "' >/dev/null 2>&1 </dev/null";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  return read_text(log);
}

TEST(ProgressCli, OnATerminalOnlyAndNeverInJson) {
  if (std::system("script --version >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "util-linux `script` is not installed";
  }
  TempDir dir("progress_cli");
  std::string prompt;
  for (int i = 0; i < 12; ++i) prompt += "The grass is green and the sky is blue. ";
  std::ofstream(dir.file("doc.txt")) << prompt;
  const std::string run =
      "run -m " + kModel + " -f " + dir.file("doc.txt") + " -n 2 -t 1 --prefill-chunk 16 --json";
  const std::string out = dir.file("out.json");

  const std::string tty = under_pty(run, out, dir);
  EXPECT_NE(tty.find("[run] prefill "), std::string::npos) << tty;
  EXPECT_NE(tty.find("tok/s, ETA"), std::string::npos) << tty;
  const nlohmann::json j = nlohmann::json::parse(read_text(out));  // stdout: the JSON only
  EXPECT_GT(j["prompt_tokens"].get<size_t>(), 16u);

  // kvzip's reconstruction pass and compress.
  const std::string kvc = dir.file("doc.kvc");
  const std::string c = under_pty("compress -m " + kModel + " -f " + dir.file("doc.txt") + " -o " +
                                      kvc + " -t 1 --prefill-chunk 16 --json",
                                  out, dir);
  EXPECT_NE(c.find("[compress] prefill "), std::string::npos) << c;
  EXPECT_NE(c.find("KVzip reconstruction pass"), std::string::npos) << c;
  EXPECT_TRUE(nlohmann::json::parse(read_text(out)).is_object());

  // Forced off, or --quiet: nothing drawn even on a terminal.
  for (const char* off : {" --no-progress", " --quiet"}) {
    const std::string none = under_pty(run + off, out, dir);
    EXPECT_EQ(none.find("prefill "), std::string::npos) << off << ": " << none;
  }
  // stderr to a file: no progress unless forced.
  const CliResult file = run_cli(run, dir);
  ASSERT_EQ(file.rc, 0) << file.err;
  EXPECT_EQ(file.err.find("prefill "), std::string::npos) << file.err;
  EXPECT_EQ(file.err.find('\r'), std::string::npos);
  const CliResult forced = run_cli(run + " --progress", dir);
  ASSERT_EQ(forced.rc, 0) << forced.err;
  EXPECT_NE(forced.err.find("[run] prefill "), std::string::npos) << forced.err;
  EXPECT_TRUE(nlohmann::json::parse(forced.out).is_object());
}

// bench: a "runs done/total, ETA" line under the per-run log lines, in both modes; none on a
// non-terminal stderr (the per-run log lines stay) and never in the JSON.
TEST(ProgressCli, BenchRunsOnATerminal) {
  if (std::system("script --version >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "util-linux `script` is not installed";
  }
  TempDir dir("progress_cli");
  const std::string out = dir.file("out.json");
  const std::string random =
      "bench --layers 1 --embd 64 --heads 2 --kv-heads 1 --ff 128 --vocab 256 --types f32 "
      "--lengths 16,32 -r 2 --methods full --json";
  const std::string model = "bench -m " + kModel + " -p 16 -n 4 -r 2 -t 1 --json";
  for (const std::string& args : {random, model}) {
    const std::string tty = under_pty(args, out, dir);
    EXPECT_NE(tty.find("[bench] runs 1/"), std::string::npos) << args << "\n" << tty;
    EXPECT_NE(tty.find(", ETA "), std::string::npos) << args << "\n" << tty;
    EXPECT_NE(tty.find("run 2/2"), std::string::npos) << args << "\n" << tty;  // the log lines
    EXPECT_TRUE(nlohmann::json::parse(read_text(out)).is_object()) << args;
    const std::string none = under_pty(args + " --no-progress", out, dir);
    EXPECT_EQ(none.find("[bench] runs "), std::string::npos) << args << "\n" << none;
    const CliResult file = run_cli(args, dir);
    ASSERT_EQ(file.rc, 0) << file.err;
    EXPECT_EQ(file.err.find("[bench] runs "), std::string::npos) << file.err;
    EXPECT_EQ(file.err.find('\r'), std::string::npos) << file.err;
    EXPECT_NE(file.err.find("run 2/2"), std::string::npos) << file.err;
    EXPECT_TRUE(nlohmann::json::parse(file.out).is_object()) << args;
  }
}

// Loading a model read whole into memory (SNAPKV_WEIGHTS=huge) draws its bytes on a terminal;
// never on a non-terminal stderr.
TEST(ProgressCli, ModelLoadingOnATerminal) {
  if (std::system("script --version >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "util-linux `script` is not installed";
  }
  TempDir dir("progress_cli");
  const std::string out = dir.file("out.json");
  const std::string run = "run -m " + kModel + " -p hi -n 1 -t 1 --json";
  ASSERT_EQ(::setenv("SNAPKV_WEIGHTS", "huge", 1), 0);
  const std::string tty = under_pty(run, out, dir);
  const CliResult file = run_cli(run, dir);
  const std::string chat_tty = under_pty("chat -m " + kModel + " --no-chat -n 1", out, dir);
  ::unsetenv("SNAPKV_WEIGHTS");
  EXPECT_NE(tty.find("[run] loading model 5/5 MiB"), std::string::npos) << tty;  // 4.8 MiB
  ASSERT_EQ(file.rc, 0) << file.err;
  EXPECT_EQ(file.err.find("loading model"), std::string::npos) << file.err;
  EXPECT_NE(chat_tty.find("[chat] loading model"), std::string::npos) << chat_tty;
  // Mapped (the default): nothing is read up front, nothing drawn.
  const std::string mapped = under_pty(run, out, dir);
  EXPECT_EQ(mapped.find("loading model"), std::string::npos) << mapped;
}

}  // namespace
}  // namespace snapkv::clitest
