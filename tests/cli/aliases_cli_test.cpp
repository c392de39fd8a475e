// llama.cpp's spellings of the options both tools have (-m, -p, -f/--file, -n/--n-predict, -t,
// -s, --temp, -o) and "-" for a prompt file read from standard input, through the real binary:
// each alias gives exactly what its long form gives.
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "cli/cli_test_util.h"

namespace snapkv::clitest {
namespace {

const std::string kModel = std::string(SNAPKV_SOURCE_DIR) + "/models/snapkv-tiny4.gguf";
const std::string kPrompt =
    "The pass key is 71432. Remember it. What is the pass key? The pass key is";

void write_file(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// Runs `args` through a shell with `input` on standard input.
CliResult run_with_stdin(const std::string& args, const std::string& input, const TempDir& dir) {
  const std::string in = dir.file("stdin.txt");
  write_file(in, input);
  const std::string out = dir.file("stdout.txt"), err = dir.file("stderr.txt");
  const std::string cmd = std::string("'") + SNAPKV_CLI_PATH + "' " + args + " <'" + in + "' >'" +
                          out + "' 2>'" + err + "'";
  const int status = std::system(cmd.c_str());
  CliResult r;
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = read_text(out);
  r.err = read_text(err);
  return r;
}

struct AliasCase {
  std::string long_form, alias_form;
};

TEST(AliasesCli, EachAliasGivesWhatItsLongFormGives) {
  TempDir dir("aliases");
  const std::string prompt_file = dir.file("prompt.txt");
  write_file(prompt_file, kPrompt);
  const std::string p = "'" + kPrompt + "'";
  const std::vector<AliasCase> cases = {
      {"run --model " + kModel + " --prompt " + p + " --max-tokens 6 --temperature 0 --quiet",
       "run -m " + kModel + " -p " + p + " -n 6 --temp 0 --quiet"},
      {"run --model " + kModel + " --prompt-file " + prompt_file + " --n-predict 6 --quiet",
       "run -m " + kModel + " -f " + prompt_file + " -n 6 --quiet"},
      {"run --model " + kModel + " --prompt-file " + prompt_file + " --max-tokens 6 --quiet",
       "run -m " + kModel + " --file " + prompt_file + " --n-predict 6 --quiet"},
      {"run --model " + kModel + " --prompt " + p +
           " --max-tokens 6 --temperature 0.8 --seed 7 --threads 1 --quiet",
       "run -m " + kModel + " -p " + p + " -n 6 --temp 0.8 -s 7 -t 1 --quiet"},
  };
  for (const AliasCase& c : cases) {
    const CliResult a = run_cli(c.long_form, dir);
    const CliResult b = run_cli(c.alias_form, dir);
    ASSERT_EQ(a.rc, 0) << c.long_form << "\n" << a.err;
    ASSERT_EQ(b.rc, 0) << c.alias_form << "\n" << b.err;
    EXPECT_FALSE(a.out.empty()) << c.long_form;
    EXPECT_EQ(a.out, b.out) << c.alias_form;
  }
}

TEST(AliasesCli, ThreadsAliasReachesTheCacheConfiguration) {
  TempDir dir("aliases_threads");
  const std::vector<std::string> commands = {"run --model m.gguf --prompt x", "eval --model m.gguf",
                                             "demo"};
  for (const std::string& cmd : commands) {
    const CliResult a = run_cli(cmd + " --threads 1 --print-cache-config", dir);
    const CliResult b = run_cli(cmd + " -t 1 --print-cache-config", dir);
    ASSERT_EQ(a.rc, 0) << cmd << "\n" << a.err;
    EXPECT_EQ(a.out, b.out) << cmd;
    EXPECT_NE(a.out.find("\"threads\": 1"), std::string::npos) << a.out;
  }
}

TEST(AliasesCli, PromptFileDashReadsStandardInput) {
  TempDir dir("aliases_stdin");
  const std::string prompt_file = dir.file("prompt.txt");
  write_file(prompt_file, kPrompt);
  const CliResult from_file =
      run_cli("run -m " + kModel + " -f " + prompt_file + " -n 6 --quiet", dir);
  const CliResult from_stdin =
      run_with_stdin("run -m " + kModel + " -f - -n 6 --quiet", kPrompt, dir);
  ASSERT_EQ(from_file.rc, 0) << from_file.err;
  ASSERT_EQ(from_stdin.rc, 0) << from_stdin.err;
  EXPECT_EQ(from_file.out, from_stdin.out);

  // compress: the same .kvc from a pipe as from the file.
  const std::string a = dir.file("a.kvc"), b = dir.file("b.kvc");
  const CliResult ca = run_cli(
      "compress --model " + kModel + " --prompt-file " + prompt_file + " --out " + a + " --quiet",
      dir);
  const CliResult cb =
      run_with_stdin("compress -m " + kModel + " -f - -o " + b + " --quiet", kPrompt, dir);
  ASSERT_EQ(ca.rc, 0) << ca.err;
  ASSERT_EQ(cb.rc, 0) << cb.err;
  EXPECT_EQ(read_text(a), read_text(b));

  // An empty standard input is a clean error, not a hang or an empty prompt.
  const CliResult empty = run_with_stdin("run -m " + kModel + " -f - -n 2 --quiet", "", dir);
  EXPECT_NE(empty.rc, 0);
  EXPECT_NE(empty.err.find("empty file"), std::string::npos) << empty.err;
}

}  // namespace
}  // namespace snapkv::clitest
