// exp_approx and softmax against double-precision references. The softmax bound per entry is
// relative: p_i * u * (2 * spread + n + 24), from the rounding of x_i - max (|x_i - max| u), the
// exp error (4u), the sum (n u) and the final scaling, where spread = max_i |x_i - max|.
#include "snapkv/ops/softmax.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <utility>
#include <vector>

namespace snapkv {
namespace {

constexpr double kU = 1.0 / 16777216.0;

std::vector<double> softmax_double(const std::vector<float>& x) {
  double m = -std::numeric_limits<double>::infinity();
  for (float v : x) m = std::max(m, static_cast<double>(v));
  std::vector<double> p(x.size());
  double sum = 0.0;
  for (size_t i = 0; i < x.size(); ++i) sum += (p[i] = std::exp(x[i] - m));
  for (double& v : p) v /= sum;
  return p;
}

TEST(ExpApprox, RelativeErrorWithinFourUlpsOverTheNormalRange) {
  double worst = 0.0;
  for (double x = -87.0; x <= 88.5; x += 0.0013) {
    const float xf = static_cast<float>(x);
    const double ref = std::exp(static_cast<double>(xf));
    worst = std::max(worst, std::fabs(exp_approx(xf) - ref) / ref);
  }
  EXPECT_LE(worst, 4 * kU);
  EXPECT_EQ(exp_approx(0.0f), 1.0f);
}

TEST(ExpApprox, UnderflowIsZeroAndOverflowIsInfinity) {
  EXPECT_EQ(exp_approx(-88.0f), 0.0f);
  EXPECT_EQ(exp_approx(-1e30f), 0.0f);
  EXPECT_EQ(exp_approx(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_TRUE(std::isinf(exp_approx(89.0f)));
  EXPECT_GT(exp_approx(88.7f), 1e38f);
  EXPECT_GT(exp_approx(-87.3f), 0.0f);
}

TEST(ExpApprox, BulkMatchesScalar) {
  std::vector<float> x(1001), y(1001);
  for (size_t i = 0; i < x.size(); ++i) x[i] = -90.0f + 0.179f * static_cast<float>(i);
  exp_n(y.data(), x.data(), x.size());
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(y[i], exp_approx(x[i])) << x[i];
}

// Every float in [-88, -80] and [80, 89]: where the result leaves the normal range (subnormal
// p * 2^n near kLow, overflow near kHigh), the AVX-512 path's one-step 2^n must still round as
// the portable two-step one. Odd lengths leave 16-, 8- and 1-wide tails.
TEST(ExpApprox, BulkMatchesScalarOnEveryFloatNearTheRangeEnds) {
  for (const auto& [lo, hi] : {std::pair{-88.0f, -80.0f}, std::pair{80.0f, 89.0f}}) {
    std::vector<float> x;
    for (float v = lo; v <= hi; v = std::nextafter(v, hi + 1.0f)) x.push_back(v);
    x.push_back(1.0f);  // one more: a length that is not a multiple of 8
    std::vector<float> y(x.size());
    exp_n(y.data(), x.data(), x.size());
    size_t mismatches = 0;
    for (size_t i = 0; i < x.size(); ++i) mismatches += y[i] != exp_approx(x[i]) ? 1 : 0;
    EXPECT_EQ(mismatches, 0u) << lo << " .. " << hi << ", " << x.size() << " values";
  }
}

TEST(ExpShiftSum, MatchesTheDocumentedScalarOrderExactly) {
  std::mt19937 rng(9);
  std::normal_distribution<float> dist(0.0f, 5.0f);
  for (const size_t n : {1u, 7u, 8u, 9u, 64u, 1003u}) {
    std::vector<float> x(n);
    for (float& v : x) v = dist(rng);
    const float shift = max_value(x.data(), n);
    EXPECT_EQ(shift, *std::max_element(x.begin(), x.end()));
    // Portable definition: eight interleaved partial sums, then the tail, then the partials.
    std::vector<float> want(n);
    float partial[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    float sum = 0.0f;
    const size_t body = n / 8 * 8;
    for (size_t i = 0; i < n; ++i) {
      want[i] = exp_approx(x[i] - shift);
      if (i < body) partial[i % 8] += want[i];
    }
    for (size_t i = body; i < n; ++i) sum += want[i];
    for (const float p : partial) sum += p;
    std::vector<float> got = x;
    EXPECT_EQ(exp_shift_sum(got.data(), n, shift), sum) << n;
    EXPECT_EQ(got, want) << n;
  }
}

TEST(ExpFma, RelativeErrorWithinFourUlpsOverTheNormalRange) {
  double worst = 0.0;
  for (double x = -87.0; x <= 88.5; x += 0.0013) {
    const float xf = static_cast<float>(x);
    const double ref = std::exp(static_cast<double>(xf));
    worst = std::max(worst, std::fabs(exp_fma(xf) - ref) / ref);
  }
  EXPECT_LE(worst, 4 * kU);
  EXPECT_EQ(exp_fma(0.0f), 1.0f);
  EXPECT_EQ(exp_fma(-88.0f), 0.0f);
  EXPECT_EQ(exp_fma(-1e30f), 0.0f);
  EXPECT_EQ(exp_fma(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_TRUE(std::isinf(exp_fma(89.0f)));
  EXPECT_GT(exp_fma(88.7f), 1e38f);
  EXPECT_GT(exp_fma(-87.3f), 0.0f);
}

// exp_scale_shift_sum with scale 1 and shift 0 is exp_fma element by element (fma(x, 1, -0) is
// x): every float in [-88, -80] and [80, 89], where the result leaves the normal range, and odd
// lengths that leave 16-, 8- and 1-wide tails.
TEST(ExpFma, BulkMatchesScalarOnEveryFloatNearTheRangeEnds) {
  for (const auto& [lo, hi] : {std::pair{-88.0f, -80.0f}, std::pair{80.0f, 89.0f}}) {
    std::vector<float> x;
    for (float v = lo; v <= hi; v = std::nextafter(v, hi + 1.0f)) x.push_back(v);
    x.push_back(1.0f);
    std::vector<float> y = x;
    exp_scale_shift_sum(y.data(), y.size(), 1.0f, 0.0f);
    size_t mismatches = 0;
    for (size_t i = 0; i < x.size(); ++i) mismatches += y[i] != exp_fma(x[i]) ? 1 : 0;
    EXPECT_EQ(mismatches, 0u) << lo << " .. " << hi << ", " << x.size() << " values";
  }
}

TEST(ExpScaleShiftSum, MatchesTheDocumentedScalarOrderExactly) {
  std::mt19937 rng(11);
  std::normal_distribution<float> dist(0.0f, 40.0f);
  for (const size_t n : {1u, 7u, 8u, 15u, 16u, 17u, 33u, 64u, 1003u}) {
    std::vector<float> x(n);
    for (float& v : x) v = dist(rng);
    const float scale = 0.0883883f;  // 1 / sqrt(128), rounded
    const float shift = scale * max_value(x.data(), n);
    std::vector<float> want(n);
    float partial[16] = {};
    for (size_t i = 0; i < n; ++i) {
      want[i] = exp_fma(std::fma(x[i], scale, -shift));
      partial[i % 16] += want[i];
    }
    for (size_t w = 8; w >= 1; w /= 2) {
      for (size_t l = 0; l < w; ++l) partial[l] += partial[l + w];
    }
    std::vector<float> got = x;
    EXPECT_EQ(exp_scale_shift_sum(got.data(), n, scale, shift), partial[0]) << n;
    EXPECT_EQ(got, want) << n;
    double ref = 0.0;  // the sum against double exps of the double products
    for (size_t i = 0; i < n; ++i) {
      ref += std::exp(static_cast<double>(x[i]) * scale - static_cast<double>(shift));
    }
    // per term: the fma's rounding (|arg| u, |arg| <= 2 * 40 * 5 * scale < 40) and exp's 4u;
    // the sum adds at most n u of the total
    EXPECT_NEAR(partial[0], ref, ref * kU * (40.0 + 4.0 + static_cast<double>(n) + 2.0)) << n;
  }
}

void expect_close_to_reference(const std::vector<float>& input, bool fast) {
  std::vector<float> p = input;
  if (fast)
    softmax(p.data(), p.size());
  else
    softmax_scalar(p.data(), p.size());
  const auto ref = softmax_double(input);
  double m = -std::numeric_limits<double>::infinity();
  for (float v : input) m = std::max(m, static_cast<double>(v));
  double spread = 0.0;
  for (float v : input) spread = std::max(spread, m - v);
  const double rel = kU * (2.0 * spread + static_cast<double>(input.size()) + 24.0);
  double sum = 0.0;
  for (size_t i = 0; i < p.size(); ++i) {
    ASSERT_LE(std::fabs(p[i] - ref[i]), ref[i] * rel + 1e-37) << "i=" << i << " fast=" << fast;
    sum += p[i];
  }
  EXPECT_NEAR(sum, 1.0, rel);
}

TEST(Softmax, FastAndScalarMatchDoubleReference) {
  std::mt19937 rng(7);
  for (const size_t n : {1u, 2u, 7u, 8u, 9u, 33u, 1000u, 4097u}) {
    for (const float scale : {0.1f, 3.0f, 20.0f}) {
      std::normal_distribution<float> dist(0.0f, scale);
      std::vector<float> x(n);
      for (float& v : x) v = dist(rng);
      expect_close_to_reference(x, true);
      expect_close_to_reference(x, false);
    }
  }
}

TEST(Softmax, StableForHugeInputsAndShiftInvariant) {
  std::vector<float> x = {1000.0f, 1000.0f, 999.0f, -1e30f};
  softmax(x.data(), x.size());
  const double e = std::exp(-1.0);
  EXPECT_NEAR(x[0], 1.0 / (2.0 + e), 8 * kU);
  EXPECT_EQ(x[0], x[1]);
  EXPECT_NEAR(x[2], e / (2.0 + e), 8 * kU);
  EXPECT_EQ(x[3], 0.0f);
  std::vector<float> y = {0.0f, 0.0f, -1.0f};
  softmax(y.data(), y.size());
  EXPECT_NEAR(y[0], x[0], 8 * kU);
  std::vector<float> one = {-5.0f};
  softmax(one.data(), 1);
  EXPECT_EQ(one[0], 1.0f);
}

}  // namespace
}  // namespace snapkv
