// binary16 conversion: exhaustive round trip of all 65536 halves, correct rounding (nearest, ties
// to even) of random and boundary floats checked against the neighbouring halves, the relative
// error bound 2^-11 over the normal range, and the F16C bulk paths held to the scalar reference.
#include "snapkv/util/fp16.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace snapkv {
namespace {

bool is_nan_half(fp16_t h) {
  return (h & 0x7C00u) == 0x7C00u && (h & 0x3FFu) != 0;
}

TEST(Fp16, EveryHalfRoundTripsExactly) {
  for (uint32_t bits = 0; bits < 65536; ++bits) {
    const auto h = static_cast<fp16_t>(bits);
    const float f = fp16_to_fp32(h);
    if (is_nan_half(h)) {
      EXPECT_TRUE(std::isnan(f));
      EXPECT_TRUE(is_nan_half(fp32_to_fp16(f)));
      continue;
    }
    ASSERT_EQ(fp32_to_fp16(f), h) << "bits " << bits;
  }
}

TEST(Fp16, BulkDecodeMatchesScalarForEveryHalf) {
  std::vector<fp16_t> all(65536);
  for (uint32_t bits = 0; bits < 65536; ++bits) all[bits] = static_cast<fp16_t>(bits);
  std::vector<float> out(65536 + 3);
  // An odd offset and count exercise the 8-wide loop and the scalar tail together.
  fp16_to_fp32_n(out.data(), all.data(), 65536);
  for (uint32_t bits = 0; bits < 65536; ++bits) {
    const float ref = fp16_to_fp32(all[bits]);
    if (std::isnan(ref)) {
      EXPECT_TRUE(std::isnan(out[bits]));
    } else {
      ASSERT_EQ(std::bit_cast<uint32_t>(out[bits]), std::bit_cast<uint32_t>(ref)) << bits;
    }
  }
  fp16_to_fp32_n(out.data(), all.data() + 1, 13);
  for (size_t i = 0; i < 13; ++i) EXPECT_EQ(out[i], fp16_to_fp32(all[i + 1]));
}

// Correct rounding: no other half is closer, and an exact tie picks the even mantissa.
void expect_correctly_rounded(float f) {
  const fp16_t h = fp32_to_fp16(f);
  const double x = f;
  if (std::fabs(x) >= 65520.0) {
    EXPECT_EQ(h & 0x7FFFu, 0x7C00u) << f;  // overflow to infinity
    return;
  }
  const double got = fp16_to_fp32(h);
  const double err = std::fabs(got - x);
  for (const int step : {-1, 1}) {
    const int nb = static_cast<int>(h & 0x7FFFu) + step;
    if (nb < 0 || nb > 0x7BFF) continue;
    const auto neighbour = static_cast<fp16_t>((h & 0x8000u) | static_cast<uint32_t>(nb));
    const double other = std::fabs(static_cast<double>(fp16_to_fp32(neighbour)) - x);
    ASSERT_LE(err, other) << "f=" << f;
    if (err == other) {
      EXPECT_EQ(h & 1u, 0u) << "tie not to even, f=" << f;
    }
  }
}

TEST(Fp16, RoundsToNearestEvenAndBoundsRelativeError) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> expo(-26.0f, 16.5f);
  std::vector<float> samples;
  for (int i = 0; i < 200000; ++i) {
    const float f = std::exp2(expo(rng)) * (i % 2 ? -1.0f : 1.0f);
    samples.push_back(f);
  }
  // Exact midpoints between neighbouring halves, and the overflow boundary.
  for (const float f :
       {1.0f + 1.0f / 2048.0f, 1.0f + 3.0f / 2048.0f, 65504.0f, 65519.99f, 65520.0f, 6.1035156e-05f,
        5.9604645e-08f, 2.9802322e-08f, 2.98e-08f, 8.9406967e-08f, 0.0f, -0.0f}) {
    samples.push_back(f);
  }
  const double u = kFp16UnitRoundoff;
  for (const float f : samples) {
    expect_correctly_rounded(f);
    const double a = std::fabs(static_cast<double>(f));
    const double back = fp16_to_fp32(fp32_to_fp16(f));
    if (a >= 6.103515625e-05 && a <= 65504.0) {
      ASSERT_LE(std::fabs(back - f), u * a) << f;  // normal range: relative error <= 2^-11
    } else if (a < 6.103515625e-05) {
      ASSERT_LE(std::fabs(back - f), std::ldexp(1.0, -25)) << f;  // subnormal: half a step
    }
  }
}

