// The shared cache options through the real binary: every command that builds a cache parses
// the same flags to the same defaults (CacheConfig{}), flags reach the configuration the same way
// everywhere, and bad inputs are clean named errors (exit 2 for usage, 1 for
// files), checked before any work starts.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "cli/cli_test_util.h"
#include "snapkv/kv/core/config.h"
#include "snapkv/kv/core/method.h"
#include "snapkv/util/npy.h"

namespace snapkv::clitest {
namespace {

using nlohmann::json;

const std::string kModel = std::string(SNAPKV_SOURCE_DIR) + "/models/snapkv-tiny4.gguf";

// Each command with the arguments it requires (never opened: --print-cache-config stops first).
struct Command {
  std::string name, required;
};
const std::vector<Command> kCacheCommands = {
    {"run", "--model unused.gguf --prompt x"},
    {"eval", "--model unused.gguf"},
    {"bench", ""},
    {"demo", ""},
    {"select", "--keys unused.npy"},
    {"compress", "--model unused.gguf --prompt-file unused.txt --out unused.kvc"},
};

json print_config(const Command& c, const std::string& extra, const TempDir& dir) {
  const CliResult r =
      run_cli(c.name + " " + c.required + " " + extra + " --print-cache-config", dir);
  EXPECT_EQ(r.rc, 0) << c.name << ": " << r.err;
  return json::parse(r.out);
}

TEST(CacheOptionsCli, EveryCommandDefaultsToCacheConfig) {
  TempDir dir("cacheopts");
  for (const Command& c : kCacheCommands) {
    const json j = print_config(c, "", dir);
    SCOPED_TRACE(c.name);
    // CacheConfig's defaults as the command's first default method resolves them: snapkv's own
    // window and kernel (kv/core/method.h); 32 and 11 for full (eval, bench) and kvzip (compress).
    const bool lists = c.name == "eval" || c.name == "bench";
    const std::string method = lists ? "full" : c.name == "compress" ? "kvzip" : "snapkv";
    const CacheConfig d = parse_method(method).config;
    EXPECT_EQ(d.window, method == "snapkv" ? kSnapkvWindow : CacheConfig{}.window);
    EXPECT_EQ(j["budget"], d.budget);
    EXPECT_EQ(j["window"], d.window);
    EXPECT_EQ(j["n_sink"], d.n_sink);
    EXPECT_EQ(j["pool"], std::string(to_string(d.pool)));
    EXPECT_EQ(j["kernel"], d.kernel);
    EXPECT_EQ(j["keep_window"], d.keep_window);
    EXPECT_EQ(j["causal"], d.causal);
    EXPECT_EQ(j["chunk_mode"], std::string(to_string(d.chunk_mode)));
    EXPECT_EQ(j["chunk_size"], d.chunk_size);
    EXPECT_EQ(j["kivi_group"], d.kivi_group);
    EXPECT_EQ(j["kivi_residual"], kivi_residual_of(d));      // resolved: the codec's default
    EXPECT_EQ(j["kivi_fp16_sinks"], kivi_fp16_sinks_of(d));  // resolved, as kivi_residual
    EXPECT_EQ(j["rotation_seed"], d.rotation_seed);
    EXPECT_EQ(j["kitty_channels"], d.kitty_channels);
    EXPECT_EQ(j["threads"], 0);
    EXPECT_EQ(j["prefill_chunk"], 512);
  }
}

TEST(CacheOptionsCli, SameFlagsSameConfigEverywhere) {
  TempDir dir("cacheopts");
  const std::string flags =
      "--window 16 --sinks 2 --pool avg --kernel 15 --no-keep-window --chunk-mode every_chunk "
      "--chunkkv-size 4 --rotation-seed 9 --kitty-channels 3 --kivi-group 16 --kivi-fp16-sinks 3";
  for (const Command& c : kCacheCommands) {
    const json j = print_config(c, flags, dir);
    SCOPED_TRACE(c.name);
    EXPECT_EQ(j["window"], 16);
    EXPECT_EQ(j["n_sink"], 2);
    EXPECT_EQ(j["pool"], "avg");
    EXPECT_EQ(j["kernel"], 15);
    EXPECT_EQ(j["keep_window"], false);
    EXPECT_EQ(j["chunk_mode"], "every_chunk");
    EXPECT_EQ(j["chunk_size"], 4);
    EXPECT_EQ(j["rotation_seed"], 9);
    EXPECT_EQ(j["kitty_channels"], 3);
    EXPECT_EQ(j["kivi_group"], 16);
    EXPECT_EQ(j["kivi_fp16_sinks"], 3);
  }
  // kivi42's own default of 4 fp16 sinks (kv/core/config.h) unless a count is given; 0 turns it
  // off.
  EXPECT_EQ(print_config(kCacheCommands[0], "--method kivi42", dir)["kivi_fp16_sinks"], 4);
  EXPECT_EQ(print_config(kCacheCommands[0], "--method kivi42 --kivi-fp16-sinks 0",
                         dir)["kivi_fp16_sinks"],
            0);
  // --keep-window turns it back on (the flag pair is one option).
  EXPECT_EQ(print_config(kCacheCommands[0], "--keep-window", dir)["keep_window"], true);
  // Method names are eval's grammar in run too.
  EXPECT_EQ(print_config(kCacheCommands[0], "--method snapkv+kivi2", dir)["methods"],
            "snapkv+kivi2");
}

TEST(CacheOptionsCli, ThreadsSetWorkersAndOpenBlasAndAreBounded) {
  TempDir dir("cacheopts");
  for (const Command& c : kCacheCommands) {
    if (c.name == "select") continue;  // select runs no model: no --threads
    const json j = print_config(c, "--threads 1", dir);
    EXPECT_EQ(j["effective_threads"]["workers"], 1) << c.name;
    EXPECT_EQ(j["effective_threads"]["openblas"], 1) << c.name;
    for (const std::string bad : {"--threads 100000", "--threads=-1", "--threads 257"}) {
      const CliResult r = run_cli(c.name + " " + c.required + " " + bad, dir);
      EXPECT_EQ(r.rc, 2) << c.name << " " << bad << ": " << r.err;
      EXPECT_NE(r.err.find("--threads out of range"), std::string::npos) << r.err;
      EXPECT_EQ(r.out, "");
    }
  }
}

void expect_usage_error(const std::string& args, const std::string& part, const TempDir& dir) {
  const CliResult r = run_cli(args, dir);
  EXPECT_EQ(r.rc, 2) << args << "\n" << r.err;
  EXPECT_EQ(r.out, "") << args;
  EXPECT_EQ(r.err.rfind("snapkv: error: ", 0), 0u) << args << "\n" << r.err;
  EXPECT_NE(r.err.find(part), std::string::npos) << args << "\n" << r.err;
}

TEST(CacheOptionsCli, NegativeCountsAreRefusedNotWrapped) {
  TempDir dir("cacheopts");
  const std::string run = "run --model " + kModel + " --prompt hello ";
  expect_usage_error("eval --model " + kModel + " --n -1", "cannot be negative", dir);
  expect_usage_error("tasks gen --n -1", "cannot be negative", dir);
  expect_usage_error(run + "--budget -1", "cannot be negative", dir);
  expect_usage_error(run + "--max-tokens -1", "cannot be negative", dir);
  expect_usage_error(run + "--max-tokens=-1", "cannot be negative", dir);
  expect_usage_error("select --keys k.npy --budget -5", "cannot be negative", dir);
  expect_usage_error("bench --repeats -2", "cannot be negative", dir);
}

// CLI11 converts integers with base 0: "010" would be 8 and "0x20" 32. Refused on signed and
// unsigned options alike; a plain "0" and other decimals still parse.
TEST(CacheOptionsCli, NonDecimalIntegersAreRefused) {
  TempDir dir("cacheopts");
  const std::string run = "run --model " + kModel + " --prompt hello ";
  expect_usage_error(run + "--budget 010", "read in decimal", dir);
  expect_usage_error(run + "--budget 0x20", "read in decimal", dir);
  expect_usage_error(run + "--seed=00", "read in decimal", dir);
  expect_usage_error("tasks gen --n 0b11", "read in decimal", dir);
  expect_usage_error(run + "--kernel 07", "no leading zeros", dir);
  const CliResult ok = run_cli(run + "--budget 100 --decode-budget 0 --max-tokens 1", dir);
  EXPECT_EQ(ok.rc, 0) << ok.err;
}

// kitty's channel count: zero, past head_dim (32 on the shipped model) or past the uint16 index.
TEST(CacheOptionsCli, BadKittyChannelsAreRefused) {
  TempDir dir("cacheopts");
  const std::string run = "run --model " + kModel + " --prompt hello --method snapkv+kitty ";
  expect_usage_error(run + "--kitty-channels 0", "kitty_channels must be positive", dir);
  // head_dim is known once the model is open: the same exit code and message, after its log line
  const CliResult r = run_cli(run + "--kitty-channels 32", dir);
  EXPECT_EQ(r.rc, 2) << r.err;
  EXPECT_EQ(r.out, "");
  EXPECT_NE(r.err.find("snapkv: error: [kivi] kitty_channels must be below head_dim"),
            std::string::npos)
      << r.err;
  expect_usage_error(run + "--kitty-channels 70000",
                     "option 'kitty_channels' has a bad value, got '70000'", dir);
}

TEST(CacheOptionsCli, ZeroCountsAndKernelsAreRefused) {
  TempDir dir("cacheopts");
  expect_usage_error("tasks gen --n 0", "--n", dir);
  expect_usage_error("eval --model " + kModel + " --n 0", "--n", dir);
  // select must not turn --kernel 0 into 7 or --heads 0 into the default.
  const std::string keys = dir.file("K.npy");
  write_npy(keys, std::vector<float>(2 * 64 * 8, 0.25f), std::vector<size_t>{2, 64, 8});
  expect_usage_error("select --keys " + keys + " --kernel 0", "kernel", dir);
  expect_usage_error("select --keys " + keys + " --heads 0", "--heads", dir);
  expect_usage_error("run --model " + kModel + " --prompt x --kernel 0", "kernel", dir);
  expect_usage_error("run --model " + kModel + " --prompt x --budget 5 --keep 0.1", "excludes",
                     dir);
}

TEST(CacheOptionsCli, PromptFilesAreRegularNonEmptyAndBounded) {
  TempDir dir("cacheopts");
  const std::string run = "run --quiet --max-tokens 1 --model " + kModel + " --prompt-file ";
  // A directory is not an (empty) prompt.
  std::filesystem::create_directories(dir.file("adir"));
  CliResult r = run_cli(run + dir.file("adir"), dir);
  EXPECT_EQ(r.rc, 1) << r.err;
  EXPECT_NE(r.err.find("not a regular file"), std::string::npos) << r.err;
  // An empty file is refused like --prompt ''.
  std::ofstream(dir.file("empty.txt")).close();
  expect_usage_error(run + dir.file("empty.txt"), "empty file", dir);
  // 10 MB cannot fit a 2048-token context: refused while reading, not after tokenizing it all.
  {
    std::ofstream big(dir.file("big.txt"), std::ios::binary);
    const std::string line(1023, 'a');
    for (int i = 0; i < 10 * 1024; ++i) big << line << '\n';
  }
  r = run_cli(run + dir.file("big.txt"), dir);
  EXPECT_EQ(r.rc, 2) << r.err;
  EXPECT_NE(r.err.find("file too long for the model's context"), std::string::npos) << r.err;
  // eval --perplexity --text DIR likewise.
  r = run_cli("eval --perplexity --context 1024 --model " + kModel + " --text " + dir.file("adir"),
              dir);
  EXPECT_EQ(r.rc, 1) << r.err;
  EXPECT_NE(r.err.find("not a regular file"), std::string::npos) << r.err;
}

TEST(CacheOptionsCli, UnwritableJsonFailsBeforeTheWork) {
  TempDir dir("cacheopts");
  const std::string bad = dir.file("no/such/dir/out.json");
  for (const std::string& args :
       {"eval --model " + kModel + " --tasks passkey --n 1 --context 256 --methods full --json ",
        "run --model " + kModel + " --prompt hello --max-tokens 1 --quiet --json "}) {
    const CliResult r = run_cli(args + bad, dir);
    EXPECT_EQ(r.rc, 1) << args << "\n" << r.err;
    EXPECT_EQ(r.out, "") << args;  // no table, no text: nothing ran
    EXPECT_NE(r.err.find("cannot write the --json file"), std::string::npos) << r.err;
  }
}

TEST(CacheOptionsCli, JsonWithoutFileGoesToStdoutAndWithFileToTheFile) {
  TempDir dir("cacheopts");
  const std::string run = "run --model " + kModel + " --prompt hello --max-tokens 2 --quiet";
  CliResult r = run_cli(run + " --json", dir);
  ASSERT_EQ(r.rc, 0) << r.err;
  const json j = json::parse(r.out);  // stdout holds the JSON alone
  EXPECT_EQ(j["generated_tokens"], 2);
  EXPECT_EQ(j["method"], "snapkv");
  const std::string path = dir.file("run.json");
  r = run_cli(run + " --json " + path, dir);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_FALSE(r.out.empty());                                   // the text as usual
  EXPECT_EQ(r.out.find("[stats]"), std::string::npos) << r.out;  // figures on stderr only
  EXPECT_EQ(json::parse(read_text(path))["text"], j["text"]);
  for (const auto& e : std::filesystem::directory_iterator(dir.file(""))) {
    EXPECT_EQ(e.path().string().find(".tmp."), std::string::npos) << e.path();
  }
}

TEST(CacheOptionsCli, EvalRecordsItsRealCommandLine) {
  TempDir dir("cacheopts");
  const std::string path = dir.file("e.json");
  const std::string args = "eval --model " + kModel +
                           " --tasks passkey --n 1 --context 256 --methods 'full,snapkv' "
                           "--keep 0.5 --quiet --threads 1 --json " +
                           path;
  const CliResult r = run_cli(args, dir);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("passkey"), std::string::npos) << r.out;  // the table, as without --json
  const json j = json::parse(read_text(path));
  EXPECT_EQ(j["command"], "snapkv eval --model " + kModel +
                              " --tasks passkey --n 1 --context 256 --methods full,snapkv "
                              "--keep 0.5 --quiet --threads 1 --json " +
                              path);
  // With --json and no file, stdout holds the JSON alone.
  const CliResult s = run_cli("eval --model " + kModel +
                                  " --tasks passkey --n 1 --context 256 --methods full "
                                  "--quiet --threads 1 --json",
                              dir);
  ASSERT_EQ(s.rc, 0) << s.err;
  EXPECT_EQ(json::parse(s.out)["config"]["n"], 1);
}

TEST(CacheOptionsCli, TasksGenOutIsAllOrNothing) {
  TempDir dir("cacheopts");
  const std::string out = dir.file("t.jsonl");
  // A complete run: every line whole.
  CliResult r = run_cli("tasks gen --task passkey --n 3 --context 200 --quiet --out " + out, dir);
  ASSERT_EQ(r.rc, 0) << r.err;
  std::ifstream in(out);
  std::string line;
  size_t lines = 0;
  while (std::getline(in, line)) {
    EXPECT_TRUE(json::accept(line)) << line;
    ++lines;
  }
  EXPECT_EQ(lines, 3u);
  // SIGTERM mid-run: the target never appears and the temporary file is removed.
  const std::string out2 = dir.file("u.jsonl");
  const std::string script = dir.file("term.sh");
  std::ofstream(script) << "'" << SNAPKV_CLI_PATH
                        << "' tasks gen --task all --n 100000 --context 2000 --quiet "
                        << "--out '" << out2 << "' &\n"
                        << "pid=$!\n"
                        << "for i in $(seq 1 400); do ls '" << dir.file("")
                        << "' | grep -q u.jsonl.tmp && break; "
                        << "sleep 0.05; done\n"
                        << "ls '" << dir.file("")
                        << "' | grep -q u.jsonl.tmp || { kill $pid; exit 3; }\n"
                        << "kill -TERM $pid\n"
                        << "wait $pid\n"
                        << "exit 0\n";
  const int status = std::system(("bash '" + script + "'").c_str());
  ASSERT_TRUE(WIFEXITED(status)) << status;
  ASSERT_EQ(WEXITSTATUS(status), 0) << "the temporary file never appeared";
  EXPECT_FALSE(std::filesystem::exists(out2));
  for (const auto& e : std::filesystem::directory_iterator(dir.file(""))) {
    const std::string name = e.path().filename().string();
    EXPECT_TRUE(name.find("u.jsonl") == std::string::npos || name == "term.sh") << e.path();
  }
}

}  // namespace
}  // namespace snapkv::clitest
