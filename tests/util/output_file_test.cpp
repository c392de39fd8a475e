// util/output_file.h and util/input_file.h: what is replaced, what is written through, what is
// refused, and inputs that never block.
#include "snapkv/util/output_file.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>

#include "snapkv/util/error.h"
#include "snapkv/util/input_file.h"

namespace snapkv {
namespace {

namespace fs = std::filesystem;

struct Dir {
  fs::path path;
  Dir() {
    path = fs::temp_directory_path() /
           ("snapkv_outfile_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::create_directories(path);
  }
  ~Dir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string file(const std::string& name) const { return (path / name).string(); }
  static inline int counter = 0;
};

std::string slurp(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(OutputFile, ReplacesARegularFileOnlyOnCommit) {
  Dir d;
  const std::string p = d.file("out.json");
  std::ofstream(p) << "old";
  {
    OutputFile f = OutputFile::open(p, "test", "output");
    f.write("new");
    EXPECT_EQ(slurp(p), "old");  // not yet
  }  // destroyed without commit: the old contents stay, the temporary file is gone
  EXPECT_EQ(slurp(p), "old");
  EXPECT_EQ(std::distance(fs::directory_iterator(d.path), fs::directory_iterator{}), 1);
  OutputFile f = OutputFile::open(p, "test", "output");
  f.write("new");
  f.commit();
  EXPECT_EQ(slurp(p), "new");
}

TEST(OutputFile, FollowsSymlinksAndRefusesDirectories) {
  Dir d;
  fs::create_symlink("target.txt", d.file("link.txt"));
  OutputFile f = OutputFile::open(d.file("link.txt"), "test", "output");
  f.write("x");
  f.commit();
  EXPECT_TRUE(fs::is_symlink(d.file("link.txt")));
  EXPECT_EQ(slurp(d.file("target.txt")), "x");
  fs::create_directory(d.file("sub"));
  EXPECT_THROW(OutputFile::open(d.file("sub"), "test", "output"), RuntimeError);
  EXPECT_THROW(OutputFile::open(d.file("missing/x"), "test", "output"), RuntimeError);
}

TEST(OutputFile, FifoIsWrittenThroughOrRefusedWithoutReader) {
  Dir d;
  const std::string fifo = d.file("out.fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_THROW(OutputFile::open(fifo, "test", "output"), RuntimeError);  // no reader
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
  EXPECT_THROW(OutputFile::open(fifo, "test", "output", Seek::required), RuntimeError);
  const int reader = ::open(fifo.c_str(), O_RDONLY | O_NONBLOCK);
  ASSERT_GE(reader, 0);
  OutputFile f = OutputFile::open(fifo, "test", "output");
  EXPECT_TRUE(f.direct());
  f.write("hello");
  f.commit();
  char buf[16] = {};
  EXPECT_EQ(::read(reader, buf, sizeof buf), 5);
  ::close(reader);
  struct stat st {};
  ASSERT_EQ(::lstat(fifo.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));
}

TEST(OutputFile, WriteErrorsAreReported) {
  if (!fs::exists("/dev/full")) GTEST_SKIP() << "no /dev/full";
  OutputFile f = OutputFile::open("/dev/full", "test", "output");
  EXPECT_TRUE(f.direct());
  EXPECT_THROW(f.write(std::string(1 << 16, 'x')), RuntimeError);
}

TEST(OutputFile, StaleTemporariesOfDeadProcessesAreRemoved) {
  Dir d;
  const std::string p = d.file("out.kvc");
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ::waitpid(child, nullptr, 0);
  const std::string stale = p + ".tmp." + std::to_string(child);
  const std::string live = p + ".tmp.1";  // pid 1 runs: kept
  std::ofstream(stale) << "half";
  std::ofstream(live) << "other";
  std::ofstream(d.file("other.kvc.tmp." + std::to_string(child))) << "not ours";
  OutputFile f = OutputFile::open(p, "test", "output");
  f.write("x");
  f.commit();
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_TRUE(fs::exists(live));
  EXPECT_TRUE(fs::exists(d.file("other.kvc.tmp." + std::to_string(child))));
}

TEST(OutputFile, AnOutputNamingAnInputIsRefused) {
  Dir d;
  std::ofstream(d.file("model.gguf")) << "m";
  fs::create_symlink("model.gguf", d.file("alias.gguf"));
  const std::vector<NamedPath> inputs = {{d.file("model.gguf"), "--model"}, {"-", "--prompt"}};
  EXPECT_THROW(refuse_output_over_inputs("t", {d.file("model.gguf"), "--out"}, inputs),
               std::invalid_argument);
  EXPECT_THROW(refuse_output_over_inputs("t", {d.file("alias.gguf"), "--out"}, inputs),
               std::invalid_argument);
  EXPECT_THROW(
      refuse_output_over_inputs("t", {d.file("./x.kvc"), "--json"}, {{d.file("x.kvc"), "--out"}}),
      std::invalid_argument);  // neither exists yet: the same resolved path
  EXPECT_NO_THROW(refuse_output_over_inputs("t", {d.file("out.kvc"), "--out"}, inputs));
  EXPECT_NO_THROW(refuse_output_over_inputs("t", {"-", "--out"}, inputs));
}

TEST(InputFile, FifoWithoutWriterEndsAndDirectoryIsRefused) {
  Dir d;
  const std::string fifo = d.file("in.fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(read_input_file(fifo, "test", "input", 100), "");
  EXPECT_LT(std::chrono::steady_clock::now() - t0,
            std::chrono::milliseconds(kInputFirstByteWaitMs + 2000));
  EXPECT_THROW(read_input_file(d.path.string(), "test", "input", 100), RuntimeError);
  std::ofstream(d.file("a.txt")) << "0123456789";
  EXPECT_EQ(read_input_file(d.file("a.txt"), "test", "input", 100), "0123456789");
  EXPECT_EQ(read_input_file(d.file("a.txt"), "test", "input", 4).size(), 5u);  // max + 1
  if (fs::exists("/dev/zero")) {
    EXPECT_EQ(read_input_file("/dev/zero", "test", "input", 1000).size(), 1001u);
  }
}

}  // namespace
}  // namespace snapkv
