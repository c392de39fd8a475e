// Outputs that never destroy, inputs that never block, numbers checked, low memory named: each
// case through the real `snapkv` binary, in a temporary directory, under `timeout` (exit 124 would
// be a hang). Device nodes are made with mknod (skipped where not permitted), FIFOs with mkfifo,
// memory limits with prlimit. docs/RELIABILITY.md lists the classes and the wider probe.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "cli/cli_test_util.h"

namespace snapkv::clitest {
namespace {

namespace fs = std::filesystem;
const std::string kModel = std::string(SNAPKV_SOURCE_DIR) + "/models/snapkv-tiny4.gguf";

struct Ran {
  int rc = -1;
  std::string out, err;
  double seconds = 0;
};

// Runs `snapkv ARGS` inside `dir` under `timeout T`; stdout goes to `stdout_to` when given.
Ran sh(const std::string& args, const TempDir& dir, const std::string& stdout_to = "",
       int timeout_s = 60, const std::string& prefix = "") {
  const std::string out = dir.file("stdout.txt"), err = dir.file("stderr.txt");
  const std::string cmd = "cd '" + dir.file("") + "' || exit 99; " + prefix + "timeout " +
                          std::to_string(timeout_s) + " '" + SNAPKV_CLI_PATH + "' " + args + " >'" +
                          (stdout_to.empty() ? out : stdout_to) + "' 2>'" + err + "' </dev/null";
  const auto t0 = std::chrono::steady_clock::now();
  const int status = std::system(("sh -c \"" + cmd + "\"").c_str());
  Ran r;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = stdout_to.empty() ? read_text(out) : std::string();
  r.err = read_text(err);
  return r;
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// A directory with a copy of the model, a document, a compressed cache and a .npy of keys.
struct Workspace {
  TempDir dir{"robust"};
  Workspace() {
    fs::copy_file(kModel, dir.file("m.gguf"));
    std::ofstream(dir.file("doc.txt"))
        << "The pass key is 71432. Remember it. The grass is green.\n";
    std::ofstream(dir.file("q.txt")) << "What is the pass key?\n";
    const Ran r = sh("compress -m m.gguf -f doc.txt --out doc.kvc --quiet", dir);
    EXPECT_EQ(r.rc, 0) << r.err;
  }
  std::string bytes(const std::string& name) const { return read_text(dir.file(name)); }
};

mode_t kind(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0 ? (st.st_mode & S_IFMT) : 0;
}

// Fast, valid invocations of every command that writes, with OUT where its output goes.
struct Writer {
  const char* name;
  std::string args;  // OUT = the output path
};
const std::vector<Writer>& writers() {
  static const std::vector<Writer> w = {
      {"compress --json", "compress -m m.gguf -f doc.txt --out d2.kvc --quiet --json OUT"},
      {"run --json", "run -m m.gguf --prompt hi --max-tokens 2 --quiet --json OUT"},
      {"ask --json", "ask -m m.gguf --cache doc.kvc --question hi --max-tokens 2 --json OUT"},
      {"eval --json",
       "eval -m m.gguf --tasks passkey --context 128 --n 1 --methods full --quiet --json OUT"},
      {"coverage --json",
       "coverage --lengths 64 --budgets 16 --kv-heads 1 --group 2 --head-dim 32 --window 16 "
       "--json OUT"},
      {"bench --json",
       "bench --layers 1 --embd 64 --heads 2 --kv-heads 1 --ff 128 --vocab 256 --types f32 "
       "--lengths 16 -r 1 --methods full --quiet --json OUT"},
      {"tasks gen --out", "tasks gen --task passkey --n 1 --context 128 --out OUT"},
      {"eval --plot",
       "eval -m m.gguf --tasks passkey --context 128 --n 1 --methods full --quiet --plot OUT"},
  };
  return w;
}

std::string with_out(std::string args, const std::string& out) {
  args.replace(args.find("OUT"), 3, out);
  return args;
}

TEST(RobustnessCli, EveryWriterReplacesARegularFileWhole) {
  Workspace ws;
  for (const Writer& w : writers()) {
    std::ofstream(ws.dir.file("out.txt")) << "old";
    const Ran r = sh(with_out(w.args, "out.txt"), ws.dir);
    EXPECT_EQ(r.rc, 0) << w.name << ": " << r.err;
    EXPECT_NE(ws.bytes("out.txt"), "old") << w.name;
    EXPECT_EQ(kind(ws.dir.file("out.txt")), S_IFREG) << w.name;
  }
}

TEST(RobustnessCli, DevicesAreWrittenThroughNeverReplaced) {
  Workspace ws;
  const std::string null_dev = ws.dir.file("null"), full_dev = ws.dir.file("full");
  if (::mknod(null_dev.c_str(), S_IFCHR | 0666, makedev(1, 3)) != 0 ||
      ::mknod(full_dev.c_str(), S_IFCHR | 0666, makedev(1, 7)) != 0) {
    GTEST_SKIP() << "mknod not permitted here (needs CAP_MKNOD)";
  }
  for (const Writer& w : writers()) {
    const Ran ok = sh(with_out(w.args, "null"), ws.dir);
    EXPECT_EQ(ok.rc, 0) << w.name << ": " << ok.err;
    EXPECT_EQ(kind(null_dev), S_IFCHR) << w.name << " replaced the device node";
    const Ran full = sh(with_out(w.args, "full"), ws.dir);
    EXPECT_EQ(full.rc, 1) << w.name << ": " << full.err;
    EXPECT_TRUE(contains(full.err, "No space left on device")) << w.name << ": " << full.err;
    EXPECT_EQ(kind(full_dev), S_IFCHR) << w.name << " replaced the device node";
  }
  // A .kvc is mapped when read: a device is refused by name before the prefill.
  const Ran kvc = sh("compress -m m.gguf -f doc.txt --out null", ws.dir);
  EXPECT_EQ(kvc.rc, 1) << kvc.err;
  EXPECT_TRUE(contains(kvc.err, "over a character device")) << kvc.err;
  EXPECT_EQ(kind(null_dev), S_IFCHR);
}

TEST(RobustnessCli, FifoOutputsAreStreamedOrRefusedNeverReplaced) {
  Workspace ws;
  const std::string fifo = ws.dir.file("out.fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  for (const Writer& w : writers()) {  // no reader: refused at once, never blocks
    const Ran r = sh(with_out(w.args, "out.fifo"), ws.dir, "", 30);
    EXPECT_EQ(r.rc, 1) << w.name << ": " << r.err;
    EXPECT_TRUE(contains(r.err, "out.fifo")) << w.name << ": " << r.err;
    EXPECT_EQ(kind(fifo), S_IFIFO) << w.name << " replaced the FIFO";
  }
  // With a reader (this process, opened before the command starts, so no timing is involved):
  // the output streams through it (a few KiB: within the pipe's buffer).
  const int reader = ::open(fifo.c_str(), O_RDONLY | O_NONBLOCK);
  ASSERT_GE(reader, 0);
  const Ran r = sh("tasks gen --task passkey --n 2 --context 128 --out out.fifo", ws.dir, "", 30);
  EXPECT_EQ(r.rc, 0) << r.err;
  std::string got;
  char buf[4096];
  for (ssize_t n; (n = ::read(reader, buf, sizeof buf)) > 0;) got.append(buf, size_t(n));
  ::close(reader);
  EXPECT_TRUE(contains(got, "\"task\"")) << got;
  EXPECT_EQ(kind(fifo), S_IFIFO);
  const Ran kvc = sh("compress -m m.gguf -f doc.txt --out out.fifo", ws.dir, "", 30);
  EXPECT_EQ(kvc.rc, 1) << kvc.err;
  EXPECT_TRUE(contains(kvc.err, "over a FIFO")) << kvc.err;
}

TEST(RobustnessCli, AnOutputNamingAnInputIsRefusedBeforeAnyWork) {
  Workspace ws;
  const std::string model = ws.bytes("m.gguf"), doc = ws.bytes("doc.txt"),
                    kvc = ws.bytes("doc.kvc");
  ::symlink("m.gguf", ws.dir.file("link.gguf").c_str());
  struct Case {
    std::string args, message;
  };
  const std::vector<Case> cases = {
      {"compress -m m.gguf -f doc.txt --out m.gguf", "--out names the same file as --model"},
      {"compress -m m.gguf -f doc.txt --out link.gguf", "--out names the same file as --model"},
      {"compress -m m.gguf -f doc.txt --out doc.txt", "--out names the same file as --prompt-file"},
      {"compress -m m.gguf -f doc.txt --out x.kvc --json x.kvc",
       "--json names the same file as --out"},
      {"run -m m.gguf --prompt hi --json m.gguf", "--json names the same file as --model"},
      {"run -m m.gguf -f doc.txt --json ./doc.txt", "--json names the same file as --prompt-file"},
      {"eval -m m.gguf --n 1 --context 128 --json m.gguf", "--json names the same file as --model"},
      {"eval -m m.gguf --n 1 --context 128 --plot link.gguf",
       "--plot names the same file as --model"},
      {"eval -m m.gguf --n 1 --context 128 --plot x.png --json x_bytes.png",
       "--plot (its _bytes image) names the same file as --json"},
      {"ask -m m.gguf --cache doc.kvc --question hi --json doc.kvc",
       "--json names the same file as --cache"},
      {"ask -m m.gguf --cache doc.kvc --questions q.txt --json q.txt",
       "--json names the same file as --questions"},
      {"bench -m m.gguf --json m.gguf", "--json names the same file as --model"},
      {"chat -m m.gguf --json m.gguf", "--json names the same file as --model"},
      {"tasks gen --n 1 --context 128 --tokenizer m.gguf --out link.gguf",
       "--out names the same file as --tokenizer"},
  };
  for (const Case& c : cases) {
    const Ran r = sh(c.args, ws.dir);
    EXPECT_EQ(r.rc, 2) << c.args << ": " << r.err;
    EXPECT_TRUE(contains(r.err, c.message)) << c.args << ": " << r.err;
  }
  EXPECT_EQ(ws.bytes("m.gguf"), model);
  EXPECT_EQ(ws.bytes("doc.txt"), doc);
  EXPECT_EQ(ws.bytes("doc.kvc"), kvc);
  EXPECT_EQ(kind(ws.dir.file("link.gguf")), S_IFLNK);
}

TEST(RobustnessCli, SymlinkTargetIsWrittenAndStaleTemporariesRemoved) {
  Workspace ws;
  ASSERT_EQ(::symlink("real.json", ws.dir.file("link.json").c_str()), 0);
  // The pid of a process that has exited: its temporary file is stale.
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ::waitpid(child, nullptr, 0);
  const std::string stale = "real.json.tmp." + std::to_string(child);
  std::ofstream(ws.dir.file(stale)) << "half";
  const Ran r = sh("run -m m.gguf --prompt hi --max-tokens 2 --quiet --json link.json", ws.dir);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(kind(ws.dir.file("link.json")), S_IFLNK) << "the link itself was replaced";
  EXPECT_TRUE(contains(ws.bytes("real.json"), "\"generated\"") ||
              contains(ws.bytes("real.json"), "\"text\""))
      << ws.bytes("real.json");
  EXPECT_FALSE(fs::exists(ws.dir.file(stale))) << "stale temporary file left";
  for (const auto& e : fs::directory_iterator(ws.dir.file(""))) {
    EXPECT_FALSE(contains(e.path().filename().string(), ".tmp.")) << e.path();
  }
}

TEST(RobustnessCli, StandardOutputErrorsFailTheCommand) {
  if (!fs::exists("/dev/full")) GTEST_SKIP() << "no /dev/full";
  Workspace ws;
  const std::vector<std::string> commands = {
      "--help",
      "run --help",
      "run -m m.gguf --prompt hi --max-tokens 2 --quiet",
      "ask -m m.gguf --cache doc.kvc --question hi --max-tokens 2",
      "tokenize -m m.gguf --text hello",
      "coverage --lengths 64 --budgets 16 --kv-heads 1 --group 2 --head-dim 32 --window 16",
      "demo -m m.gguf --context 128",
      "bench --layers 1 --embd 64 --heads 2 --kv-heads 1 --ff 128 --vocab 256 --types f32 "
      "--lengths 16 -r 1 --methods full --quiet",
      "tasks gen --task passkey --n 1 --context 128",
      "run -m m.gguf --prompt hi --max-tokens 2 --quiet --json",
  };
  for (const std::string& c : commands) {
    const Ran r = sh(c, ws.dir, "/dev/full");
    EXPECT_NE(r.rc, 0) << c << ": " << r.err;
    EXPECT_TRUE(contains(r.err, "standard output")) << c << ": " << r.err;
  }
}

TEST(RobustnessCli, InputsNeverBlock) {
  Workspace ws;
  ASSERT_EQ(::mkfifo(ws.dir.file("in.fifo").c_str(), 0600), 0);
  struct Case {
    std::string args;
    int rc;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"ask -m m.gguf --cache in.fifo --question hi", 1, "not a regular file (a FIFO)"},
      {"ask -m m.gguf --cache doc.kvc --questions in.fifo", 2, "empty file"},
      {"tokenize -m m.gguf --file in.fifo", 0, ""},
      {"tokenize -m m.gguf --file .", 1, "(a directory)"},
      {"run -m m.gguf -f . --quiet", 1, "(a directory)"},
      {"ask -m m.gguf --cache . --question hi", 1, "directory"},
  };
  for (const Case& c : cases) {
    const Ran r = sh(c.args, ws.dir, "", 30);
    EXPECT_EQ(r.rc, c.rc) << c.args << ": " << r.err;
    EXPECT_LT(r.seconds, 15.0) << c.args;
    if (!c.message.empty()) {
      EXPECT_TRUE(contains(r.err, c.message)) << c.args << ": " << r.err;
    }
  }
  // A FIFO with a writer is read to its end.
  const Ran r = sh("ask -m m.gguf --cache doc.kvc --questions in.fifo --max-tokens 2", ws.dir, "",
                   30, "(sleep 0.5; echo 'What is the pass key?' > in.fifo) & ");
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "Q: What is the pass key?")) << r.out;
  const Ran t = sh("tokenize -m m.gguf --file -", ws.dir, "", 30, "echo hello | ");
  (void)t;  // stdin is /dev/null inside sh(); the pipe form is in the probe
}

