// KeyDiff and Expected Attention scores (kv/policies/row_scores.h) against their double-precision
// references, with per-row bounds derived from the data (u = 2^-24), and what makes each scorer
// itself: keydiff ranks an off-direction key first; expected attention follows the query mean,
// the covariance term and the value norm; sinks sit out of the normalisation.
#include "snapkv/kv/policies/row_scores.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <tuple>
#include <vector>

#include "kv/kv_test_util.h"
#include "snapkv/kv/core/layer_cache.h"
#include "snapkv/ops/dot.h"
#include "snapkv/ops/rope.h"

namespace snapkv {
namespace {

using test::random_normal;

constexpr double kU = 1.0 / 16777216.0;

// |fast - ref| for keydiff. The fast anchor sums n unit keys (each built from a norm with a
// relative error <= (d/2 + 2) u and a division), so component c is off by at most
// (n + d/2 + 4) u S_c with S_c = sum_j |k_jc| / |k_j|; the cosine's dot product adds (d + 2) u of
// sum_c |k_c| S_c, the two norms and the division another (d + 4) u of the cosine. Relative to
// |k| |a| (a the exact anchor sum) this gives cond * (n + 2 d + 10) u + (d + 4) u, with
// cond = sum_c |k_c| S_c / (|k| |a|) >= |cos|; doubled for the anchor norm's own error.
double keydiff_bound(const std::vector<float>& keys, size_t n, size_t d, size_t i) {
  std::vector<double> s(d, 0.0), a(d, 0.0);
  for (size_t j = 0; j < n; ++j) {
    const double norm = std::sqrt(dot_ref(keys.data() + j * d, keys.data() + j * d, d));
    for (size_t c = 0; c < d; ++c) {
      s[c] += std::fabs(keys[j * d + c]) / norm;
      a[c] += keys[j * d + c] / norm;
    }
  }
  double a_norm = 0.0, cond = 0.0;
  for (size_t c = 0; c < d; ++c) a_norm += a[c] * a[c];
  const double k_norm = std::sqrt(dot_ref(keys.data() + i * d, keys.data() + i * d, d));
  for (size_t c = 0; c < d; ++c) cond += std::fabs(keys[i * d + c]) * s[c];
  cond /= k_norm * std::sqrt(a_norm);
  const double nd = static_cast<double>(n), dd = static_cast<double>(d);
  return 2.0 * (cond * (nd + 2.0 * dd + 10.0) + dd + 4.0) * kU;
}

TEST(KeyDiffScores, MatchDoubleReference) {
  for (const auto& [n, d, seed] :
       {std::tuple<size_t, size_t, uint64_t>{1, 4, 1}, {37, 8, 2}, {200, 64, 3}, {513, 16, 4}}) {
    auto keys = random_normal(n * d, seed);
    for (size_t c = 0; c < d; ++c) keys[c] += 3.0f;  // a shared direction: cosines far from 0
    std::vector<float> fast(n);
    std::vector<double> ref(n);
    keydiff_scores(fast.data(), keys.data(), n, d);
    keydiff_scores_ref(ref.data(), keys.data(), n, d);
    for (size_t i = 0; i < n; ++i) {
      ASSERT_LE(std::fabs(fast[i] - ref[i]), keydiff_bound(keys, n, d, i))
          << "n " << n << " d " << d << " row " << i;
      ASSERT_GE(ref[i], -1.0 - 1e-12);
      ASSERT_LE(ref[i], 1.0 + 1e-12);
    }
  }
}

TEST(KeyDiffScores, KeepsTheOffDirectionKeyAndScoresZeroKeysZero) {
  const size_t n = 20, d = 8;
  std::vector<float> keys = random_normal(n * d, 5, 0.1f);
  for (size_t i = 0; i < n; ++i) keys[i * d] += 1.0f;  // all along channel 0 ...
  for (size_t c = 0; c < d; ++c) keys[7 * d + c] = c == 0 ? -2.0f : 0.0f;  // ... but row 7
  for (size_t c = 0; c < d; ++c) keys[9 * d + c] = 0.0f;                   // a zero key
  std::vector<float> scores(n);
  keydiff_scores(scores.data(), keys.data(), n, d);
  EXPECT_EQ(std::max_element(scores.begin(), scores.end()) - scores.begin(), 7);
  EXPECT_EQ(scores[9], 0.0f);
  for (size_t i = 0; i < n; ++i) {
    if (i != 7 && i != 9) {
      EXPECT_LT(scores[i], -0.5f) << i;  // close to the anchor
    }
  }
}

// Exponent z_i of one query head (double) and its data-derived error bound for the fast path:
// the mean term (d + 3) u sum_c |mu_c k_c| / sqrt(d) (float mu, dot), the quadratic term
// (2 d + 5) u sum_ab |k_a S_ab k_b| / (2 d) (float Sigma, sgemm, dot).
struct Exponents {
  std::vector<double> z, err;
};

Exponents exponents(const std::vector<float>& keys, size_t n, size_t d, const float* sample,
                    size_t w, size_t first) {
  std::vector<double> mu(d, 0.0), cov(d * d, 0.0);
  for (size_t r = 0; r < w; ++r) {
    for (size_t c = 0; c < d; ++c) mu[c] += sample[r * d + c] / static_cast<double>(w);
  }
  for (size_t r = 0; r < w; ++r) {
    for (size_t a = 0; a < d; ++a) {
      for (size_t b = 0; b < d; ++b) {
        cov[a * d + b] +=
            (sample[r * d + a] - mu[a]) * (sample[r * d + b] - mu[b]) / static_cast<double>(w);
      }
    }
  }
  Exponents e;
  const double dd = static_cast<double>(d);
  for (size_t i = first; i < n; ++i) {
    const float* k = keys.data() + i * d;
    double lin = 0.0, lin_abs = 0.0, quad = 0.0, quad_abs = 0.0;
    for (size_t a = 0; a < d; ++a) {
      lin += mu[a] * k[a];
      lin_abs += std::fabs(mu[a] * k[a]);
      for (size_t b = 0; b < d; ++b) {
        quad += k[a] * cov[a * d + b] * k[b];
        quad_abs += std::fabs(k[a] * cov[a * d + b] * k[b]);
      }
    }
    e.z.push_back(lin / std::sqrt(dd) + quad / (2.0 * dd));
    e.err.push_back((dd + 3.0) * kU * lin_abs / std::sqrt(dd) +
                    (2.0 * dd + 5.0) * kU * quad_abs / (2.0 * dd));
  }
  return e;
}

TEST(ExpectedAttentionScores, MatchDoubleReference) {
  for (const auto& [n, d, group, w, sinks, seed] :
       {std::tuple<size_t, size_t, size_t, size_t, size_t, uint64_t>{30, 8, 1, 6, 2, 11},
        {120, 16, 2, 8, 4, 12},
        {257, 32, 4, 16, 0, 13},
        {3, 4, 2, 3, 5, 14}}) {
    const auto keys = random_normal(n * d, seed), values = random_normal(n * d, seed + 1);
    auto queries = random_normal(group * w * d, seed + 2, 0.7f);
    for (size_t r = 0; r < group * w; ++r) queries[r * d] += 1.5f;  // a non-zero mean
    std::vector<float> fast(n);
    std::vector<double> ref(n);
    expected_attention_scores(fast.data(), keys.data(), values.data(), n, d, queries.data(), group,
                              w, sinks);
    expected_attention_scores_ref(ref.data(), keys.data(), values.data(), n, d, queries.data(),
                                  group, w, sinks);
    const size_t first = std::min(sinks, n);
    if (first == n) {
      for (size_t i = 0; i < n; ++i) EXPECT_EQ(fast[i], 1.0f);
      continue;
    }
    // Softmax of exponents off by <= E moves each probability by a relative 2 E; the softmax
    // itself (exp_approx) adds (2 spread + 2 m + 26) u over m terms; the group mean G u; the
    // value norm (d / 2 + 3) u.
    double rel = 0.0;
    const double m = static_cast<double>(n - first);
    for (size_t g = 0; g < group; ++g) {
      const Exponents e = exponents(keys, n, d, queries.data() + g * w * d, w, first);
      const auto [lo, hi] = std::minmax_element(e.z.begin(), e.z.end());
      const double worst = *std::max_element(e.err.begin(), e.err.end());
      rel = std::max(rel, 2.0 * worst + (2.0 * (*hi - *lo) + 2.0 * m + 26.0) * kU);
    }
    rel += (static_cast<double>(group) + static_cast<double>(d) / 2.0 + 4.0) * kU;
    const double best = *std::max_element(ref.begin(), ref.end());
    for (size_t i = 0; i < n; ++i) {
      const double bound = rel * (i < first ? best : ref[i]);
      ASSERT_LE(std::fabs(fast[i] - ref[i]), bound) << "n " << n << " row " << i;
      if (i < first) {
        EXPECT_EQ(ref[i], *std::max_element(ref.begin() + first, ref.end()));
      }
    }
  }
}

TEST(ExpectedAttentionScores, FollowMeanCovarianceAndValueNorm) {
  const size_t n = 12, d = 4, w = 8;
  std::vector<float> keys(n * d, 0.0f), values(n * d, 1.0f);
  for (size_t i = 0; i < n; ++i) keys[i * d + 3] = 0.1f * static_cast<float>(i % 3);
  keys[5 * d + 0] = 2.0f;   // along the query mean
  keys[8 * d + 1] = 2.0f;   // along the direction the queries vary in (zero mean there)
  keys[10 * d + 2] = 2.0f;  // orthogonal to both
  std::vector<float> queries(w * d, 0.0f);
  for (size_t r = 0; r < w; ++r) {
    queries[r * d + 0] = 1.0f;                       // mean (1, 0, 0, 0)
    queries[r * d + 1] = r % 2 == 0 ? 3.0f : -3.0f;  // variance 9 along channel 1
  }
  std::vector<float> scores(n);
  expected_attention_scores(scores.data(), keys.data(), values.data(), n, d, queries.data(), 1, w,
                            0);
  // exponents: row 5: 2 / 2 = 1; row 8: 4 * 9 / 8 = 4.5; row 10: 0.
  EXPECT_GT(scores[8], scores[5]);
  EXPECT_GT(scores[5], scores[10]);
  float sum = 0.0f;
  for (const float s : scores) sum += s;  // value norms are all 2: scores sum to 2
  EXPECT_NEAR(sum, 2.0f, 1e-5f);
  // Scaling one row's value by 3 scales its score by 3 and leaves the others.
  for (size_t c = 0; c < d; ++c) values[10 * d + c] = 3.0f;
  std::vector<float> scaled(n);
  expected_attention_scores(scaled.data(), keys.data(), values.data(), n, d, queries.data(), 1, w,
                            0);
  EXPECT_NEAR(scaled[10], 3.0f * scores[10], 1e-6f);
  EXPECT_EQ(scaled[5], scores[5]);
}

// The RoPE step against its definition: a pre-RoPE row x rotated at position p (rope_ref) and
// mapped must equal the mean of rope_ref(x, next + j) over the next n_future positions (summed in
// double). Each side rounds each pair component to float at most twice (the sample, the output;
// the reference's rotated rows, averaged), and a rotation mixes the two components of a pair, so
// |out - ref| <= 4 u (|x_a| + |x_b|) per pair component; dimensions past n_rot pass unchanged.
TEST(ExpectedFutureQueries, EqualTheMeanRotationOfThePreRopeRow) {
  const float factors[4] = {1.0f, 2.0f, 4.0f, 8.0f};
  for (const auto& [kind, n_rot, d, scale, use_factors] :
       {std::tuple<RopeKind, size_t, size_t, double, bool>{RopeKind::norm, 8, 8, 1.0, false},
        {RopeKind::neox, 8, 12, 0.5, true},
        {RopeKind::norm, 8, 10, 0.25, true}}) {
    const RopeParams rope{n_rot, 10000.0, scale, kind, use_factors ? factors : nullptr};
    const size_t n = 5, n_future = 37;
    const std::vector<int64_t> positions = {0, 3, 64, 500, 1022};
    const int64_t next = 1023;
    const auto pre = random_normal(n * d, 21 + d);
    std::vector<float> sample = pre, out(n * d);
    for (size_t r = 0; r < n; ++r) rope_ref(sample.data() + r * d, d, positions[r], rope);
    expected_future_queries(out.data(), sample.data(), positions.data(), n, d, next, n_future,
                            rope);
    for (size_t r = 0; r < n; ++r) {
      std::vector<double> ref(d, 0.0);
      for (size_t j = 0; j < n_future; ++j) {
        std::vector<float> x(pre.begin() + r * d, pre.begin() + (r + 1) * d);
        rope_ref(x.data(), d, next + static_cast<int64_t>(j), rope);
        for (size_t c = 0; c < d; ++c) ref[c] += x[c] / static_cast<double>(n_future);
      }
      const float* x = pre.data() + r * d;
      for (size_t i = 0; i < n_rot / 2; ++i) {
        const size_t a = kind == RopeKind::norm ? 2 * i : i;
        const size_t b = kind == RopeKind::norm ? 2 * i + 1 : i + n_rot / 2;
        const double bound = 4.0 * kU * (std::fabs(x[a]) + std::fabs(x[b]));
        EXPECT_LE(std::fabs(out[r * d + a] - ref[a]), bound) << "row " << r << " pair " << i;
        EXPECT_LE(std::fabs(out[r * d + b] - ref[b]), bound) << "row " << r << " pair " << i;
      }
      for (size_t c = n_rot; c < d; ++c) EXPECT_EQ(out[r * d + c], x[c]);
    }
  }
}

TEST(ExpectedFutureQueries, RejectBadPositionsAndRope) {
  const RopeParams rope{4, 10000.0, 1.0, RopeKind::norm, nullptr};
  std::vector<float> row(4, 1.0f), out(4);
  const int64_t late = 9, negative = -1;
  EXPECT_THROW(expected_future_queries(out.data(), row.data(), &late, 1, 4, 9, 8, rope),
               std::invalid_argument);
  EXPECT_THROW(expected_future_queries(out.data(), row.data(), &negative, 1, 4, 9, 8, rope),
               std::invalid_argument);
  EXPECT_THROW(expected_future_queries(out.data(), row.data(), &late, 1, 4, 10, 0, rope),
               std::invalid_argument);
  const RopeParams odd{3, 10000.0, 1.0, RopeKind::norm, nullptr};
  EXPECT_THROW(expected_future_queries(out.data(), row.data(), &late, 1, 4, 10, 8, odd),
               std::invalid_argument);
  const RopeParams wide{6, 10000.0, 1.0, RopeKind::norm, nullptr};
  EXPECT_THROW(expected_future_queries(out.data(), row.data(), &late, 1, 4, 10, 8, wide),
               std::invalid_argument);
}

// The cache hands the policy its RoPE and the window's positions: expected_attention's scores
// through a LayerCache equal the scorer run on the window queries mapped by
// expected_future_queries (window rows at positions S - w .. S - 1, next position S, 512 future
// positions), bit for bit; without set_rope they are the scores of the rotated rows. clone()
// keeps the RoPE.
TEST(ExpectedAttentionPolicy, UsesTheCachesRopeAndTheWindowPositions) {
  constexpr size_t kHeads = 4, kKv = 2, kD = 16, kS = 90, kW = 8;
  auto k = random_normal(kKv * kS * kD, 41), v = random_normal(kKv * kS * kD, 42);
  for (std::vector<float>* x : {&k, &v}) {  // exact in fp16 (the store): multiples of 2^-8, |x| < 4
    for (float& e : *x) e = std::round(std::clamp(e, -3.9f, 3.9f) * 256.0f) / 256.0f;
  }
  auto q = random_normal(kHeads * kW * kD, 43, 0.5f);
  for (size_t r = 0; r < kHeads * kW; ++r) q[r * kD + 3] += 1.0f;
  CacheConfig config;
  config.policy = PolicyKind::expected_attention;
  config.query_source = QuerySource::queries;
  config.budget = 30;
  config.window = kW;
  config.n_sink = 2;
  const RopeParams rope{12, 10000.0, 1.0, RopeKind::neox, nullptr};
  const Tensor3 qw = test::view(q, kHeads, kW, kD);
  LayerCache with_rope({kHeads, kKv, kD}, config), without({kHeads, kKv, kD}, config);
  with_rope.set_rope(rope);
  EXPECT_TRUE(with_rope.clone().rope().has_value());
  EXPECT_FALSE(without.rope().has_value());
  for (LayerCache* cache : {&with_rope, &without}) {
    cache->update(test::view(k, kKv, kS, kD), test::view(v, kKv, kS, kD), &qw, UpdateKind::prefill);
    cache->end_prompt();
  }
  std::vector<int64_t> positions(kW);
  for (size_t r = 0; r < kW; ++r) positions[r] = static_cast<int64_t>(kS - kW + r);
  const size_t group = kHeads / kKv;
  for (size_t h = 0; h < kKv; ++h) {
    std::vector<float> mapped(group * kW * kD);
    for (size_t g = 0; g < group; ++g) {
      expected_future_queries(mapped.data() + g * kW * kD, q.data() + (h * group + g) * kW * kD,
                              positions.data(), kW, kD, static_cast<int64_t>(kS), 512, rope);
    }
    std::vector<float> expected(kS), plain(kS);
    expected_attention_scores(expected.data(), k.data() + h * kS * kD, v.data() + h * kS * kD, kS,
                              kD, mapped.data(), group, kW, config.n_sink);
    expected_attention_scores(plain.data(), k.data() + h * kS * kD, v.data() + h * kS * kD, kS, kD,
                              q.data() + h * group * kW * kD, group, kW, config.n_sink);
    EXPECT_TRUE(std::ranges::equal(with_rope.last_scores(h), expected)) << "head " << h;
    EXPECT_TRUE(std::ranges::equal(without.last_scores(h), plain)) << "head " << h;
    EXPECT_NE(expected, plain);  // the mapping matters
  }
  EXPECT_THROW(without.set_rope(RopeParams{18, 10000.0, 1.0, RopeKind::norm, nullptr}),
               std::invalid_argument);  // n_rot > head_dim
}

TEST(RowScores, RejectEmptySizes) {
  std::vector<float> x(16, 1.0f), out(4);
  EXPECT_THROW(keydiff_scores(out.data(), x.data(), 0, 4), std::invalid_argument);
  EXPECT_THROW(expected_attention_scores(out.data(), x.data(), x.data(), 4, 4, x.data(), 1, 0, 0),
               std::invalid_argument);
}

}  // namespace
}  // namespace snapkv
