// Bad inputs that the library layers (gguf, util, kv, eval) must turn into named errors, checked
// through the real `snapkv` binary: a model truncated while mapped (SIGBUS), FIFOs as inputs, a
// GGUF whose tensor count was lowered, keys beyond the fp16 range, and an impossible perplexity
// context (checked before any text is built).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "cli/cli_test_util.h"
#include "snapkv/util/npy.h"

extern char** environ;

namespace snapkv::clitest {
namespace {

namespace fs = std::filesystem;
const std::string kModel = std::string(SNAPKV_SOURCE_DIR) + "/models/snapkv-tiny4.gguf";

std::vector<uint8_t> read_bytes(const std::string& p) {
  const std::string s = read_text(p);
  return {s.begin(), s.end()};
}

void write_bytes(const std::string& p, const std::vector<uint8_t>& b) {
  std::ofstream(p, std::ios::binary)
      .write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

TEST(BadInputCli, FifoAsModelOrKeysIsRefusedWithoutBlocking) {
  TempDir dir("fifo");
  const std::string fifo = dir.file("in.fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  // Under `timeout`: exit 124 would mean open() blocked on the FIFO.
  const auto run_timed = [&](const std::string& args) {
    const std::string out = dir.file("o.txt"), err = dir.file("e.txt");
    const std::string cmd = "timeout 20 '" + std::string(SNAPKV_CLI_PATH) + "' " + args + " >'" +
                            out + "' 2>'" + err + "' </dev/null";
    const int status = std::system(cmd.c_str());
    CliResult r;
    r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r.err = read_text(err);
    return r;
  };
  const CliResult run = run_timed("run --model '" + fifo + "' --prompt hi");
  EXPECT_EQ(run.rc, 1) << run.err;  // 124 would be the timeout: open() blocked
  EXPECT_TRUE(contains(run.err, "not a regular file (a FIFO)")) << run.err;
  const CliResult sel = run_timed("select --keys '" + fifo + "' --budget 4");
  EXPECT_EQ(sel.rc, 1) << sel.err;
  EXPECT_TRUE(contains(sel.err, "[npy] " + fifo + ": cannot open file")) << sel.err;
  EXPECT_TRUE(contains(sel.err, "(a FIFO)")) << sel.err;
}

TEST(BadInputCli, LoweredTensorCountIsAnErrorNotGarbage) {
  TempDir dir("lowered");
  std::vector<uint8_t> bytes = read_bytes(kModel);
  ASSERT_GT(bytes.size(), 24u);
  int64_t n_tensors = 0;
  std::memcpy(&n_tensors, bytes.data() + 8, sizeof n_tensors);
  --n_tensors;
  std::memcpy(bytes.data() + 8, &n_tensors, sizeof n_tensors);
  const std::string m = dir.file("lowered.gguf");
  write_bytes(m, bytes);
  const CliResult r =
      run_cli("run --model '" + m + "' --prompt 'Once upon a time' --max-tokens 4", dir);
  EXPECT_EQ(r.rc, 1) << r.err;
  EXPECT_TRUE(contains(r.err, "snapkv: error: [gguf] ")) << r.err;
  EXPECT_TRUE(contains(r.err, "(tensor count too low?)")) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
}

TEST(BadInputCli, KeysBeyondFp16AreOneNamedError) {
  TempDir dir("fp16");
  const size_t n_kv = 1, s = 16, d = 4;
  for (const float scale : {1e30f, 70000.0f}) {
    std::vector<float> k(n_kv * s * d);
    for (size_t i = 0; i < k.size(); ++i) k[i] = (static_cast<float>(i % 7) - 3.0f) * 0.25f;
    k[5 * d + 2] = scale;
    const std::string kp = dir.file("k.npy");
    const size_t shape[] = {n_kv, s, d};
    write_npy(kp, k, shape);
    const CliResult r = run_cli("select --keys '" + kp + "' --budget 4 --window 2 --sinks 1", dir);
    EXPECT_EQ(r.rc, 1) << scale << ": " << r.err;
    EXPECT_TRUE(contains(r.err, "value outside the fp16 range at [0][5][2]")) << r.err;
    EXPECT_TRUE(contains(r.err, "|x| <= 65504")) << r.err;
  }
}

TEST(BadInputCli, PerplexityContextBeyondTheModelFailsBeforeBuildingText) {
  TempDir dir("ppl");
  const auto t0 = std::chrono::steady_clock::now();
  const CliResult r = run_cli(
      "eval --model '" + kModel + "' --perplexity --context 1000000 --methods full --quiet", dir);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(r.rc, 2) << r.err;
  EXPECT_TRUE(contains(r.err, "prefix + continuation longer than the model's context")) << r.err;
  // Not a speed assertion: building 10^6 tokens of filler before the check would take minutes even
  // when linear; the check itself is instant. 60 s leaves a loaded CI machine room.
  EXPECT_LT(seconds, 60.0);
}

// The model file is truncated while `snapkv run` has it mapped (SNAPKV_WEIGHTS=mmap, the default):
// the next weight read faults (SIGBUS), which must become the named error and exit 1 (not a death
// by SIGBUS, exit 135).
TEST(BadInputCli, ModelTruncatedWhileMappedExitsOneWithNamedError) {
  TempDir dir("sigbus");
  const std::string prompt_file = dir.file("prompt.txt");
  {
    std::ofstream p(prompt_file);
    for (int i = 0; i < 60; ++i)
      p << "Once upon a time there was a little girl who liked to play. ";
  }
  for (int attempt = 0; attempt < 5; ++attempt) {
    const std::string m = dir.file("m" + std::to_string(attempt) + ".gguf");
    fs::copy_file(kModel, m, fs::copy_options::overwrite_existing);
    const std::string err = dir.file("err" + std::to_string(attempt) + ".txt");
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, err.c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0644);
    std::vector<std::string> args = {SNAPKV_CLI_PATH, "run",       "--model",         m,
                                     "--prompt-file", prompt_file, "--max-tokens",    "1500",
                                     "--temperature", "1",         "--prefill-chunk", "8",
                                     "--quiet"};
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_t pid = 0;
    // The memory map is what faults (SNAPKV_WEIGHTS=huge would read the file into memory instead).
    std::vector<std::string> env_strings = {"SNAPKV_WEIGHTS=mmap"};
    for (char** e = environ; *e != nullptr; ++e) {
      if (std::string(*e).rfind("SNAPKV_WEIGHTS=", 0) != 0) env_strings.emplace_back(*e);
    }
    std::vector<char*> envp;
    for (std::string& e : env_strings) envp.push_back(e.data());
    envp.push_back(nullptr);
    ASSERT_EQ(posix_spawn(&pid, SNAPKV_CLI_PATH, &actions, nullptr, argv.data(), envp.data()), 0);
    posix_spawn_file_actions_destroy(&actions);
    // Wait until the model is mapped (it appears in /proc/PID/maps), then truncate it.
    const std::string maps = "/proc/" + std::to_string(pid) + "/maps";
    bool truncated = false;
    for (int i = 0; i < 20000 && !truncated; ++i) {
      int status = 0;
      if (::waitpid(pid, &status, WNOHANG) == pid) {
        pid = -1;
        break;
      }
      if (contains(read_text(maps), m)) truncated = ::truncate(m.c_str(), 0) == 0;
      if (!truncated) std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    if (pid < 0) continue;  // finished before the map was seen: try again
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    const std::string e = read_text(err);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) continue;  // done before the truncation
    ASSERT_TRUE(WIFEXITED(status)) << "killed by signal " << WTERMSIG(status) << ": " << e;
    EXPECT_EQ(WEXITSTATUS(status), 1) << e;
    EXPECT_TRUE(contains(e, "snapkv: error: [mmap] file '" + m +
                                "' was truncated or replaced while in use, got a bus error"))
        << e;
    return;
  }
  FAIL() << "the run finished before its model could be truncated in 5 attempts";
}

// Under an address-space limit OpenBLAS's threads spin forever on 128 MiB buffers (the result
// printed, then no exit). `snapkv` re-executes itself with OPENBLAS_NUM_THREADS=1 and does
// its products without OpenBLAS, so it finishes. (Sanitizer builds reserve terabytes of shadow
// memory and cannot run under such a limit at all.)
TEST(BadInputCli, RunFinishesUnderAnAddressSpaceLimit) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "ASan cannot run under ulimit -v";
#else
  TempDir dir("ulimit");
  const std::string out = dir.file("o.txt"), err = dir.file("e.txt");
  const std::string cmd = "ulimit -v 150000 && timeout 120 '" + std::string(SNAPKV_CLI_PATH) +
                          "' run --model '" + kModel +
                          "' --prompt 'Once upon a time' --max-tokens 8 >'" + out + "' 2>'" + err +
                          "' </dev/null";
  const int status = std::system(("sh -c \"" + cmd + "\"").c_str());
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << read_text(err);  // 124: timeout, OpenBLAS spinning
  EXPECT_FALSE(read_text(out).empty());
#endif
}

}  // namespace
}  // namespace snapkv::clitest
