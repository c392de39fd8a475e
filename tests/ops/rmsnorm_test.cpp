// RMSNorm fast vs double reference; behaviour at scale extremes.
#include "snapkv/ops/rmsnorm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <stdexcept>
#include <vector>

namespace snapkv {
namespace {

constexpr float kEps = std::numeric_limits<float>::epsilon();

TEST(RmsNorm, MatchesDoubleReference) {
  std::mt19937 rng(1);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (size_t n : {1u, 7u, 64u, 2048u}) {
    for (float scale : {1e-3f, 1.0f, 1e3f}) {
      std::vector<float> x(n), w(n), fast(n), ref(n);
      for (size_t i = 0; i < n; ++i) {
        x[i] = dist(rng) * scale;
        w[i] = 1.0f + 0.1f * dist(rng);
      }
      rmsnorm(fast.data(), x.data(), w.data(), n, 1e-5f);
      rmsnorm_ref(ref.data(), x.data(), w.data(), n, 1e-5f);
      // Fast: scale rounded to fp32 once, then two fp32 products: <= 4 eps relative.
      for (size_t i = 0; i < n; ++i) {
        ASSERT_LE(std::fabs(fast[i] - ref[i]), 4 * kEps * std::fabs(ref[i]) + 1e-37f);
      }
      // The output has unit RMS before the weight: check with w = 1.
      std::vector<float> ones(n, 1.0f), y(n);
      rmsnorm(y.data(), x.data(), ones.data(), n, 0.0f);
      double ms = 0.0;
      for (float v : y) ms += static_cast<double>(v) * v;
      EXPECT_NEAR(ms / static_cast<double>(n), 1.0, 8 * kEps);
    }
  }
}

TEST(RmsNorm, InPlaceAndRows) {
  std::vector<float> x = {1, 2, 3, 4, -1, -2, -3, -4}, w = {1, 1, 2, 2}, out(8);
  rmsnorm_rows(out.data(), x.data(), w.data(), 2, 4, 1e-6f);
  rmsnorm(x.data(), x.data(), w.data(), 4, 1e-6f);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(out[i], x[i]);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(out[4 + i], -out[i]);
}

TEST(RmsNorm, RejectsBadArguments) {
  float x[2] = {1, 2}, w[2] = {1, 1}, out[2];
  EXPECT_THROW(rmsnorm(out, x, w, 0, 1e-5f), std::invalid_argument);
  EXPECT_THROW(rmsnorm(out, x, w, 2, -1.0f), std::invalid_argument);
  EXPECT_THROW(rmsnorm(out, nullptr, w, 2, 1e-5f), std::invalid_argument);
}

}  // namespace
}  // namespace snapkv