TEST(RobustnessCli, NumbersAreCheckedNotSaturated) {
  Workspace ws;
  struct Case {
    std::string args, message;
  };
  const std::string big = "18446744073709551616";  // 2^64
  const std::string max = "18446744073709551615";  // 2^64 - 1
  const std::vector<Case> cases = {
      {"run -m m.gguf --prompt hi --threads ''", "--threads: an empty value"},
      {"run -m m.gguf --prompt hi --keep ''", "--keep: an empty value"},
      {"run -m m.gguf --prompt hi --temp ''", "an empty value"},
      {"run -m m.gguf --prompt hi --budget " + big, "out of range"},
      {"run -m m.gguf --prompt hi --seed " + big, "out of range"},
      {"run -m m.gguf --prompt hi --prefill-chunk 1" + big, "out of range"},
      {"run -m m.gguf --prompt hi --max-tokens " + max, "out of range"},
      {"eval -m m.gguf --context " + max + " --n 1", "out of range"},
      {"demo -m m.gguf --context " + max, "out of range"},
      {"demo -m m.gguf --context 4096", "does not fit the model"},
      {"eval -m m.gguf --n 99999999999", "out of range"},
      {"tasks gen --n " + max, "out of range"},
      {"tasks gen --context 99999999999", "out of range"},
      {"tasks gen --needles 65", "--needles: out of range, got 65, expected 1 .. 64"},
      {"tasks gen --needles 0", "--needles: out of range, got 0, expected 1 .. 64"},
      {"tasks gen --hops 1000", "--hops: out of range, got 1000, expected 1 .. 64"},
      {"tasks gen --hops 0", "--hops: out of range, got 0, expected 1 .. 64"},
      {"tasks gen --seed 9223372036854775808",
       "--seed: out of range, got 9223372036854775808, expected 0 .. 9223372036854775807"},
      {"bench --layers 99999999", "out of range"},
      {"bench -r 99999999", "out of range"},
      {"bench --layers 1000 --embd 65536", "larger than this machine's memory"},
      {"serve -m m.gguf --port 70000", "--port: out of range"},
      {"serve -m m.gguf --host ''", "--host: an empty value"},
  };
  for (const Case& c : cases) {
    const Ran r = sh(c.args, ws.dir, "", 30);
    EXPECT_EQ(r.rc, 2) << c.args << ": " << r.err;
    EXPECT_TRUE(contains(r.err, c.message)) << c.args << ": " << r.err;
  }
}

