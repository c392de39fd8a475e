// max_pool1d / avg_pool1d against a naive reference that pads explicitly (-inf for max, zeros for
// avg, k/2 on each side) and slides a full window, as torch's pool1d with padding k/2 does.
#include "snapkv/ops/pool.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <stdexcept>
#include <vector>

namespace snapkv {
namespace {

std::vector<double> naive_pool(const std::vector<float>& in, size_t kernel, bool is_max) {
  const size_t half = kernel / 2;
  const double pad = is_max ? -std::numeric_limits<double>::infinity() : 0.0;
  std::vector<double> padded(in.size() + 2 * half, pad);
  for (size_t i = 0; i < in.size(); ++i) padded[i + half] = in[i];
  std::vector<double> out(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    double acc = is_max ? -std::numeric_limits<double>::infinity() : 0.0;
    for (size_t j = 0; j < kernel; ++j) {
      acc = is_max ? std::max(acc, padded[i + j]) : acc + padded[i + j];
    }
    out[i] = is_max ? acc : acc / static_cast<double>(kernel);
  }
  return out;
}

TEST(Pool, MatchesPaddedReference) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> dist(0.0f, 1.0f);
  for (const size_t n : {1u, 2u, 3u, 6u, 7u, 50u, 333u}) {
    std::vector<float> in(n);
    for (float& v : in) v = dist(rng);
    for (const size_t kernel : {1u, 3u, 5u, 7u, 9u, 31u}) {
      std::vector<float> out(n);
      max_pool1d(out.data(), in.data(), n, kernel);
      const auto ref_max = naive_pool(in, kernel, true);
      for (size_t i = 0; i < n; ++i) EXPECT_EQ(out[i], ref_max[i]) << n << " " << kernel;
      avg_pool1d(out.data(), in.data(), n, kernel);
      const auto ref_avg = naive_pool(in, kernel, false);
      // In-range sum of <= kernel terms in [0,1], then one scaling: (kernel + 1) u * max|in|.
      const double bound = static_cast<double>(kernel + 1) / 16777216.0;
      for (size_t i = 0; i < n; ++i) EXPECT_NEAR(out[i], ref_avg[i], bound) << n << " " << kernel;
    }
  }
}

TEST(Pool, KernelOneIsIdentityAndEdgesFollowTheDocumentedPadding) {
  const std::vector<float> in = {4.0f, 1.0f, 2.0f, 8.0f};
  std::vector<float> out(4);
  avg_pool1d(out.data(), in.data(), 4, 1);
  EXPECT_EQ(out, in);
  max_pool1d(out.data(), in.data(), 4, 3);
  EXPECT_EQ(out, (std::vector<float>{4.0f, 4.0f, 8.0f, 8.0f}));
  avg_pool1d(out.data(), in.data(), 4, 3);
  EXPECT_FLOAT_EQ(out[0], 5.0f / 3.0f);  // (0 + 4 + 1) / 3: the pad counts as a zero
  EXPECT_FLOAT_EQ(out[3], 10.0f / 3.0f);
}

// causal_max_pool1d against a double reference that pads k - 1 rows of -inf on the left only and
// slides a full window ending at each row.
std::vector<double> naive_causal_max(const std::vector<float>& in, size_t kernel) {
  const double neg_inf = -std::numeric_limits<double>::infinity();
  std::vector<double> padded(in.size() + kernel - 1, neg_inf);
  for (size_t i = 0; i < in.size(); ++i) padded[i + kernel - 1] = in[i];
  std::vector<double> out(in.size(), neg_inf);
  for (size_t i = 0; i < in.size(); ++i) {
    for (size_t j = 0; j < kernel; ++j) out[i] = std::max(out[i], padded[i + j]);
  }
  return out;
}

TEST(Pool, CausalMaxMatchesLeftPaddedReference) {
  std::mt19937 rng(13);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (const size_t n : {1u, 2u, 3u, 6u, 7u, 50u, 333u}) {
    std::vector<float> in(n);
    for (float& v : in) v = dist(rng);
    for (const size_t kernel : {1u, 3u, 5u, 15u, 31u, 401u}) {
      std::vector<float> out(n);
      causal_max_pool1d(out.data(), in.data(), n, kernel);
      const auto ref = naive_causal_max(in, kernel);
      for (size_t i = 0; i < n; ++i) EXPECT_EQ(out[i], ref[i]) << n << " " << kernel << " " << i;
    }
  }
}

TEST(Pool, CausalMaxPassesAPeakToTheRowsAfterItOnly) {
  std::vector<float> in(12, 0.0f), out(12);
  in[4] = 5.0f;
  causal_max_pool1d(out.data(), in.data(), 12, 5);
  // Rows 4..8 see row 4; rows before it and from 9 on do not.
  EXPECT_EQ(out, (std::vector<float>{0, 0, 0, 0, 5, 5, 5, 5, 5, 0, 0, 0}));
  causal_max_pool1d(out.data(), in.data(), 12, 1);
  EXPECT_EQ(out, in);
}

TEST(Pool, RejectsEvenOrZeroKernel) {
  std::vector<float> in(5, 1.0f), out(5);
  EXPECT_THROW(max_pool1d(out.data(), in.data(), 5, 0), std::invalid_argument);
  EXPECT_THROW(max_pool1d(out.data(), in.data(), 5, 4), std::invalid_argument);
  EXPECT_THROW(avg_pool1d(out.data(), in.data(), 5, 2), std::invalid_argument);
  EXPECT_THROW(causal_max_pool1d(out.data(), in.data(), 5, 0), std::invalid_argument);
  EXPECT_THROW(causal_max_pool1d(out.data(), in.data(), 5, 6), std::invalid_argument);
}

}  // namespace
}  // namespace snapkv
