// Policy kvzap_snapkv's mixture (kv/core/prior_mix.h) held to a double reference written from its
// definition on synthetic scores, its edge rules (weights 0 and 1, sinks, the proxy's window rows,
// bad input), and the cache's use of it: compress_with_scores on a kvzap_snapkv cache keeps what
// the public pieces (window scores or proxy scores, the mixture, pooling, select_rows) keep.
#include "snapkv/kv/core/prior_mix.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <stdexcept>
#include <vector>

#include "kv/kv_test_util.h"
#include "snapkv/kv/core/layer_cache.h"
#include "snapkv/kv/core/snapkv_score.h"

namespace snapkv {
namespace {

using test::random_normal;
using test::view;

std::vector<float> positive(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::lognormal_distribution<float> dist(-3.0f, 1.5f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// The definition, in double: each side over its sum on rows [n_sink, n_candidates); rows past the
// candidates take the candidates' largest window term.
std::vector<double> reference(const std::vector<float>& prior, const std::vector<float>& window,
                              size_t n_sink, size_t n_candidates, double weight) {
  const size_t n = prior.size();
  double p = 0.0, w = 0.0;
  for (size_t i = n_sink; i < n_candidates; ++i) {
    p += prior[i];
    w += window[i];
  }
  double best = 0.0;
  for (size_t i = n_sink; i < n_candidates; ++i) best = std::max(best, window[i] / w);
  std::vector<double> out(n);
  for (size_t i = 0; i < n; ++i) {
    const double wi = i < n_candidates ? window[i] / w : best;
    out[i] = weight * prior[i] / p + (1.0 - weight) * wi;
  }
  return out;
}

TEST(PriorMix, HeldToTheReference) {
  for (const size_t n : {1u, 7u, 64u, 300u}) {
    for (const double weight : {0.0, 0.3, 0.5, 1.0}) {
      const std::vector<float> prior = positive(n, n), window = positive(n, n + 1);
      for (const size_t n_cand : {n, n > 32 ? n - 32 : n}) {
        const size_t n_sink = std::min<size_t>(4, n_cand > 1 ? n_cand - 1 : 0);
        std::vector<float> out(n);
        mix_prior_scores(out.data(), prior.data(), window.data(), n, n_sink, n_cand, weight);
        const std::vector<double> ref = reference(prior, window, n_sink, n_cand, weight);
        for (size_t i = 0; i < n; ++i) {
          EXPECT_NEAR(out[i], ref[i], 1e-6 * std::max(1.0, std::abs(ref[i])))
              << "n " << n << " weight " << weight << " candidates " << n_cand << " row " << i;
        }
      }
    }
  }
}

TEST(PriorMix, WeightsZeroAndOneRankAsOneSide) {
  const size_t n = 200, n_sink = 4;
  const std::vector<float> prior = positive(n, 5), window = positive(n, 6);
  std::vector<float> out(n);
  for (const auto& [weight, side] : {std::pair{0.0, &window}, std::pair{1.0, &prior}}) {
    mix_prior_scores(out.data(), prior.data(), window.data(), n, n_sink, n, weight);
    for (size_t i = n_sink; i + 1 < n; ++i) {
      EXPECT_EQ(out[i] < out[i + 1], (*side)[i] < (*side)[i + 1]) << "weight " << weight;
    }
  }
}

TEST(PriorMix, SinksDoNotScaleTheCandidates) {
  const size_t n = 50;
  std::vector<float> prior = positive(n, 7), window = positive(n, 8);
  std::vector<float> a(n), b(n);
  mix_prior_scores(a.data(), prior.data(), window.data(), n, 4, n, 0.5);
  prior[0] = window[1] = 1e6f;  // a sink the window stares at
  mix_prior_scores(b.data(), prior.data(), window.data(), n, 4, n, 0.5);
  for (size_t i = 4; i < n; ++i) EXPECT_FLOAT_EQ(a[i], b[i]) << i;
}

TEST(PriorMix, ProxyWindowRowsCompeteOnThePrior) {
  const size_t n = 40, n_cand = 30;
  std::vector<float> prior(n, 0.01f), window(n, 0.01f);
  window[12] = 0.5f;                                     // the candidates' best window term
  for (size_t i = n_cand; i < n; ++i) window[i] = 1.0f;  // the proxy's own rows
  prior[35] = 0.2f;
  std::vector<float> out(n);
  mix_prior_scores(out.data(), prior.data(), window.data(), n, 4, n_cand, 0.5);
  const float p = 0.01f * 26;  // the prior's sum over the candidates past the sinks, [4, 30)
  EXPECT_FLOAT_EQ(out[31] - 0.5f * prior[31] / p, out[12] - 0.5f * prior[12] / p);
  EXPECT_GT(out[35], out[31]);  // among the window's rows, the prior decides
}

TEST(PriorMix, ZeroSideIsLeftOut) {
  const size_t n = 20;
  const std::vector<float> prior = positive(n, 9);
  const std::vector<float> window(n, 0.0f);
  std::vector<float> out(n);
  mix_prior_scores(out.data(), prior.data(), window.data(), n, 2, n, 0.25);
  double p = 0.0;
  for (size_t i = 2; i < n; ++i) p += prior[i];
  for (size_t i = 0; i < n; ++i) EXPECT_NEAR(out[i], 0.25 * prior[i] / p, 1e-7) << i;
}

TEST(PriorMix, RefusesBadInput) {
  std::vector<float> prior(8, 0.1f), window(8, 0.1f), out(8);
  EXPECT_THROW(mix_prior_scores(out.data(), prior.data(), window.data(), 8, 2, 9, 0.5),
               std::invalid_argument);
  EXPECT_THROW(mix_prior_scores(out.data(), prior.data(), window.data(), 8, 2, 8, 1.5),
               std::invalid_argument);
  EXPECT_THROW(mix_prior_scores(out.data(), prior.data(), window.data(), 8, 2, 8, std::nan("")),
               std::invalid_argument);
  prior[3] = -0.1f;
  EXPECT_THROW(mix_prior_scores(out.data(), prior.data(), window.data(), 8, 2, 8, 0.5),
               std::invalid_argument);
}

// One layer, one prefill of S rows with the window's queries, then compress_with_scores: the kept
// rows of every head are those the public pieces choose.
void expect_cache_keeps_the_mixture(QuerySource source) {
  constexpr size_t kHeads = 4, kKv = 2, kD = 16, kS = 120, kW = 8;
  CacheConfig c;
  c.policy = PolicyKind::kvzap_snapkv;
  c.query_source = source;
  c.budget = 30;
  c.window = kW;
  c.n_sink = 2;
  c.kernel = 5;
  c.prior_weight = 0.4;
  LayerCache cache(CacheDims{kHeads, kKv, kD}, c);
  const std::vector<float> k = random_normal(kKv * kS * kD, 11, 0.5f);
  const std::vector<float> v = random_normal(kKv * kS * kD, 12);
  const std::vector<float> q = random_normal(kHeads * kW * kD, 13, 0.5f);
  const Tensor3 qt = view(q, kHeads, kW, kD);
  cache.update(view(k, kKv, kS, kD), view(v, kKv, kS, kD), &qt, UpdateKind::prefill);
  const std::vector<float> prior = positive(kKv * kS, 14);
  cache.compress_with_scores(prior);
  std::vector<float> stored(k.size());  // the fp16 rows the cache scores
  for (size_t i = 0; i < k.size(); ++i) stored[i] = test::round_fp16(k[i]);
  for (size_t h = 0; h < kKv; ++h) {
    const float* keys = stored.data() + h * kS * kD;
    std::vector<float> window(kS);
    size_t n_cand = kS;
    if (source == QuerySource::queries) {
      window_scores(window.data(), keys, kS, kD, q.data() + h * (kHeads / kKv) * kW * kD,
                    kHeads / kKv, kW, true);
    } else {
      proxy_candidate_scores(window.data(), keys, kS, kD, kW);
      n_cand = kS - kW;
    }
    std::vector<float> mixed(kS), pooled(kS);
    mix_prior_scores(mixed.data(), prior.data() + h * kS, window.data(), kS, c.n_sink, n_cand,
                     c.prior_weight);
    pool_scores(pooled.data(), mixed.data(), kS, c.pool, c.kernel);
    const std::vector<uint32_t> keep = select_rows(pooled.data(), kS, c.budget, c.n_sink, 0);
    const std::span<const int64_t> kept = cache.positions(h);
    ASSERT_EQ(kept.size(), keep.size());
    for (size_t i = 0; i < keep.size(); ++i) EXPECT_EQ(kept[i], keep[i]) << "head " << h;
  }
}

TEST(PriorMix, CacheKeepsTheMixtureWithQueries) {
  expect_cache_keeps_the_mixture(QuerySource::queries);
}

TEST(PriorMix, CacheKeepsTheMixtureWithProxyKeys) {
  expect_cache_keeps_the_mixture(QuerySource::keys);
}

}  // namespace
}  // namespace snapkv
