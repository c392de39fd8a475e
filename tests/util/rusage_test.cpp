// Memory figures: touching 64 MiB of fresh pages raises both the current RSS and the peak by
// (nearly) that much. (The kernel updates the peak lazily, so peak and current are not compared
// with each other: only each one's growth.)
#include "snapkv/util/rusage.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

namespace snapkv {
namespace {

TEST(Rusage, PeakAndCurrentGrowWithTouchedPages) {
  const size_t current_before = current_rss_bytes();
  const size_t peak_before = peak_rss_bytes();
  ASSERT_GT(current_before, 0u) << "/proc/self/statm unreadable";
  ASSERT_GT(peak_before, 0u) << "getrusage gave no ru_maxrss";
  const size_t n = size_t{64} << 20;  // 64 MiB, every page written
  std::vector<char> block(n);
  std::memset(block.data(), 1, n);
  EXPECT_GE(current_rss_bytes(), current_before + n / 2);
  EXPECT_GE(peak_rss_bytes(), peak_before + n / 2);
  volatile char sink = block[n - 1];
  (void)sink;
}

}  // namespace
}  // namespace snapkv
