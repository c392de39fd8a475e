// util/huge_pages.h: regions on 2 MiB boundaries, a whole file read into one (every byte, any
// size, the empty file), the named errors of a missing file, a directory and a FIFO, and the
// region's owner moving and releasing it; the read's progress reports (util/read_progress.h).
#include "util/huge_pages.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "snapkv/util/error.h"
#include "snapkv/util/read_progress.h"
#include "temp_dir_test.h"

namespace snapkv {
namespace {

namespace fs = std::filesystem;

class HugePagesTest : public TempDirTest {
 protected:
  HugePagesTest() : TempDirTest("snapkv_huge_") {}
  std::vector<uint8_t> bytes_of(size_t n) const {
    std::vector<uint8_t> b(n);
    for (size_t i = 0; i < n; ++i) b[i] = static_cast<uint8_t>((i * 131 + i / 4093) & 0xFF);
    return b;
  }
  std::string write_file(const std::string& name, const std::vector<uint8_t>& b) const {
    const std::string p = path(name);
    std::ofstream(p, std::ios::binary)
        .write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
    return p;
  }
};

std::string read_error(const std::string& p) {
  try {
    (void)read_file_to_huge_pages(p, "test", "a regular file");
  } catch (const RuntimeError& e) {
    return e.what();
  }
  return "";
}

TEST_F(HugePagesTest, RegionIsAlignedAndWritable) {
  EXPECT_EQ(huge_page_round_up(1), kHugePageBytes);
  EXPECT_EQ(huge_page_round_up(kHugePageBytes), kHugePageBytes);
  EXPECT_EQ(huge_page_round_up(kHugePageBytes + 1), 2 * kHugePageBytes);
  HugePageRegion r = HugePageRegion::allocate(kHugePageBytes + 3);
  ASSERT_NE(r.data(), nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(r.data()) % kHugePageBytes, 0u);
  EXPECT_EQ(r.size(), kHugePageBytes + 3);
  r.data()[0] = 1;
  r.data()[r.size() - 1] = 2;  // the last byte of the rounded-up mapping is ours
  HugePageRegion moved = std::move(r);
  ASSERT_EQ(moved.size(), kHugePageBytes + 3);
  EXPECT_EQ(moved.data()[0], 1);
  EXPECT_EQ(moved.data()[moved.size() - 1], 2);
  EXPECT_EQ(r.data(), nullptr);  // NOLINT(bugprone-use-after-move): moved-from is empty
  EXPECT_EQ(HugePageRegion::allocate(0).data(), nullptr);
}

TEST_F(HugePagesTest, ReadsEveryByteOfFilesOfAnySize) {
  // Sizes around the page and huge-page boundaries, and one of several huge pages.
  for (const size_t n : {size_t{1}, size_t{4095}, size_t{4097}, kHugePageBytes - 1, kHugePageBytes,
                         2 * kHugePageBytes + 12345}) {
    const std::vector<uint8_t> b = bytes_of(n);
    const HugePageRegion r =
        read_file_to_huge_pages(write_file("f" + std::to_string(n), b), "test", "a regular file");
    ASSERT_EQ(r.size(), n);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(r.data()) % kHugePageBytes, 0u);
    EXPECT_TRUE(std::equal(b.begin(), b.end(), r.data())) << n << " bytes";
  }
  const HugePageRegion empty = read_file_to_huge_pages(write_file("e", {}), "test", "a file");
  EXPECT_EQ(empty.size(), 0u);
  EXPECT_EQ(empty.data(), nullptr);
}

TEST_F(HugePagesTest, MissingDirectoryAndFifoAreNamedErrors) {
  EXPECT_NE(read_error(path("missing"))
                .find("[test] cannot open file '" + path("missing") +
                      "', got No such file or directory, expected a regular file"),
            std::string::npos)
      << read_error(path("missing"));
  EXPECT_NE(read_error(dir_.string()).find("not a regular file (a directory)"), std::string::npos);
  const std::string fifo = path("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  // Refused before open(), which would block on a FIFO without a writer.
  EXPECT_NE(read_error(fifo).find("not a regular file (a FIFO)"), std::string::npos);
}

TEST_F(HugePagesTest, AnonHugePageBytesIsReadable) {
  // Linux reports AnonHugePages (0 or more); -1 only where smaps_rollup is missing.
  if (!fs::exists("/proc/self/smaps_rollup")) GTEST_SKIP() << "no /proc/self/smaps_rollup";
  EXPECT_GE(anon_huge_page_bytes(), 0);
}

// util/read_progress.h: a whole-file read reports after every chunk of at most 64 MiB, the last
// call at done == total; the innermost scope of the thread reports, and only on its thread.
TEST_F(HugePagesTest, ReadProgressReportsChunksToTheInnermostScopeOfTheThread) {
  const size_t n = kReadProgressChunk + 4097;
  const std::string path = write_file("big", bytes_of(n));
  std::vector<std::pair<size_t, size_t>> outer, inner;
  {
    ReadProgressScope a([&](size_t done, size_t total) { outer.emplace_back(done, total); });
    {
      ReadProgressScope b([&](size_t done, size_t total) { inner.emplace_back(done, total); });
      (void)read_file_to_huge_pages(path, "test", "a file");
    }
    const std::vector<std::pair<size_t, size_t>> want = {{kReadProgressChunk, n}, {n, n}};
    EXPECT_EQ(inner, want);
    EXPECT_TRUE(outer.empty());
    std::thread other([&] { (void)read_file_to_huge_pages(path, "test", "a file"); });
    other.join();
    EXPECT_TRUE(outer.empty()) << "another thread's read reported to this thread's scope";
    (void)read_file_to_huge_pages(path, "test", "a file");
    EXPECT_EQ(outer, want);
  }
  inner.clear();
  outer.clear();
  (void)read_file_to_huge_pages(path, "test", "a file");  // no scope: nobody is called
  EXPECT_TRUE(inner.empty() && outer.empty());
}

}  // namespace
}  // namespace snapkv