// Under an address-space limit every path (prefill, kvzip's pass, scoring) ends within seconds
// with success or a named error: never a spin inside OpenBLAS or a signal.
TEST(RobustnessCli, LowAddressSpaceEndsWithSuccessOrANamedError) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "ASan cannot run under an address-space limit";
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
  GTEST_SKIP() << "ASan cannot run under an address-space limit";
#endif
#endif
  if (std::system("command -v prlimit >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "prlimit (util-linux) not installed";
  }
  Workspace ws;
  for (const char* limit : {"100000000", "60000000"}) {
    for (const std::string& args :
         {std::string("compress -m m.gguf -f doc.txt --out low.kvc --method kvzip --quiet"),
          std::string("compress -m m.gguf -f doc.txt --out low.kvc --method expected_attention "
                      "--quiet"),
          std::string("run -m m.gguf --prompt 'Once upon a time' --max-tokens 4 --quiet")}) {
      const Ran r = sh(args, ws.dir, "", 30, std::string("prlimit --as=") + limit + " ");
      EXPECT_LT(r.seconds, 20.0) << limit << " " << args;
      EXPECT_TRUE(r.rc == 0 || (r.rc == 1 && contains(r.err, "snapkv: error: [")))
          << limit << " " << args << ": rc " << r.rc << ": " << r.err;
    }
  }
}

}  // namespace
}  // namespace snapkv::clitest
