// topk_indices against a stable sort of all indices (value descending, index ascending).
#include "snapkv/ops/topk.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <numeric>
#include <random>
#include <stdexcept>
#include <vector>

namespace snapkv {
namespace {

std::vector<uint32_t> reference_topk(const std::vector<float>& s, size_t k) {
  std::vector<uint32_t> idx(s.size());
  std::iota(idx.begin(), idx.end(), 0u);
  std::stable_sort(idx.begin(), idx.end(), [&](uint32_t a, uint32_t b) { return s[a] > s[b]; });
  idx.resize(k);
  return idx;
}

TEST(TopK, MatchesStableSortWithManyTies) {
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> coarse(0, 9);  // many equal values
  for (const size_t n : {1u, 2u, 10u, 100u, 5000u}) {
    std::vector<float> s(n);
    for (float& v : s) v = static_cast<float>(coarse(rng)) * 0.25f;
    for (const size_t k : {size_t{0}, size_t{1}, n / 3, n - 1, n}) {
      EXPECT_EQ(topk_indices(s.data(), n, k), reference_topk(s, k)) << n << " " << k;
    }
  }
}

TEST(TopK, TiesGoToTheEarlierIndexAndInfinitiesAreValues) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> s = {0.5f, inf, 0.5f, -inf, 0.5f, 1.0f};
  EXPECT_EQ(topk_indices(s.data(), s.size(), 3), (std::vector<uint32_t>{1, 5, 0}));
  EXPECT_EQ(topk_indices(s.data(), s.size(), 4), (std::vector<uint32_t>{1, 5, 0, 2}));
  EXPECT_EQ(topk_indices(s.data(), s.size(), 6).back(), 3u);
}

TEST(TopK, RejectsNaNAndOversizedK) {
  const std::vector<float> s = {1.0f, std::numeric_limits<float>::quiet_NaN()};
  EXPECT_THROW(topk_indices(s.data(), 2, 1), std::invalid_argument);
  const std::vector<float> t = {1.0f, 2.0f};
  EXPECT_THROW(topk_indices(t.data(), 2, 3), std::invalid_argument);
}

}  // namespace
}  // namespace snapkv
