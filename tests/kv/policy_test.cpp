// Each policy's invariants on the same candidates: size min(budget, n), strictly increasing,
// sinks kept; plus what makes each policy itself (streaming's recency, knorm's norm order,
// random's determinism, chunkkv's whole chunks, snapkv == scoring + selection).
#include "snapkv/kv/core/policy.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>
#include <vector>

#include "kv/kv_test_util.h"
#include "plain_config.h"
#include "snapkv/kv/core/snapkv_score.h"

namespace snapkv {
namespace {

using test::random_normal;

struct Candidates {
  size_t n = 0, d = 0;
  std::vector<float> keys;
  std::vector<int64_t> positions;
  SelectionInput input(size_t kv_head = 0) const {
    SelectionInput in;
    in.kv_head = kv_head;
    in.head_dim = d;
    in.n_rows = n;
    in.keys = keys.data();
    in.positions = positions.data();
    return in;
  }
};

Candidates make_candidates(size_t n, size_t d, uint64_t seed) {
  Candidates c;
  c.n = n;
  c.d = d;
  c.keys = random_normal(n * d, seed);
  c.positions.resize(n);
  std::iota(c.positions.begin(), c.positions.end(), int64_t{0});
  return c;
}

CacheConfig config_for(PolicyKind kind, size_t budget = 40) {
  CacheConfig config = test::plain_config();
  config.policy = kind;
  config.budget = budget;
  config.window = 8;
  config.n_sink = 4;
  config.chunk_size = 6;
  return config;
}

void expect_common_invariants(const SelectionResult& r, size_t n, const CacheConfig& config) {
  ASSERT_EQ(r.keep.size(), std::min(config.budget, n)) << to_string(config.policy);
  for (size_t i = 1; i < r.keep.size(); ++i) ASSERT_LT(r.keep[i - 1], r.keep[i]);
  ASSERT_LT(r.keep.back(), n);
  for (uint32_t s = 0; s < config.n_sink; ++s) EXPECT_EQ(r.keep[s], s) << to_string(config.policy);
  if (config.keep_window) {
    for (size_t i = 0; i < config.window; ++i) {
      EXPECT_EQ(r.keep[r.keep.size() - 1 - i], n - 1 - i) << to_string(config.policy);
    }
  }
  if (!r.scores.empty()) {
    EXPECT_EQ(r.scores.size(), n);
  }
}

TEST(Policy, EveryEvictingPolicyKeepsInvariants) {
  const auto c = make_candidates(150, 16, 1);
  for (const auto kind : {PolicyKind::snapkv, PolicyKind::streaming, PolicyKind::random,
                          PolicyKind::knorm, PolicyKind::chunkkv, PolicyKind::keydiff}) {
    for (const bool keep_window : {false, true}) {
      CacheConfig config = config_for(kind);
      config.keep_window = keep_window;
      auto policy = make_policy(config, 0);
      EXPECT_EQ(policy->kind(), kind);
      expect_common_invariants(policy->select(c.input()), c.n, config);
      auto copy = policy->clone();
      EXPECT_EQ(copy->select(c.input()).keep, policy->select(c.input()).keep);
    }
  }
}

TEST(Policy, FullKeepsEverything) {
  const auto c = make_candidates(30, 4, 2);
  auto policy = make_policy(config_for(PolicyKind::full, 10), 0);
  EXPECT_EQ(policy->select(c.input()).keep.size(), 30u);
}

TEST(Policy, StreamingKeepsSinksAndTheMostRecentRows) {
  const auto c = make_candidates(100, 4, 3);
  const auto r = make_policy(config_for(PolicyKind::streaming, 10), 0)->select(c.input());
  EXPECT_EQ(r.keep, (std::vector<uint32_t>{0, 1, 2, 3, 94, 95, 96, 97, 98, 99}));
  EXPECT_TRUE(r.scores.empty());
}

TEST(Policy, SnapkvIsScoringFollowedBySelection) {
  const auto c = make_candidates(200, 16, 4);
  CacheConfig config = config_for(PolicyKind::snapkv);
  config.pool = PoolKind::max;
  config.kernel = 5;
  const auto r = make_policy(config, 0)->select(c.input());
  const auto scores = snapkv_candidate_scores(c.input(), config);
  EXPECT_EQ(r.scores, scores);
  EXPECT_EQ(r.keep, select_rows(scores.data(), c.n, config.budget, config.n_sink, 0));
}

TEST(Policy, KnormKeepsTheLowestNorms) {
  auto c = make_candidates(120, 8, 5);
  const auto r = make_policy(config_for(PolicyKind::knorm, 30), 0)->select(c.input());
  std::vector<double> norm(c.n);
  for (size_t i = 0; i < c.n; ++i) {
    double s = 0.0;
    for (size_t j = 0; j < c.d; ++j) s += c.keys[i * c.d + j] * c.keys[i * c.d + j];
    norm[i] = std::sqrt(s);
  }
  const std::set<uint32_t> kept(r.keep.begin(), r.keep.end());
  double max_kept = 0.0, min_dropped = 1e300;
  for (uint32_t i = 4; i < c.n; ++i) {
    if (kept.count(i))
      max_kept = std::max(max_kept, norm[i]);
    else
      min_dropped = std::min(min_dropped, norm[i]);
  }
  EXPECT_LE(max_kept, min_dropped * (1 + 1e-6));
  for (size_t i = 0; i < c.n; ++i) EXPECT_NEAR(-r.scores[i], norm[i], 1e-5 * norm[i]);
}

TEST(Policy, RandomIsDeterministicPerSeedLayerAndHead) {
  const auto c = make_candidates(500, 4, 6);
  CacheConfig config = config_for(PolicyKind::random, 50);
  const auto a = make_policy(config, 0)->select(c.input()).keep;
  EXPECT_EQ(a, make_policy(config, 0)->select(c.input()).keep);
  EXPECT_NE(a, make_policy(config, 1)->select(c.input()).keep);   // another layer
  EXPECT_NE(a, make_policy(config, 0)->select(c.input(1)).keep);  // another head
  config.seed = 99;
  EXPECT_NE(a, make_policy(config, 0)->select(c.input()).keep);  // another seed
  // Roughly uniform: over many heads, the kept non-sink rows split evenly between the halves.
  config.seed = 0;
  auto policy = make_policy(config, 0);
  size_t first_half = 0, total = 0;
  for (size_t h = 0; h < 200; ++h) {
    for (const uint32_t i : policy->select(c.input(h)).keep) {
      if (i < 4) continue;
      first_half += i < 4 + (c.n - 4) / 2;
      ++total;
    }
  }
  // 9200 draws, p = 1/2: 5 standard deviations is about 240.
  EXPECT_NEAR(static_cast<double>(first_half), static_cast<double>(total) / 2.0, 240.0);
}

TEST(Policy, ChunkkvKeepsWholeTopChunksAndFillsOnePartialChunk) {
  const auto c = make_candidates(130, 16, 7);
  for (const bool keep_window : {false, true}) {
    CacheConfig config = config_for(PolicyKind::chunkkv, 41);
    config.keep_window = keep_window;
    const auto r = make_policy(config, 0)->select(c.input());
    expect_common_invariants(r, c.n, config);
    const size_t tail = keep_window ? config.window : 0;
    // Per chunk of free rows (positions 4 .. n - tail - 1): how many kept, size, summed score.
    const std::set<uint32_t> kept(r.keep.begin(), r.keep.end());
    struct Chunk {
      size_t kept = 0, size = 0;
      double score = 0.0;
    };
    std::vector<Chunk> chunks(c.n / config.chunk_size + 1);
    for (uint32_t i = 4; i < c.n - tail; ++i) {
      Chunk& ch = chunks[i / config.chunk_size];
      ch.size += 1;
      ch.kept += kept.count(i);
      ch.score += r.scores[i];
    }
    size_t partial = 0;
    double min_whole = 1e300, max_dropped = -1.0;
    for (const Chunk& ch : chunks) {
      if (ch.size == 0) continue;
      if (ch.kept == ch.size)
        min_whole = std::min(min_whole, ch.score);
      else if (ch.kept == 0)
        max_dropped = std::max(max_dropped, ch.score);
      else
        ++partial;
    }
    EXPECT_LE(partial, 1u);
    EXPECT_GE(min_whole, max_dropped);
  }
}

TEST(Policy, ChunkkvGroupsByOriginalPosition) {
  // Candidates after an earlier eviction: positions with gaps. Chunks follow position / size.
  Candidates c = make_candidates(20, 4, 8);
  for (size_t i = 0; i < c.n; ++i) c.positions[i] = static_cast<int64_t>(i < 4 ? i : 3 * i);
  CacheConfig config = config_for(PolicyKind::chunkkv, 10);
  config.chunk_size = 6;  // free rows 4..19 at positions 12, 15, ... 57: two rows per chunk
  const auto r = make_policy(config, 0)->select(c.input());
  expect_common_invariants(r, c.n, config);
  // 6 free slots = exactly three whole two-row chunks.
  std::set<int64_t> chunk_ids;
  for (size_t i = 4; i < r.keep.size(); ++i) chunk_ids.insert(c.positions[r.keep[i]] / 6);
  EXPECT_EQ(chunk_ids.size(), 3u);
}

}  // namespace
}  // namespace snapkv
