// SnapKV scoring and selection as pure functions: SnapKV's documented behaviour (shape, dtype,
// range, window clamp, selection size/order, sinks, planted top rows), GQA averaging and the
// causal mask against a double-precision reference, proxy mode, pooling.
#include "snapkv/kv/core/snapkv_score.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <type_traits>
#include <vector>

#include "kv/kv_test_util.h"
#include "plain_config.h"
#include "snapkv/ops/pool.h"

namespace snapkv {
namespace {

using test::random_normal;
constexpr double kU = 1.0 / 16777216.0;

// Bound for |scores - reference| per row j, relative to the reference: every probability moves by
// at most 2E + (2 * spread + n + 24) u relative (E = logit error (d + 2) u max |q||k| / sqrt(d)),
// and the average over m = n_group * w rows adds (m + 2) u.
double score_bound(const float* keys, size_t n, size_t d, const float* q, size_t n_q) {
  double max_q = 0.0, max_k = 0.0;
  for (size_t i = 0; i < n_q; ++i) {
    double s = 0.0;
    for (size_t c = 0; c < d; ++c) s += static_cast<double>(q[i * d + c]) * q[i * d + c];
    max_q = std::max(max_q, std::sqrt(s));
  }
  for (size_t j = 0; j < n; ++j) {
    double s = 0.0;
    for (size_t c = 0; c < d; ++c) s += static_cast<double>(keys[j * d + c]) * keys[j * d + c];
    max_k = std::max(max_k, std::sqrt(s));
  }
  const double max_logit = max_q * max_k / std::sqrt(static_cast<double>(d));
  const double e = static_cast<double>(d + 2) * kU * max_logit;
  return 2.0 * e + (4.0 * max_logit + static_cast<double>(n + n_q) + 28.0) * kU;
}

TEST(WindowScores, ShapeDtypeRangeAndUnitSum) {
  const size_t n = 300, d = 32, w = 16;
  const auto keys = random_normal(n * d, 1);
  std::vector<float> scores(n);
  proxy_window_scores(scores.data(), keys.data(), n, d, w, true);
  static_assert(std::is_same_v<decltype(scores)::value_type, float>);
  double sum = 0.0;
  for (const float s : scores) {
    EXPECT_GE(s, 0.0f);
    EXPECT_LE(s, 1.0f);
    sum += s;
  }
  EXPECT_NEAR(sum, 1.0, (n + 40) * kU);  // each window row's probabilities sum to one
}

TEST(WindowScores, GqaAveragingAndCausalMaskMatchDoubleReference) {
  const size_t n = 200, d = 64, n_group = 4, w = 24;
  const auto keys = random_normal(n * d, 2);
  const auto queries = random_normal(n_group * w * d, 3, 1.5f);
  for (const bool causal : {true, false}) {
    std::vector<float> scores(n);
    std::vector<double> ref(n);
    window_scores(scores.data(), keys.data(), n, d, queries.data(), n_group, w, causal);
    window_scores_ref(ref.data(), keys.data(), n, d, queries.data(), n_group, w, causal);
    const double rel =
        score_bound(keys.data(), n, d, queries.data(), n_group * w) + (n_group * w + 2) * kU;
    for (size_t j = 0; j < n; ++j) {
      ASSERT_LE(std::fabs(scores[j] - ref[j]), rel * ref[j] + 1e-30) << "j=" << j;
    }
  }
}

TEST(WindowScores, ManyColumnTilesAndRowChunksMatchDoubleReference) {
  // n_rows spans three 1024-column tiles and 4 * 40 = 160 query rows span two 128-row chunks; a
  // window as long as the keys puts causal boundaries inside every tile.
  struct Case {
    size_t n, n_group, w;
  };
  const size_t d = 16;
  for (const Case c : {Case{2100, 4, 40}, Case{1500, 1, 1500}}) {
    const auto keys = random_normal(c.n * d, 20);
    const auto queries = random_normal(c.n_group * c.w * d, 21, 2.0f);
    for (const bool causal : {true, false}) {
      std::vector<float> scores(c.n);
      std::vector<double> ref(c.n);
      window_scores(scores.data(), keys.data(), c.n, d, queries.data(), c.n_group, c.w, causal);
      window_scores_ref(ref.data(), keys.data(), c.n, d, queries.data(), c.n_group, c.w, causal);
      const double rel = score_bound(keys.data(), c.n, d, queries.data(), c.n_group * c.w) +
                         static_cast<double>(c.n_group * c.w + 2) * kU;
      for (size_t j = 0; j < c.n; ++j) {
        ASSERT_LE(std::fabs(scores[j] - ref[j]), rel * ref[j] + 1e-30) << "j=" << j;
      }
    }
  }
}

TEST(WindowScores, ReferenceAveragesPerHeadSoftmaxes) {
  // Independent check of the reference itself: GQA score = mean over heads of per-head scores.
  const size_t n = 50, d = 8, n_group = 3, w = 5;
  const auto keys = random_normal(n * d, 4);
  const auto queries = random_normal(n_group * w * d, 5);
  std::vector<double> all(n), one(n), mean(n, 0.0);
  window_scores_ref(all.data(), keys.data(), n, d, queries.data(), n_group, w, true);
  for (size_t g = 0; g < n_group; ++g) {
    window_scores_ref(one.data(), keys.data(), n, d, queries.data() + g * w * d, 1, w, true);
    for (size_t j = 0; j < n; ++j) mean[j] += one[j] / n_group;
  }
  for (size_t j = 0; j < n; ++j) EXPECT_NEAR(all[j], mean[j], 1e-15);
}

TEST(WindowScores, CausalMaskHidesKeysAfterEachWindowRow) {
  // With a window covering every row, key n-1 is seen only by the last row: its score is that
  // row's probability divided by the window length.
  const size_t n = 6, d = 4;
  const auto keys = random_normal(n * d, 6);
  std::vector<float> causal(n), open(n);
  proxy_window_scores(causal.data(), keys.data(), n, d, n, true);
  proxy_window_scores(open.data(), keys.data(), n, d, n, false);
  std::vector<double> ref(n);
  window_scores_ref(ref.data(), keys.data(), n, d, keys.data(), 1, n, true);
  // Row 0 sees only key 0 (probability 1); contributes 1/n to key 0.
  EXPECT_GE(causal[0], 1.0f / n - 1e-6f);
  for (size_t j = 0; j < n; ++j) EXPECT_NEAR(causal[j], ref[j], 1e-6);
  EXPECT_NE(causal, open);
}

TEST(WindowScores, WindowIsClampedToTheRows) {
  const size_t n = 5, d = 8;
  const auto keys = random_normal(n * d, 7);
  std::vector<float> big(n), exact(n);
  proxy_window_scores(big.data(), keys.data(), n, d, 64, true);
  proxy_window_scores(exact.data(), keys.data(), n, d, n, true);
  EXPECT_EQ(big, exact);
  // True queries: a 10-row window over 5 keys uses its last 5 rows.
  const auto queries = random_normal(10 * d, 8);
  std::vector<float> clamped(n), last(n);
  window_scores(clamped.data(), keys.data(), n, d, queries.data(), 1, 10, true);
  window_scores(last.data(), keys.data(), n, d, queries.data() + 5 * d, 1, 5, true);
  EXPECT_EQ(clamped, last);
}

TEST(WindowScores, ProxyModeUsesTheLastKeysAsQueries) {
  const size_t n = 120, d = 16, w = 8;
  const auto keys = random_normal(n * d, 9);
  std::vector<float> proxy(n), explicit_q(n);
  proxy_window_scores(proxy.data(), keys.data(), n, d, w, true);
  window_scores(explicit_q.data(), keys.data(), n, d, keys.data() + (n - w) * d, 1, w, true);
  EXPECT_EQ(proxy, explicit_q);
}

TEST(WindowScores, ProxyCandidatesAttendOnlyBeforeTheWindow) {
  // The last w keys are the queries; their softmax runs over the n - w keys before the window
  // (against the double reference over those keys alone), and the window's rows score 1.
  const size_t n = 150, d = 16, w = 12;
  const auto keys = random_normal(n * d, 21);
  std::vector<float> got(n);
  proxy_candidate_scores(got.data(), keys.data(), n, d, w);
  std::vector<double> ref(n - w);
  window_scores_ref(ref.data(), keys.data(), n - w, d, keys.data() + (n - w) * d, 1, w, false);
  const double rel =
      score_bound(keys.data(), n - w, d, keys.data() + (n - w) * d, w) + (w + 2) * kU;
  double sum = 0.0;
  for (size_t j = 0; j < n - w; ++j) {
    EXPECT_NEAR(got[j], ref[j], rel * ref[j] + 1e-30) << "row " << j;
    sum += got[j];
  }
  EXPECT_NEAR(sum, 1.0, (n + 40) * kU);  // the candidates' scores still sum to one
  for (size_t j = n - w; j < n; ++j) EXPECT_EQ(got[j], 1.0f) << "window row " << j;
  // With no candidate outside the window the plain proxy scores remain.
  std::vector<float> small(w), plain_small(w);
  proxy_candidate_scores(small.data(), keys.data(), w, d, w);
  proxy_window_scores(plain_small.data(), keys.data(), w, d, w, true);
  EXPECT_EQ(small, plain_small);
  EXPECT_THROW(proxy_candidate_scores(got.data(), keys.data(), n, d, 0), std::invalid_argument);
}

// snapkv_candidate_scores reading keys through SelectionInput::key_rows (tiles of at most 1024
// rows, in order, within [0, n_rows)) gives the scores of the same keys in memory, to the bit:
// true queries (causal) and proxy keys, over several tiles and within one.
TEST(WindowScores, CandidateScoresFromKeyTilesEqualKeysInMemory) {
  const size_t d = 8, n_group = 2, w = 5;
  CacheConfig config = test::plain_config();
  config.window = w;
  for (const size_t n : {size_t{3}, size_t{700}, size_t{2500}}) {
    const auto keys = random_normal(n * d, 40, 0.7f);
    const auto queries = random_normal(n_group * w * d, 41, 0.7f);
    size_t calls = 0, rows_read = 0;
    const KeyRowReader reader = [&](float* out, size_t begin, size_t end) {
      ASSERT_LT(begin, end);
      ASSERT_LE(end, n);
      ASSERT_LE(end - begin, size_t{1024});
      ++calls;
      rows_read += end - begin;
      std::copy(keys.begin() + begin * d, keys.begin() + end * d, out);
    };
    for (const bool true_queries : {true, false}) {
      SelectionInput in;
      in.head_dim = d;
      in.n_rows = n;
      in.keys = keys.data();
      if (true_queries) {
        in.queries = queries.data();
        in.n_group = n_group;
        in.n_window = w;
      }
      const std::vector<float> want = snapkv_candidate_scores(in, config);
      in.keys = nullptr;
      in.key_rows = &reader;
      calls = rows_read = 0;
      const std::vector<float> got = snapkv_candidate_scores(in, config);
      EXPECT_EQ(got, want) << "n " << n << (true_queries ? " queries" : " proxy");
      EXPECT_GE(calls, (n + 1023) / 1024);
      EXPECT_LE(rows_read, n + w) << "each key read once (the proxy window twice)";
    }
  }
}

TEST(WindowScores, RejectsEmptyShapes) {
  std::vector<float> keys(8), out(2);
  EXPECT_THROW(window_scores(out.data(), keys.data(), 0, 4, keys.data(), 1, 1, true),
               std::invalid_argument);
  EXPECT_THROW(window_scores(out.data(), keys.data(), 2, 4, keys.data(), 0, 1, true),
               std::invalid_argument);
  EXPECT_THROW(proxy_window_scores(out.data(), keys.data(), 2, 4, 0, true), std::invalid_argument);
}

TEST(PoolScores, DispatchesToTheOpsKernels) {
  const auto in = random_normal(40, 10);
  std::vector<float> got(40), want(40);
  pool_scores(got.data(), in.data(), 40, PoolKind::none, 7);
  EXPECT_EQ(got, in);
  pool_scores(got.data(), in.data(), 40, PoolKind::max, 7);
  max_pool1d(want.data(), in.data(), 40, 7);
  EXPECT_EQ(got, want);
  pool_scores(got.data(), in.data(), 40, PoolKind::avg, 5);
  avg_pool1d(want.data(), in.data(), 40, 5);
  EXPECT_EQ(got, want);
  pool_scores(got.data(), in.data(), 40, PoolKind::causal_max, 9);
  causal_max_pool1d(want.data(), in.data(), 40, 9);
  EXPECT_EQ(got, want);
  EXPECT_THROW(pool_scores(got.data(), in.data(), 40, PoolKind::max, 6), std::invalid_argument);
  EXPECT_THROW(pool_scores(got.data(), in.data(), 40, PoolKind::causal_max, 6),
               std::invalid_argument);
}

// The whole scoring step with causal_max pooling against a plain double pipeline: the reference
// window scores, then for each row the largest of itself and the kernel - 1 rows before it. The
// max of values each within rel * ref of the reference is within rel * (pooled reference).
TEST(CandidateScores, CausalMaxPoolingMatchesDoubleReference) {
  const size_t n = 90, d = 16, n_group = 2, w = 8;
  const auto keys = random_normal(n * d, 41);
  const auto queries = random_normal(n_group * w * d, 42, 1.5f);
  std::vector<double> ref(n);
  window_scores_ref(ref.data(), keys.data(), n, d, queries.data(), n_group, w, true);
  const double rel =
      score_bound(keys.data(), n, d, queries.data(), n_group * w) + (n_group * w + 2) * kU;
  SelectionInput in;
  in.head_dim = d;
  in.n_rows = n;
  in.keys = keys.data();
  in.queries = queries.data();
  in.n_group = n_group;
  in.n_window = w;
  CacheConfig config = test::plain_config();
  config.window = w;
  config.pool = PoolKind::causal_max;
  for (const size_t kernel : {1u, 7u, 15u, 31u}) {
    config.kernel = kernel;
    const std::vector<float> got = snapkv_candidate_scores(in, config);
    ASSERT_EQ(got.size(), n);
    for (size_t j = 0; j < n; ++j) {
      double want = ref[j];
      for (size_t i = j + 1 >= kernel ? j + 1 - kernel : 0; i < j; ++i)
        want = std::max(want, ref[i]);
      ASSERT_LE(std::fabs(got[j] - want), rel * want + 1e-30) << "kernel " << kernel << " j " << j;
    }
  }
}

bool strictly_increasing(const std::vector<uint32_t>& v) {
  return std::adjacent_find(v.begin(), v.end(), std::greater_equal<uint32_t>()) == v.end();
}

TEST(SelectRows, SizeIsMinOfBudgetAndRowsAndOrderAscending) {
  const auto scores = random_normal(100, 11);
  for (const size_t budget : {4u, 10u, 57u, 100u, 150u}) {
    const auto keep = select_rows(scores.data(), 100, budget, 4, 0);
    EXPECT_EQ(keep.size(), std::min<size_t>(budget, 100));
    EXPECT_TRUE(strictly_increasing(keep));
  }
}

TEST(SelectRows, SinksWinWithZeroScores) {
  std::vector<float> scores(64, 0.5f);
  for (size_t i = 0; i < 4; ++i) scores[i] = 0.0f;
  const auto keep = select_rows(scores.data(), 64, 10, 4, 0);
  for (uint32_t i = 0; i < 4; ++i) EXPECT_EQ(keep[i], i);
  std::vector<float> zeros(64, 0.0f);
  const auto keep0 = select_rows(zeros.data(), 64, 10, 4, 0);
  // All zeros: sinks, then ties resolved to the earliest rows.
  for (uint32_t i = 0; i < 10; ++i) EXPECT_EQ(keep0[i], i);
}

TEST(SelectRows, PlantedHighScoresAreKeptAndForcedTailToo) {
  std::vector<float> scores(200);
  for (size_t i = 0; i < scores.size(); ++i) scores[i] = 0.001f * static_cast<float>(i % 7);
  const std::vector<uint32_t> planted = {17, 50, 51, 120, 150};
  for (const uint32_t p : planted) scores[p] = 1.0f;
  auto keep = select_rows(scores.data(), 200, 9, 4, 0);
  EXPECT_EQ(keep, (std::vector<uint32_t>{0, 1, 2, 3, 17, 50, 51, 120, 150}));
  keep = select_rows(scores.data(), 200, 12, 4, 3);
  EXPECT_EQ(keep, (std::vector<uint32_t>{0, 1, 2, 3, 17, 50, 51, 120, 150, 197, 198, 199}));
  // One slot fewer: the latest planted row loses (ties go to the earlier rows).
  keep = select_rows(scores.data(), 200, 11, 4, 3);
  EXPECT_EQ(keep, (std::vector<uint32_t>{0, 1, 2, 3, 17, 50, 51, 120, 197, 198, 199}));
}

TEST(SelectRows, BudgetAtLeastRowsKeepsAllAndBadInputsThrow) {
  const auto scores = random_normal(20, 12);
  const auto keep = select_rows(scores.data(), 20, 20, 4, 8);
  std::vector<uint32_t> all(20);
  std::iota(all.begin(), all.end(), 0u);
  EXPECT_EQ(keep, all);
  EXPECT_THROW(select_rows(scores.data(), 20, 10, 4, 8), std::invalid_argument);
  std::vector<float> with_nan = scores;
  with_nan[7] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_THROW(select_rows(with_nan.data(), 20, 10, 4, 0), std::invalid_argument);
}

TEST(CandidateScores, QueriesOrProxyThenPooling) {
  const size_t n = 90, d = 16;
  const auto keys = random_normal(n * d, 13);
  const auto queries = random_normal(2 * 40 * d, 14);  // [n_group 2][w 40][d]
  CacheConfig config = test::plain_config();
  config.window = 8;
  SelectionInput in;
  in.head_dim = d;
  in.n_rows = n;
  in.keys = keys.data();
  // Proxy: no queries.
  std::vector<float> want(n);
  proxy_candidate_scores(want.data(), keys.data(), n, d, 8);
  EXPECT_EQ(snapkv_candidate_scores(in, config), want);
  // True queries: only the last config.window = 8 of the 40 rows of each head are used.
  in.queries = queries.data();
  in.n_group = 2;
  in.n_window = 40;
  std::vector<float> last8(2 * 8 * d);
  for (size_t g = 0; g < 2; ++g) {
    std::copy_n(queries.data() + (g * 40 + 32) * d, 8 * d, last8.data() + g * 8 * d);
  }
  window_scores(want.data(), keys.data(), n, d, last8.data(), 2, 8, true);
  const auto raw = snapkv_candidate_scores(in, config);
  EXPECT_EQ(raw, want);
  config.pool = PoolKind::avg;
  config.kernel = 5;
  std::vector<float> pooled(n);
  avg_pool1d(pooled.data(), raw.data(), n, 5);
  EXPECT_EQ(snapkv_candidate_scores(in, config), pooled);
}

}  // namespace
}  // namespace snapkv
