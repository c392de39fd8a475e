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

// g++ says ASan is on with __SANITIZE_ADDRESS__, clang with __has_feature(address_sanitizer).
#if defined(__SANITIZE_ADDRESS__)
#define RUSAGE_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define RUSAGE_TEST_ASAN 1
#endif
#endif

// A phase's own peak: after 64 MiB were touched and freed (a block this large is its own mapping,
// returned to the kernel on free), a reset brings the mark back near the current RSS; touching
// 32 MiB afterwards raises it by about that much again.
TEST(Rusage, PeakResetMeasuresOnePhase) {
  const size_t n = size_t{64} << 20;
  {
    std::vector<char> block(n);
    std::memset(block.data(), 1, n);
    volatile char sink = block[n - 1];
    (void)sink;
  }
  const size_t peak_before_reset = peak_rss_since_reset_bytes();
  ASSERT_GT(peak_before_reset, 0u) << "/proc/self/status has no VmHWM";
  if (!reset_peak_rss()) GTEST_SKIP() << "/proc/self/clear_refs not writable here";
  const size_t base = current_rss_bytes();
  const size_t after_reset = peak_rss_since_reset_bytes();
#if !defined(RUSAGE_TEST_ASAN)  // ASan keeps the freed block resident (quarantine)
  EXPECT_LT(after_reset, peak_before_reset - n / 2);
#endif
  EXPECT_LT(after_reset, base + n / 4);
  std::vector<char> phase(n / 2);
  std::memset(phase.data(), 2, n / 2);
  EXPECT_GE(peak_rss_since_reset_bytes(), base + n / 4);
  EXPECT_LT(peak_rss_since_reset_bytes(), base + n);
  volatile char sink = phase[n / 2 - 1];
  (void)sink;
}

}  // namespace
}  // namespace snapkv
