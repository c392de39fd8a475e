// parallel_for: every index exactly once, exceptions rethrown on the caller after all workers
// finish, inline execution for n <= 1 or one thread.
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

}  // namespace
}  // namespace snapkv
