// Policy kvzip (selection from externally supplied scores, LayerCache::compress_with_scores) and
// the decode-time budget (CacheConfig::decode_budget / decode_interval): selection equals
// select_rows on the supplied scores, kept rows are bit-identical to what was stored, the decode
// budget is never exceeded across re-selection boundaries, positions stay absolute, and every
// misuse is a named std::invalid_argument that leaves the cache unchanged.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "kv/kv_test_util.h"
#include "snapkv/kv/core/layer_cache.h"
#include "snapkv/kv/core/snapkv_score.h"

namespace snapkv {
namespace {

using test::random_normal;
using test::view;

constexpr CacheDims kDims{4, 2, 8};  // 4 query heads, 2 KV heads, head_dim 8

CacheConfig kvzip_config(size_t budget) {
  CacheConfig c;
  c.policy = PolicyKind::kvzip;
  c.chunk_mode = ChunkMode::end_of_prompt;
  c.budget = budget;
  c.window = 4;
  c.n_sink = 2;
  c.keep_window = true;
  c.pool = PoolKind::none;  // the tests hold the selection to the raw supplied scores
  c.kernel = 1;
  return c;
}

// Prefills n tokens in one update; returns the keys it stored [n_kv][n][d] (values use seed + 1).
std::vector<float> prefill(LayerCache& cache, size_t n, uint64_t seed) {
  const auto k = random_normal(kDims.n_kv_heads * n * kDims.head_dim, seed);
  const auto v = random_normal(kDims.n_kv_heads * n * kDims.head_dim, seed + 1);
  const auto q = random_normal(kDims.n_heads * 4 * kDims.head_dim, seed + 2);
  const Tensor3 qw = view(q, kDims.n_heads, 4, kDims.head_dim);
  cache.update(view(k, kDims.n_kv_heads, n, kDims.head_dim),
               view(v, kDims.n_kv_heads, n, kDims.head_dim), &qw, UpdateKind::prefill);
  return k;
}

struct Snapshot {
  std::vector<std::vector<float>> keys, values;  // [n_kv][size][d]
  std::vector<std::vector<int64_t>> positions;
};

Snapshot snapshot(const LayerCache& cache) {
  Snapshot s;
  for (size_t h = 0; h < cache.dims().n_kv_heads; ++h) {
    s.keys.emplace_back(cache.size() * cache.dims().head_dim);
    s.values.emplace_back(cache.size() * cache.dims().head_dim);
    cache.read_keys(h, s.keys.back().data());
    cache.read_values(h, s.values.back().data());
    const auto p = cache.positions(h);
    s.positions.emplace_back(p.begin(), p.end());
  }
  return s;
}

TEST(Kvzip, SelectsTopSuppliedScoresPerHeadWithSinksAndWindow) {
  const size_t n = 40, budget = 16;
  LayerCache cache(kDims, kvzip_config(budget));
  prefill(cache, n, 11);
  ASSERT_TRUE(cache.prompt_open());
  const Snapshot before = snapshot(cache);
  const std::vector<float> scores = random_normal(kDims.n_kv_heads * n, 99);
  cache.compress_with_scores(scores);
  EXPECT_FALSE(cache.prompt_open());
  EXPECT_EQ(cache.size(), budget);
  EXPECT_EQ(cache.offset(), n);
  for (size_t h = 0; h < kDims.n_kv_heads; ++h) {
    const std::vector<uint32_t> expected = select_rows(scores.data() + h * n, n, budget, 2, 4);
    const auto pos = cache.positions(h);
    ASSERT_EQ(pos.size(), expected.size());
    std::vector<float> keys(budget * kDims.head_dim), values(budget * kDims.head_dim);
    cache.read_keys(h, keys.data());
    cache.read_values(h, values.data());
    for (size_t i = 0; i < expected.size(); ++i) {
      EXPECT_EQ(pos[i], static_cast<int64_t>(expected[i])) << "head " << h << " row " << i;
      // The selection only drops rows: the kept ones are bit-identical to what was stored.
      EXPECT_EQ(0, std::memcmp(keys.data() + i * kDims.head_dim,
                               before.keys[h].data() + expected[i] * kDims.head_dim,
                               kDims.head_dim * sizeof(float)));
      EXPECT_EQ(0, std::memcmp(values.data() + i * kDims.head_dim,
                               before.values[h].data() + expected[i] * kDims.head_dim,
                               kDims.head_dim * sizeof(float)));
    }
    // Sinks and the window are forced whatever their scores.
    EXPECT_EQ(pos[0], 0);
    EXPECT_EQ(pos[1], 1);
    EXPECT_EQ(pos.back(), static_cast<int64_t>(n - 1));
    EXPECT_EQ(cache.last_scores(h).size(), n);
  }
  EXPECT_EQ(cache.compressions(), 1u);
}

TEST(Kvzip, PoolsSuppliedScoresAsConfigured) {
  const size_t n = 30;
  CacheConfig config = kvzip_config(12);
  config.pool = PoolKind::max;
  config.kernel = 5;
  LayerCache cache(kDims, config);
  prefill(cache, n, 3);
  std::vector<float> scores(kDims.n_kv_heads * n, 0.0f);
  scores[15] = 1.0f;  // head 0: one peak; max pooling spreads it over rows 13..17
  cache.compress_with_scores(scores);
  const auto pos = cache.positions(0);
  for (int64_t p = 13; p <= 17; ++p) {
    EXPECT_NE(std::find(pos.begin(), pos.end(), p), pos.end()) << "row " << p;
  }
}

TEST(Kvzip, MisuseIsANamedErrorAndLeavesTheCacheUnchanged) {
  const size_t n = 20;
  LayerCache cache(kDims, kvzip_config(10));
  prefill(cache, n, 5);
  const Snapshot before = snapshot(cache);
  std::vector<float> scores(kDims.n_kv_heads * n, 0.5f);
  const std::vector<float> short_scores(n, 0.5f);
  EXPECT_THROW(cache.compress_with_scores(short_scores), std::invalid_argument);
  scores[7] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_THROW(cache.compress_with_scores(scores), std::invalid_argument);
  scores[7] = std::numeric_limits<float>::infinity();
  EXPECT_THROW(cache.compress_with_scores(scores), std::invalid_argument);
  // kvzip cannot score by itself: ending the prompt without scores is refused.
  EXPECT_THROW(cache.end_prompt(), std::invalid_argument);
  // Nor can generation start on an open kvzip prompt (the decode step would end it).
  const std::vector<float> row(kDims.n_kv_heads * kDims.head_dim, 0.25f);
  EXPECT_THROW(
      cache.update(view(row, kDims.n_kv_heads, 1, kDims.head_dim),
                   view(row, kDims.n_kv_heads, 1, kDims.head_dim), nullptr, UpdateKind::decode),
      std::invalid_argument);
  EXPECT_EQ(cache.offset(), n);
  const Snapshot after = snapshot(cache);
  EXPECT_EQ(after.positions, before.positions);
  EXPECT_EQ(after.keys, before.keys);
  EXPECT_TRUE(cache.prompt_open());

  // Other policies do not take external scores; a closed prompt cannot be compressed again.
  CacheConfig snap = kvzip_config(10);
  snap.policy = PolicyKind::snapkv;
  LayerCache other(kDims, snap);
  prefill(other, n, 5);
  EXPECT_THROW(other.compress_with_scores(std::vector<float>(kDims.n_kv_heads * n, 0.5f)),
               std::invalid_argument);
  scores[7] = 0.5f;
  cache.compress_with_scores(scores);
  EXPECT_THROW(cache.compress_with_scores(scores), std::invalid_argument);
}

TEST(Kvzip, BadConfigsAreNamedErrors) {
  CacheConfig c = kvzip_config(16);
  c.chunk_mode = ChunkMode::every_chunk;
  EXPECT_THROW(c.validate(), std::invalid_argument);
  EXPECT_EQ(parse_policy("kvzip"), PolicyKind::kvzip);
  EXPECT_EQ(to_string(PolicyKind::kvzip), "kvzip");

  CacheConfig d;
  d.policy = PolicyKind::snapkv;
  d.n_sink = 4;
  d.window = 8;
  d.decode_budget = 32;
  d.decode_interval = 0;
  EXPECT_THROW(d.validate(), std::invalid_argument);
  d.decode_interval = 8;
  d.keep_window = true;
  d.decode_budget = 4 + 8 + 8 - 1;  // one short of sinks + interval + window
  EXPECT_THROW(d.validate(), std::invalid_argument);
  d.decode_budget = 4 + 8 + 8;
  EXPECT_NO_THROW(d.validate());
  d.policy = PolicyKind::full;
  EXPECT_THROW(d.validate(), std::invalid_argument);
}

// Decode-time budget: one decode step at a time with (or without) the step's queries.
void check_decode_budget(PolicyKind policy, bool keep_window, bool pass_queries) {
  CacheConfig c;
  c.policy = policy;
  c.chunk_mode = ChunkMode::end_of_prompt;
  c.budget = 24;
  c.window = 4;
  c.n_sink = 2;
  c.keep_window = keep_window;
  c.decode_budget = 20;
  c.decode_interval = 5;
  LayerCache cache(kDims, c);
  const size_t n = 40;
  if (policy == PolicyKind::kvzip) {
    prefill(cache, n, 21);
    cache.compress_with_scores(random_normal(kDims.n_kv_heads * n, 22));
  } else {
    prefill(cache, n, 21);
    cache.end_prompt();
  }
  EXPECT_EQ(cache.size(), 24u);
  const size_t target = 20 - 5 + 1;
  size_t expected_reselections = 0, size = cache.size();
  for (size_t step = 0; step < 37; ++step) {
    const auto k = random_normal(kDims.n_kv_heads * kDims.head_dim, 1000 + step);
    const auto v = random_normal(kDims.n_kv_heads * kDims.head_dim, 2000 + step);
    const auto q = random_normal(kDims.n_heads * kDims.head_dim, 3000 + step);
    const Tensor3 qw = view(q, kDims.n_heads, 1, kDims.head_dim);
    cache.update(view(k, kDims.n_kv_heads, 1, kDims.head_dim),
                 view(v, kDims.n_kv_heads, 1, kDims.head_dim), pass_queries ? &qw : nullptr,
                 UpdateKind::decode);
    // The model of the rule: append, and re-select down to the target when over budget.
    ++size;
    if (size > c.decode_budget) {
      size = target;
      ++expected_reselections;
    }
    ASSERT_LE(cache.size(), c.decode_budget) << "step " << step;
    ASSERT_EQ(cache.size(), size) << "step " << step;
    ASSERT_EQ(cache.decode_reselections(), expected_reselections) << "step " << step;
    ASSERT_EQ(cache.offset(), n + step + 1);
    for (size_t h = 0; h < kDims.n_kv_heads; ++h) {
      const auto pos = cache.positions(h);
      EXPECT_EQ(pos[0], 0);  // sinks survive every re-selection
      EXPECT_EQ(pos[1], 1);
      // Absolute and increasing, never past the newest token.
      for (size_t i = 1; i < pos.size(); ++i) ASSERT_LT(pos[i - 1], pos[i]);
      EXPECT_LE(pos.back(), static_cast<int64_t>(cache.offset() - 1));
      if (keep_window) {  // the most recent window rows survive every re-selection
        for (size_t i = 0; i < c.window; ++i) {
          EXPECT_EQ(pos[pos.size() - 1 - i], static_cast<int64_t>(cache.offset() - 1 - i));
        }
      }
    }
  }
  // 24 rows + 37 steps: over 20 at the first step (24 + 1), then every 5 steps.
  EXPECT_EQ(expected_reselections, 1u + (37 - 1) / 5);
}

TEST(DecodeBudget, NeverExceededAcrossIntervalsForEveryPolicy) {
  for (PolicyKind p : {PolicyKind::snapkv, PolicyKind::streaming, PolicyKind::knorm,
                       PolicyKind::random, PolicyKind::chunkkv, PolicyKind::kvzip}) {
    for (bool keep_window : {false, true}) {
      for (bool queries : {false, true}) {
        SCOPED_TRACE(std::string(to_string(p)) + (keep_window ? " keep_window" : "") +
                     (queries ? " queries" : " proxy"));
        check_decode_budget(p, keep_window, queries);
      }
    }
  }
}

TEST(DecodeBudget, ReselectionKeepsRowsBitIdenticalAndUsesRecentQueries) {
  CacheConfig c;
  c.policy = PolicyKind::snapkv;
  c.query_source = QuerySource::queries;
  c.chunk_mode = ChunkMode::end_of_prompt;
  c.budget = 64;
  c.window = 4;
  c.n_sink = 1;
  c.decode_budget = 12;
  c.decode_interval = 3;
  LayerCache cache(kDims, c);
  prefill(cache, 10, 7);  // under budget: nothing evicted at the prompt's end
  cache.end_prompt();
  Snapshot last = snapshot(cache);
  for (size_t step = 0; step < 8; ++step) {
    const auto k = random_normal(kDims.n_kv_heads * kDims.head_dim, 500 + step);
    const auto v = random_normal(kDims.n_kv_heads * kDims.head_dim, 600 + step);
    // Queries aligned with the key of prompt row 5 of each KV head: that row must survive.
    std::vector<float> q(kDims.n_heads * kDims.head_dim);
    const size_t group = kDims.n_heads / kDims.n_kv_heads;
    for (size_t head = 0; head < kDims.n_heads; ++head) {
      const size_t kv = head / group;
      for (size_t d = 0; d < kDims.head_dim; ++d) {
        q[head * kDims.head_dim + d] = 8.0f * last.keys[kv][5 * kDims.head_dim + d];
      }
    }
    const Tensor3 qw = view(q, kDims.n_heads, 1, kDims.head_dim);
    const Snapshot before = snapshot(cache);
    cache.update(view(k, kDims.n_kv_heads, 1, kDims.head_dim),
                 view(v, kDims.n_kv_heads, 1, kDims.head_dim), &qw, UpdateKind::decode);
    const Snapshot after = snapshot(cache);
    for (size_t h = 0; h < kDims.n_kv_heads; ++h) {
      // Every kept row is the row stored at that position before, bit for bit.
      for (size_t i = 0; i < after.positions[h].size(); ++i) {
        const int64_t p = after.positions[h][i];
        const auto it = std::find(before.positions[h].begin(), before.positions[h].end(), p);
        if (it == before.positions[h].end()) {
          EXPECT_EQ(p, static_cast<int64_t>(cache.offset() - 1));  // the new row, as fp16 stores it
          for (size_t d = 0; d < kDims.head_dim; ++d) {
            EXPECT_EQ(after.keys[h][i * kDims.head_dim + d],
                      test::round_fp16(k[h * kDims.head_dim + d]));
          }
          continue;
        }
        const size_t j = static_cast<size_t>(it - before.positions[h].begin());
        EXPECT_EQ(0, std::memcmp(after.keys[h].data() + i * kDims.head_dim,
                                 before.keys[h].data() + j * kDims.head_dim,
                                 kDims.head_dim * sizeof(float)));
      }
      EXPECT_NE(std::find(after.positions[h].begin(), after.positions[h].end(), 5),
                after.positions[h].end())
          << "row 5 (what the recent queries attend to) was evicted at step " << step;
    }
  }
  EXPECT_GE(cache.decode_reselections(), 2u);
}

}  // namespace
}  // namespace snapkv