TEST(Fp16, BulkEncodeMatchesScalar) {
  std::mt19937 rng(4);
  std::uniform_real_distribution<float> expo(-28.0f, 17.0f);
  std::vector<float> in(4099);
  for (size_t i = 0; i < in.size(); ++i) {
    in[i] = std::exp2(expo(rng)) * (i % 3 ? 1.0f : -1.0f);
  }
  in[5] = std::numeric_limits<float>::infinity();
  in[6] = -std::numeric_limits<float>::infinity();
  in[7] = 65519.0f;
  in[8] = 1.0f + 1.0f / 2048.0f;
  in[9] = std::numeric_limits<float>::quiet_NaN();
  std::vector<fp16_t> fast(in.size());
  fp32_to_fp16_n(fast.data(), in.data(), in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    if (std::isnan(in[i])) {
      EXPECT_TRUE(is_nan_half(fast[i]));
    } else {
      ASSERT_EQ(fast[i], fp32_to_fp16(in[i])) << "i=" << i << " f=" << in[i];
    }
  }
}

// The fused round trip: the same values as encode-then-decode, and its range flag false exactly
// when some |x| > 65504 (NaN and Inf included), wherever the bad value sits (the 16-wide body,
// the 8-wide step or the scalar tail).
TEST(Fp16, RoundTripMatchesEncodeDecodeAndFlagsValuesBeyondTheRange) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> expo(-28.0f, 15.9f);
  const float bad_values[] = {std::numeric_limits<float>::quiet_NaN(),
                              std::numeric_limits<float>::infinity(),
                              -std::numeric_limits<float>::infinity(),
                              std::nextafter(kFp16Max, 1e30f),
                              -65519.0f,
                              1e30f};
  for (const size_t n : {1u, 7u, 8u, 15u, 16u, 17u, 24u, 33u, 4099u}) {
    std::vector<float> in(n);
    for (size_t i = 0; i < n; ++i) in[i] = std::exp2(expo(rng)) * (i % 3 ? 1.0f : -1.0f);
    in[0] = -kFp16Max;                         // the largest magnitude allowed
    if (n > 4) in[4] = 1.0f + 1.0f / 4096.0f;  // a tie: rounds to even
    std::vector<float> out(n), want(n);
    std::vector<fp16_t> half(n);
    fp32_to_fp16_n(half.data(), in.data(), n);
    fp16_to_fp32_n(want.data(), half.data(), n);
    EXPECT_TRUE(fp16_round_trip_n(out.data(), in.data(), n)) << n;
    EXPECT_EQ(out, want) << n;
    for (const size_t at : {size_t{0}, n / 2, n - 1}) {
      for (const float bad : bad_values) {
        std::vector<float> with_bad = in;
        with_bad[at] = bad;
        EXPECT_FALSE(fp16_round_trip_n(out.data(), with_bad.data(), n))
            << "n " << n << ", at " << at << ", " << bad;
      }
    }
  }
}

TEST(Fp16, Constants) {
  EXPECT_EQ(fp16_to_fp32(0x7BFFu), kFp16Max);
  EXPECT_EQ(fp16_to_fp32(0x3C01u) - 1.0f, 2.0f * kFp16UnitRoundoff);
}

}  // namespace
}  // namespace snapkv
