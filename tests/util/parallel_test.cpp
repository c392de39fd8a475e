// parallel_for: every index exactly once, exceptions rethrown on the caller after all workers
// finish, inline execution for n <= 1 or one thread, nested calls and calls from several threads
// at once, many short calls back to back (the decode step's pattern). The suite runs on the
// worker pool and again on OpenMP (ctest util.parallel_omp: SNAPKV_PARALLEL=omp).
#include "snapkv/util/parallel.h"

#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <thread>
#include <vector>

namespace snapkv {
namespace {

class ParallelTest : public ::testing::Test {
 protected:
  void SetUp() override { saved_ = num_threads(); }
  void TearDown() override { set_num_threads(saved_); }
  int saved_ = 1;
};

TEST_F(ParallelTest, VisitsEveryIndexOnce) {
  for (const int threads : {1, 2, 4}) {
    set_num_threads(threads);
    for (const size_t n : {0u, 1u, 2u, 17u, 1000u}) {
      std::vector<std::atomic<int>> hits(n);
      parallel_for(n, [&](size_t i) { hits[i].fetch_add(1); });
      for (size_t i = 0; i < n; ++i) EXPECT_EQ(hits[i].load(), 1) << "n=" << n << " i=" << i;
    }
  }
}

TEST_F(ParallelTest, RethrowsAfterAllWorkersFinish) {
  for (const int threads : {1, 3}) {
    set_num_threads(threads);
    std::atomic<int> done{0};
    try {
      parallel_for(64, [&](size_t i) {
        if (i % 16 == 5) throw std::runtime_error("boom " + std::to_string(i));
        done.fetch_add(1);
      });
      FAIL() << "expected an exception";
    } catch (const std::runtime_error& e) {
      EXPECT_EQ(std::string(e.what()).rfind("boom ", 0), 0u);
    }
    if (threads > 1) {
      // Workers keep going after one index throws: the 60 other indices all ran.
      EXPECT_EQ(done.load(), 60);
    } else {
      // Inline (one thread): the loop stops at the first throw, after indices 0..4.
      EXPECT_EQ(done.load(), 5);
    }
  }
}

TEST_F(ParallelTest, RunsInlineForOneThreadOrOneItem) {
  const auto caller = std::this_thread::get_id();
  set_num_threads(1);
  parallel_for(8, [&](size_t) { EXPECT_EQ(std::this_thread::get_id(), caller); });
  set_num_threads(4);
  parallel_for(1, [&](size_t) { EXPECT_EQ(std::this_thread::get_id(), caller); });
  EXPECT_EQ(num_threads(), 4);
  set_num_threads(0);  // back to the hardware default
  EXPECT_GE(num_threads(), 1);
}

TEST_F(ParallelTest, NestedCallsRunEveryIndex) {
  set_num_threads(2);
  std::vector<std::atomic<int>> hits(8 * 16);
  parallel_for(
      8, [&](size_t i) { parallel_for(16, [&](size_t j) { hits[i * 16 + j].fetch_add(1); }); });
  for (size_t i = 0; i < hits.size(); ++i) EXPECT_EQ(hits[i].load(), 1) << i;
}

TEST_F(ParallelTest, CallersOnSeveralThreadsEachGetTheirIndices) {
  set_num_threads(2);
  constexpr size_t kCallers = 3, kCalls = 200, kN = 7;
  std::vector<std::atomic<int>> sums(kCallers);
  std::vector<std::thread> callers;
  for (size_t c = 0; c < kCallers; ++c) {
    callers.emplace_back([&, c] {
      for (size_t call = 0; call < kCalls; ++call) {
        parallel_for(kN, [&](size_t i) { sums[c].fetch_add(static_cast<int>(i + 1)); });
      }
    });
  }
  for (std::thread& t : callers) t.join();
  for (size_t c = 0; c < kCallers; ++c) EXPECT_EQ(sums[c].load(), kCalls * kN * (kN + 1) / 2);
}

TEST_F(ParallelTest, ManyShortCallsBackToBack) {
  for (const int threads : {2, 3}) {
    set_num_threads(threads);
    std::vector<int> out(5);
    long long total = 0;
    for (int call = 0; call < 3000; ++call) {
      parallel_for(out.size(), [&](size_t i) { out[i] = call + static_cast<int>(i); });
      for (int v : out) total += v;
    }
    // sum over calls of (5 * call + 0 + 1 + 2 + 3 + 4)
    EXPECT_EQ(total, 5LL * (2999LL * 3000 / 2) + 10LL * 3000) << threads << " threads";
  }
}

}  // namespace
}  // namespace snapkv
