// Budget allocation (kv/core/allocation.h): PyramidKV layer budgets (exact total over layers,
// non-increasing with depth, floors and the token cap held) and AdaKV selection (layer total,
// per-head floors, sinks and window kept, order kept, the rest strictly by score across heads).
#include "snapkv/kv/core/allocation.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>
#include <stdexcept>
#include <vector>

#include "kv/kv_test_util.h"
#include "snapkv/kv/core/snapkv_score.h"

namespace snapkv {
namespace {

CacheConfig pyramid_config(size_t budget, double beta, bool keep_window) {
  CacheConfig c;
  c.policy = PolicyKind::snapkv;
  c.layer_allocation = LayerAllocation::pyramid;
  c.budget = budget;
  c.pyramid_beta = beta;
  c.keep_window = keep_window;
  c.window = 8;
  c.n_sink = 4;
  return c;
}

TEST(PyramidBudgets, SameTotalDecreasingWithDepthFloorsAndCapHeld) {
  for (const size_t layers : {2u, 4u, 7u, 28u}) {
    for (const size_t budget : {13u, 64u, 100u, 409u}) {
      for (const double beta : {1.0, 3.0, 20.0}) {
        for (const bool keep_window : {false, true}) {
          for (const size_t tokens : {budget + 1, budget + budget / 2, 4 * budget}) {
            const CacheConfig c = pyramid_config(budget, beta, keep_window);
            const std::vector<size_t> b = layer_budgets(c, layers, tokens);
            ASSERT_EQ(b.size(), layers);
            EXPECT_EQ(std::accumulate(b.begin(), b.end(), size_t{0}), layers * budget)
                << layers << " " << budget << " " << beta << " " << tokens;
            for (size_t l = 0; l < layers; ++l) {
              EXPECT_GE(b[l], allocation_floor(c));
              EXPECT_LE(b[l], tokens);
              if (l > 0) {
                EXPECT_LE(b[l], b[l - 1]) << "layer " << l;
              }
            }
            // beta > 1 makes a real pyramid (unless the floor or the cap flattens it).
            if (beta == 20.0 && budget >= 64 && tokens >= 2 * budget) {
              EXPECT_GT(b.front(), b.back());
              EXPECT_LE(b.back(), std::max<size_t>(budget / 20 + 1, allocation_floor(c)));
            }
          }
        }
      }
    }
  }
}

TEST(PyramidBudgets, UniformOneLayerOrNothingToEvictGiveTheBudget) {
  CacheConfig c = pyramid_config(50, 20.0, false);
  EXPECT_EQ(layer_budgets(c, 1, 1000), std::vector<size_t>{50});
  EXPECT_EQ(layer_budgets(c, 3, 50), (std::vector<size_t>{50, 50, 50}));
  c.layer_allocation = LayerAllocation::uniform;
  EXPECT_EQ(layer_budgets(c, 3, 1000), (std::vector<size_t>{50, 50, 50}));
  EXPECT_THROW(layer_budgets(c, 0, 10), std::invalid_argument);
}

TEST(PyramidBudgets, FloorHoldsTheWindowWithOrWithoutKeepWindow) {
  // pyramid forces the window (keeps_window), so the deepest layer keeps sinks + window = 12.
  for (const bool keep_window : {false, true}) {
    const CacheConfig c = pyramid_config(64, 20.0, keep_window);
    EXPECT_TRUE(keeps_window(c));
    EXPECT_EQ(allocation_floor(c), 12u);
    EXPECT_EQ(kept_window_rows(c, 100), 8u);
    EXPECT_EQ(layer_budgets(c, 8, 1000).back(), 12u);
  }
  CacheConfig uniform = pyramid_config(64, 20.0, false);
  uniform.layer_allocation = LayerAllocation::uniform;
  EXPECT_FALSE(keeps_window(uniform));
  EXPECT_EQ(allocation_floor(uniform), 4u);
  EXPECT_EQ(kept_window_rows(uniform, 100), 0u);
}

CacheConfig ada_config(size_t budget, bool keep_window, double floor) {
  CacheConfig c;
  c.policy = PolicyKind::snapkv;
  c.head_allocation = HeadAllocation::ada;
  c.budget = budget;
  c.keep_window = keep_window;
  c.window = 5;
  c.n_sink = 3;
  c.ada_floor = floor;
  return c;
}

// Peaked scores on head 0 (a few rows matter), flat on the others.
std::vector<std::vector<float>> skewed_scores(const std::vector<size_t>& rows, uint64_t seed) {
  std::vector<std::vector<float>> s;
  for (size_t h = 0; h < rows.size(); ++h) {
    std::vector<float> x = test::random_normal(rows[h], seed + h, 0.01f);
    for (float& v : x) v = std::fabs(v) + (h == 0 ? 0.0f : 0.05f);
    if (h == 0) {
      for (size_t i = 0; i < rows[h]; i += 7) x[i] += 1.0f;
    }
    s.push_back(std::move(x));
  }
  return s;
}

TEST(AdaSelect, LayerTotalFloorsSinksWindowOrderAndScoreOrder) {
  for (const bool keep_window : {false, true}) {
    for (const double floor : {0.0, 0.2, 1.0}) {
      for (const auto& rows : {std::vector<size_t>{60, 60, 60, 60}, std::vector<size_t>{90, 12, 45},
                               std::vector<size_t>{30, 0, 80}}) {
        const size_t budget = 20;
        const CacheConfig c = ada_config(budget, keep_window, floor);
        const auto scores = skewed_scores(rows, 7);
        const auto keep = ada_select(scores, budget, c);
        ASSERT_EQ(keep.size(), rows.size());
        const size_t total_rows = std::accumulate(rows.begin(), rows.end(), size_t{0});
        size_t total = 0;
        const auto floor_rows = static_cast<size_t>(std::ceil(floor * budget - 1e-9));
        float min_optional_kept = 1e30f, max_dropped = -1e30f;
        for (size_t h = 0; h < rows.size(); ++h) {
          const size_t n = rows[h];
          total += keep[h].size();
          for (size_t i = 1; i < keep[h].size(); ++i) ASSERT_LT(keep[h][i - 1], keep[h][i]);
          if (n > 0) {
            ASSERT_LT(keep[h].back(), n);
          }
          const std::set<uint32_t> kept(keep[h].begin(), keep[h].end());
          for (uint32_t s = 0; s < std::min<size_t>(c.n_sink, n); ++s) EXPECT_TRUE(kept.count(s));
          const size_t tail = kept_window_rows(c, n);
          for (size_t i = n - tail; i < n; ++i) EXPECT_TRUE(kept.count(static_cast<uint32_t>(i)));
          EXPECT_GE(keep[h].size(), std::min(n, floor_rows)) << "head " << h;
          // The guaranteed rows of this head, as ada_select defines them.
          const size_t forced = std::min(n, std::min(c.n_sink, n) + tail);
          const size_t g = std::min(n, std::max(forced, floor_rows));
          const auto guaranteed = n == 0 ? std::vector<uint32_t>{}
                                         : select_rows(scores[h].data(), n, g, c.n_sink, tail);
          const std::set<uint32_t> gset(guaranteed.begin(), guaranteed.end());
          for (size_t i = 0; i < n; ++i) {
            if (gset.count(static_cast<uint32_t>(i))) {
              EXPECT_TRUE(kept.count(static_cast<uint32_t>(i)));
            } else if (kept.count(static_cast<uint32_t>(i))) {
              min_optional_kept = std::min(min_optional_kept, scores[h][i]);
            } else {
              max_dropped = std::max(max_dropped, scores[h][i]);
            }
          }
        }
        EXPECT_EQ(total, std::min(rows.size() * budget, total_rows));
        EXPECT_GE(min_optional_kept, max_dropped);  // the free slots went to the best rows
      }
    }
  }
}

TEST(AdaSelect, GivesPeakedAndFlatHeadsDifferentBudgets) {
  const size_t budget = 20;
  const CacheConfig c = ada_config(budget, false, 0.2);
  const auto scores = skewed_scores({100, 100, 100}, 3);
  const auto keep = ada_select(scores, budget, c);
  // Head 0's 15 peaks (>= 1) outrank every flat row (about 0.05), its other rows (about 0.01)
  // rank below them: head 0 keeps its sinks and peaks, the flat heads share what is left.
  EXPECT_EQ(keep[0].size(), 3u + 14u);  // rows 0, 1, 2 and the peaks 7, 14, ..., 98
  EXPECT_NE(keep[0].size(), keep[1].size());
  EXPECT_EQ(keep[0].size() + keep[1].size() + keep[2].size(), 3 * budget);
}

TEST(AdaSelect, RejectsABudgetBelowTheFloorAndNaN) {
  CacheConfig c = ada_config(20, true, 0.2);
  const auto scores = skewed_scores({30, 30}, 1);
  EXPECT_THROW(ada_select(scores, 7, c), std::invalid_argument);  // < n_sink + window = 8
  auto bad = scores;
  bad[1][4] = std::nanf("");
  EXPECT_THROW(ada_select(bad, 20, c), std::invalid_argument);
}

}  // namespace
}  // namespace snapkv
