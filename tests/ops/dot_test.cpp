// dot / dot_f16 / axpy / axpy_f16: fast paths and scalar twins against double references, with
// bounds gamma_n * sum|a_i b_i| (gamma_n = n u / (1 - n u), u = 2^-24), over lengths that hit the
// 16-wide, 8-wide and scalar tail loops.
#include "snapkv/ops/dot.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace snapkv {
namespace {

constexpr double kU = 1.0 / 16777216.0;  // fp32 unit roundoff

double gamma(size_t n) {
  return static_cast<double>(n) * kU / (1.0 - static_cast<double>(n) * kU);
}

std::vector<float> random_vector(size_t n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

std::vector<fp16_t> to_half(const std::vector<float>& v) {
  std::vector<fp16_t> h(v.size());
  for (size_t i = 0; i < v.size(); ++i) h[i] = fp32_to_fp16(v[i]);
  return h;
}

const size_t kLengths[] = {0, 1, 3, 7, 8, 9, 15, 16, 17, 31, 64, 128, 129, 1000};

TEST(Dot, FastAndScalarWithinGammaOfDoubleReference) {
  std::mt19937 rng(1);
  for (const size_t n : kLengths) {
    const auto a = random_vector(n, rng);
    const auto b = random_vector(n, rng, 3.0f);
    double abs_sum = 0.0;
    for (size_t i = 0; i < n; ++i) abs_sum += std::fabs(static_cast<double>(a[i]) * b[i]);
    const double ref = dot_ref(a.data(), b.data(), n);
    const double bound = gamma(n + 1) * abs_sum;
    EXPECT_LE(std::fabs(dot(a.data(), b.data(), n) - ref), bound) << "n=" << n;
    EXPECT_LE(std::fabs(dot_scalar(a.data(), b.data(), n) - ref), bound) << "n=" << n;
  }
}

TEST(Dot, ExactOnSmallIntegers) {
  // Products and partial sums of small integers are exact in fp32, whatever the order.
  std::vector<float> a(100), b(100);
  double expected = 0.0;
  for (size_t i = 0; i < 100; ++i) {
    a[i] = static_cast<float>(static_cast<int>(i % 7) - 3);
    b[i] = static_cast<float>(static_cast<int>(i % 5) - 2);
    expected += static_cast<double>(a[i]) * b[i];
  }
  EXPECT_EQ(dot(a.data(), b.data(), 100), static_cast<float>(expected));
}

TEST(DotF16, FastAndScalarWithinGammaOfDoubleReference) {
  std::mt19937 rng(2);
  for (const size_t n : kLengths) {
    const auto a = random_vector(n, rng);
    const auto h = to_half(random_vector(n, rng, 2.0f));
    double ref = 0.0, abs_sum = 0.0;
    for (size_t i = 0; i < n; ++i) {
      const double p = static_cast<double>(a[i]) * fp16_to_fp32(h[i]);
      ref += p;
      abs_sum += std::fabs(p);
    }
    const double bound = gamma(n + 1) * abs_sum;
    EXPECT_LE(std::fabs(dot_f16(a.data(), h.data(), n) - ref), bound) << "n=" << n;
    EXPECT_LE(std::fabs(dot_f16_scalar(a.data(), h.data(), n) - ref), bound) << "n=" << n;
  }
}

TEST(Axpy, FastAndScalarWithinTwoUlpsOfDouble) {
  std::mt19937 rng(3);
  for (const size_t n : kLengths) {
    const auto x = random_vector(n, rng);
    const auto y0 = random_vector(n, rng);
    const float alpha = -0.37f;
    auto y_fast = y0, y_scalar = y0, y_half = y0, y_half_scalar = y0;
    const auto h = to_half(x);
    axpy(y_fast.data(), alpha, x.data(), n);
    axpy_scalar(y_scalar.data(), alpha, x.data(), n);
    axpy_f16(y_half.data(), alpha, h.data(), n);
    axpy_f16_scalar(y_half_scalar.data(), alpha, h.data(), n);
    for (size_t i = 0; i < n; ++i) {
      const double xh = fp16_to_fp32(h[i]);
      const double ref = y0[i] + static_cast<double>(alpha) * x[i];
      const double ref_h = y0[i] + static_cast<double>(alpha) * xh;
      const double bound = 2 * kU * (std::fabs(y0[i]) + std::fabs(alpha * x[i]));
      const double bound_h = 2 * kU * (std::fabs(y0[i]) + std::fabs(alpha * xh));
      EXPECT_LE(std::fabs(y_fast[i] - ref), bound);
      EXPECT_LE(std::fabs(y_scalar[i] - ref), bound);
      EXPECT_LE(std::fabs(y_half[i] - ref_h), bound_h);
      EXPECT_LE(std::fabs(y_half_scalar[i] - ref_h), bound_h);
    }
  }
}

}  // namespace
}  // namespace snapkv
