// RoPE NORM: table version vs double reference, the adjacent-pair convention, the relative
// position identity <rope(q, i), rope(k, j)> = f(i - j), and the untouched tail past n_rot.
#include "snapkv/ops/rope.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <stdexcept>
#include <vector>

namespace snapkv {
namespace {

constexpr float kEps = std::numeric_limits<float>::epsilon();

std::vector<float> random_vec(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

TEST(Rope, TableMatchesDoubleReference) {
  const size_t n_heads = 3, head_dim = 64, n_rot = 64;
  const std::vector<int64_t> positions = {0, 1, 17, 1000, 16383, 100000};
  auto x = random_vec(positions.size() * n_heads * head_dim, 2);
  auto expected = x;
  for (size_t t = 0; t < positions.size(); ++t) {
    for (size_t h = 0; h < n_heads; ++h) {
      rope_norm_ref(expected.data() + (t * n_heads + h) * head_dim, head_dim, n_rot, positions[t],
                    10000.0);
    }
  }
  RopeTable table(positions.data(), positions.size(), n_rot, 10000.0);
  table.apply(x.data(), n_heads, head_dim);
  // cos/sin rounded to fp32 (eps/2 each), two products and a sum: |err| <= 3 eps * |pair norm|.
  for (size_t i = 0; i < x.size(); i += 2) {
    const double pair_norm = std::hypot(expected[i], expected[i + 1]);
    EXPECT_LE(std::fabs(x[i] - expected[i]), 3 * kEps * pair_norm);
    EXPECT_LE(std::fabs(x[i + 1] - expected[i + 1]), 3 * kEps * pair_norm);
  }
}

TEST(Rope, AdjacentPairConventionByHand) {
  // head_dim 4: pair 0 rotates by pos, pair 1 by pos * base^(-1/2).
  std::vector<float> x = {1, 0, 0, 1};
  const int64_t pos = 3;
  RopeTable table(&pos, 1, 4, 100.0);
  table.apply(x.data(), 1, 4);
  EXPECT_NEAR(x[0], std::cos(3.0), 1e-6);
  EXPECT_NEAR(x[1], std::sin(3.0), 1e-6);
  EXPECT_NEAR(x[2], -std::sin(0.3), 1e-6);
  EXPECT_NEAR(x[3], std::cos(0.3), 1e-6);
}

TEST(Rope, DotProductDependsOnlyOnRelativePosition) {
  const size_t d = 32;
  const auto q = random_vec(d, 5), k = random_vec(d, 6);
  auto dot_at = [&](int64_t i, int64_t j) {
    auto qi = q, kj = k;
    rope_norm_ref(qi.data(), d, d, i, 10000.0);
    rope_norm_ref(kj.data(), d, d, j, 10000.0);
    double s = 0.0;
    for (size_t c = 0; c < d; ++c) s += static_cast<double>(qi[c]) * kj[c];
    return s;
  };
  double norm = 0.0;
  for (size_t c = 0; c < d; ++c) norm += std::fabs(q[c] * k[c]);
  EXPECT_NEAR(dot_at(10, 3), dot_at(1007, 1000), 8 * d * kEps * norm);
  EXPECT_NEAR(dot_at(5, 5), dot_at(0, 0), 8 * d * kEps * norm);
}

TEST(Rope, PartialRotaryLeavesTail) {
  auto x = random_vec(8, 9);
  const auto before = x;
  const int64_t pos = 7;
  RopeTable(&pos, 1, 4, 10000.0).apply(x.data(), 1, 8);
  for (size_t i = 4; i < 8; ++i) EXPECT_EQ(x[i], before[i]);
  EXPECT_NE(x[0], before[0]);
}

TEST(Rope, RejectsBadArguments) {
  const int64_t pos = 0, neg = -1;
  EXPECT_THROW(RopeTable(&pos, 1, 3, 10000.0), std::invalid_argument);
  EXPECT_THROW(RopeTable(&pos, 1, 4, 0.0), std::invalid_argument);
  EXPECT_THROW(RopeTable(&neg, 1, 4, 10000.0), std::invalid_argument);
  float x[4] = {};
  EXPECT_THROW(RopeTable(&pos, 1, 8, 10000.0).apply(x, 1, 4), std::invalid_argument);
}

TEST(Rope, NeoxAndScaledTablesMatchDoubleReference) {
  const size_t n_heads = 2, head_dim = 64, n_rot = 64;
  const std::vector<int64_t> positions = {0, 3, 511, 40000};
  std::vector<float> factors(n_rot / 2);
  for (size_t i = 0; i < factors.size(); ++i) factors[i] = 1.0f + 0.25f * static_cast<float>(i);
  for (RopeKind kind : {RopeKind::norm, RopeKind::neox}) {
    for (const float* ff :
         {static_cast<const float*>(nullptr), static_cast<const float*>(factors.data())}) {
      const RopeParams p{n_rot, 500000.0, 0.25, kind, ff};
      auto x = random_vec(positions.size() * n_heads * head_dim, 11);
      auto expected = x;
      for (size_t t = 0; t < positions.size(); ++t) {
        for (size_t h = 0; h < n_heads; ++h) {
          rope_ref(expected.data() + (t * n_heads + h) * head_dim, head_dim, positions[t], p);
        }
      }
      RopeTable(positions.data(), positions.size(), p).apply(x.data(), n_heads, head_dim);
      // Same bound as the NORM table test, per rotated pair (whatever its layout).
      const size_t half = n_rot / 2;
      for (size_t v = 0; v < x.size(); v += head_dim) {
        for (size_t i = 0; i < half; ++i) {
          const size_t a = kind == RopeKind::norm ? 2 * i : i;
          const size_t b = kind == RopeKind::norm ? 2 * i + 1 : i + half;
          const double pair_norm = std::hypot(expected[v + a], expected[v + b]);
          EXPECT_LE(std::fabs(x[v + a] - expected[v + a]), 3 * kEps * pair_norm);
          EXPECT_LE(std::fabs(x[v + b] - expected[v + b]), 3 * kEps * pair_norm);
        }
      }
    }
  }
}

TEST(Rope, NeoxPairsTheHalvesByHand) {
  // head_dim 4, NEOX: pair 0 is (x[0], x[2]) turned by pos, pair 1 is (x[1], x[3]) by
  // pos * base^(-1/2).
  std::vector<float> x = {1, 0, 0, 1};
  const int64_t pos = 3;
  RopeTable(&pos, 1, RopeParams{4, 100.0, 1.0, RopeKind::neox, nullptr}).apply(x.data(), 1, 4);
  EXPECT_NEAR(x[0], std::cos(3.0), 1e-6);
  EXPECT_NEAR(x[2], std::sin(3.0), 1e-6);
  EXPECT_NEAR(x[1], -std::sin(0.3), 1e-6);
  EXPECT_NEAR(x[3], std::cos(0.3), 1e-6);
}

TEST(Rope, LinearScaleAndFactorsDivideTheAngle) {
  // freq_scale s at position p equals no scaling at position p * s (for integer p * s), and a
  // frequency factor f on a pair equals a base that divides that pair's angle by f.
  const size_t d = 16;
  const auto x = random_vec(d, 13);
  auto scaled = x, plain = x;
  rope_ref(scaled.data(), d, 40, RopeParams{d, 10000.0, 0.25, RopeKind::norm, nullptr});
  rope_ref(plain.data(), d, 10, RopeParams{d, 10000.0, 1.0, RopeKind::norm, nullptr});
  for (size_t i = 0; i < d; ++i) EXPECT_NEAR(scaled[i], plain[i], 4 * kEps);
  const std::vector<float> all_four(d / 2, 4.0f);
  auto factored = x;
  rope_ref(factored.data(), d, 40, RopeParams{d, 10000.0, 1.0, RopeKind::neox, all_four.data()});
  auto quarter = x;
  rope_ref(quarter.data(), d, 10, RopeParams{d, 10000.0, 1.0, RopeKind::neox, nullptr});
  for (size_t i = 0; i < d; ++i) EXPECT_NEAR(factored[i], quarter[i], 4 * kEps);
}

TEST(Rope, NoScalingIsBitwiseTheOriginalTable) {
  // The Llama path must not change by a bit: scale 1 and no factors give the plain table exactly.
  const std::vector<int64_t> positions = {0, 1, 77, 4095};
  auto a = random_vec(positions.size() * 3 * 32, 17);
  auto b = a;
  RopeTable(positions.data(), positions.size(), 32, 10000.0).apply(a.data(), 3, 32);
  const std::vector<float> ones(16, 1.0f);
  RopeTable(positions.data(), positions.size(),
            RopeParams{32, 10000.0, 1.0, RopeKind::norm, ones.data()})
      .apply(b.data(), 3, 32);
  EXPECT_EQ(a, b);
}

TEST(Rope, RejectsBadScalingArguments) {
  const int64_t pos = 0;
  const float bad_factors[2] = {1.0f, 0.0f};
  EXPECT_THROW(RopeTable(&pos, 1, RopeParams{4, 10000.0, 0.0, RopeKind::norm, nullptr}),
               std::invalid_argument);
  EXPECT_THROW(RopeTable(&pos, 1, RopeParams{4, 10000.0, 1.0, RopeKind::neox, bad_factors}),
               std::invalid_argument);
}

TEST(Rope, TurnRowsMovesRotatedRowsToOtherPositionsEitherWay) {
  // A row rotated at p and turned by d equals the row rotated at p + d (RoPE composes), for
  // negative d too: within a few fp32 roundings of the pair's norm.
  const size_t head_dim = 16, n_rot = 12;
  std::vector<float> factors(n_rot / 2);
  for (size_t i = 0; i < factors.size(); ++i) factors[i] = 1.0f + 0.5f * static_cast<float>(i);
  const std::vector<int64_t> from = {0, 7, 2047, 9000}, delta = {5, -7, -1600, -8990};
  for (RopeKind kind : {RopeKind::norm, RopeKind::neox}) {
    const RopeParams p{n_rot, 10000.0, 0.5, kind, factors.data()};
    const std::vector<float> raw = random_vec(from.size() * head_dim, 21);
    std::vector<float> x = raw, expected = raw;
    for (size_t r = 0; r < from.size(); ++r) {
      rope_ref(x.data() + r * head_dim, head_dim, from[r], p);
      rope_ref(expected.data() + r * head_dim, head_dim, from[r] + delta[r], p);
    }
    rope_turn_rows(x.data(), delta.data(), from.size(), head_dim, p);
    const size_t half = n_rot / 2;
    for (size_t r = 0; r < from.size(); ++r) {
      const float* got = x.data() + r * head_dim;
      const float* want = expected.data() + r * head_dim;
      for (size_t i = 0; i < half; ++i) {
        const size_t a = kind == RopeKind::norm ? 2 * i : i;
        const size_t b = kind == RopeKind::norm ? 2 * i + 1 : i + half;
        const double pair_norm = std::hypot(want[a], want[b]);
        EXPECT_LE(std::fabs(got[a] - want[a]), 4 * kEps * pair_norm) << "row " << r;
        EXPECT_LE(std::fabs(got[b] - want[b]), 4 * kEps * pair_norm) << "row " << r;
      }
      for (size_t d = n_rot; d < head_dim; ++d) EXPECT_EQ(got[d], raw[r * head_dim + d]);
    }
  }
  std::vector<float> row(head_dim);
  const int64_t d = 1;
  EXPECT_THROW(rope_turn_rows(row.data(), &d, 1, 8, RopeParams{n_rot, 10000.0, 1.0}),
               std::invalid_argument);  // head_dim below n_rot
}

}  // namespace
}  // namespace snapkv
