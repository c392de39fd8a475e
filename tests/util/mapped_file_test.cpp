// MappedFile and the SIGBUS handler: regular files only (a FIFO must not block, a directory must
// not read as empty), and a file truncated under its map ends the process with the named error and
// exit status 1 instead of a bus error.
#include "snapkv/util/mapped_file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "snapkv/util/error.h"
#include "snapkv/util/npy.h"
#include "temp_dir_test.h"

namespace snapkv {
namespace {

namespace fs = std::filesystem;

class MappedFileTest : public TempDirTest {
 protected:
  MappedFileTest() : TempDirTest("snapkv_mapped_") {}
  std::string write_file(const std::string& name, size_t n_bytes) const {
    const std::string p = path(name);
    std::vector<char> bytes(n_bytes);
    for (size_t i = 0; i < n_bytes; ++i) bytes[i] = static_cast<char>(i * 7 + 1);
    std::ofstream(p, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(n_bytes));
    return p;
  }
};

std::string open_error(const std::string& p) {
  try {
    (void)MappedFile::open(p, "test", "a regular file");
  } catch (const RuntimeError& e) {
    return e.what();
  }
  return "";
}

TEST_F(MappedFileTest, MapsARegularFile) {
  const std::string p = write_file("a.bin", 10000);
  const MappedFile m = MappedFile::open(p, "test", "a regular file");
  ASSERT_EQ(m.size(), 10000u);
  EXPECT_EQ(m.data()[0], 1);
  EXPECT_EQ(m.data()[9999], static_cast<uint8_t>(9999 * 7 + 1));
  const MappedFile empty = MappedFile::open(write_file("e.bin", 0), "test", "a regular file");
  EXPECT_EQ(empty.size(), 0u);
  EXPECT_EQ(empty.data(), nullptr);
}

TEST_F(MappedFileTest, FifoIsRefusedWithoutBlocking) {
  const std::string p = path("fifo");
  ASSERT_EQ(::mkfifo(p.c_str(), 0600), 0);
  // Without the stat() first, open() would block here forever (no writer on the FIFO).
  const std::string msg = open_error(p);
  EXPECT_NE(msg.find("[test] cannot open file '" + p + "', got not a regular file (a FIFO)"),
            std::string::npos)
      << msg;
  try {
    (void)read_npy(p, 3);
    ADD_FAILURE() << "read_npy opened a FIFO";
  } catch (const RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find("[npy] " + p + ": cannot open file"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("(a FIFO)"), std::string::npos) << e.what();
  }
}

TEST_F(MappedFileTest, DirectoryAndMissingFileAreNamedErrors) {
  EXPECT_NE(open_error(dir_.string()).find("not a regular file (a directory)"), std::string::npos);
  EXPECT_NE(open_error(path("missing")).find("No such file or directory"), std::string::npos);
}

TEST_F(MappedFileTest, MovedMapStaysValid) {
  MappedFile a = MappedFile::open(write_file("a.bin", 64), "test", "a regular file");
  const uint8_t* data = a.data();
  MappedFile b = std::move(a);
  EXPECT_EQ(b.data(), data);
  EXPECT_EQ(b.size(), 64u);
  EXPECT_EQ(a.data(), nullptr);  // NOLINT(bugprone-use-after-move): moved-from is empty by contract
}

// The child maps a file, truncates it to 0 bytes and reads the map: the kernel raises SIGBUS,
// which the handler turns into the named error and exit 1.
TEST_F(MappedFileTest, TruncatedWhileMappedExitsOneWithNamedError) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const std::string p = write_file("model.gguf", 3 * 4096);
  EXPECT_EXIT(
      {
        install_mapped_file_fault_handler();
        const MappedFile m = MappedFile::open(p, "test", "a regular file");
        if (::truncate(p.c_str(), 0) != 0) std::_Exit(3);
        volatile uint8_t sink = m.data()[2 * 4096 + 5];
        (void)sink;
        std::_Exit(4);  // not reached: the read above faults
      },
      ::testing::ExitedWithCode(1),
      "snapkv: error: \\[mmap\\] file '.*model.gguf' was truncated or replaced while in use, got a "
      "bus error at byte 8197 of 12288, expected the file to stay unchanged while it is mapped");
}

TEST_F(MappedFileTest, BusErrorOutsideAnyMapStillKillsBySignal) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        install_mapped_file_fault_handler();
        ::raise(SIGBUS);
        std::_Exit(4);
      },
      ::testing::KilledBySignal(SIGBUS), "");
}

}  // namespace
}  // namespace snapkv
