// LayerCache with ragged KV heads (head_allocation ada) and PyramidKV layer budgets: the layer
// keeps n_kv_heads * budget rows in all, sinks and order per head, exact accounting and bytes,
// attention over ragged heads against the double reference through decode steps, on fp16 and
// KIVI stores, clone() equality, every_chunk bounded, and pyramid totals through build_caches.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

#include "kv/kv_test_util.h"
#include "snapkv/kv/core/builder.h"
#include "snapkv/kv/core/layer_cache.h"

namespace snapkv {
namespace {

using test::random_normal;
using test::view;

constexpr size_t kHeads = 4, kKv = 2, kD = 16, kS = 120, kW = 8;

CacheConfig ada_config(PolicyKind policy, CodecKind codec) {
  CacheConfig c;
  c.policy = policy;
  c.codec = codec;
  c.head_allocation = HeadAllocation::ada;
  c.budget = 30;
  c.window = kW;
  c.n_sink = 3;
  c.kivi_group = 8;
  c.kivi_residual = 16;
  return c;
}

// Keys whose head 0 has a few strongly attended rows and head 1 none: AdaKV moves budget.
struct Prompt {
  std::vector<float> k, v, q;  // [kKv][kS][kD], [kKv][kS][kD], [kHeads][kW][kD]
};

Prompt make_prompt(uint64_t seed) {
  Prompt p{random_normal(kKv * kS * kD, seed, 0.3f), random_normal(kKv * kS * kD, seed + 1),
           random_normal(kHeads * kW * kD, seed + 2, 0.3f)};
  for (size_t r = 0; r < kHeads * kW; ++r) p.q[r * kD] += 2.0f;
  for (size_t i = 10; i < kS - kW; i += 9) p.k[i * kD] += 3.0f;  // head 0 only
  return p;
}

void fill(LayerCache& cache, const Prompt& p) {
  const Tensor3 q = view(p.q, kHeads, kW, kD);
  cache.update(view(p.k, kKv, kS, kD), view(p.v, kKv, kS, kD), &q, UpdateKind::prefill);
  cache.end_prompt();
}

void expect_consistent(const LayerCache& cache, const char* what) {
  size_t rows = 0;
  size_t largest = 0;
  for (size_t h = 0; h < kKv; ++h) {
    const auto pos = cache.positions(h);
    ASSERT_EQ(pos.size(), cache.size(h)) << what;
    ASSERT_EQ(cache.keys(h).rows(), cache.size(h)) << what;
    ASSERT_EQ(cache.values(h).rows(), cache.size(h)) << what;
    for (size_t i = 1; i < pos.size(); ++i) ASSERT_LT(pos[i - 1], pos[i]) << what;
    for (int64_t s = 0; s < 3; ++s) ASSERT_EQ(pos[static_cast<size_t>(s)], s) << what;
    rows += cache.size(h);
    largest = std::max(largest, cache.size(h));
  }
  const CacheStats st = cache.stats();
  EXPECT_EQ(cache.size(), largest) << what;
  EXPECT_EQ(st.rows_kept, rows) << what;
  EXPECT_EQ(st.kv_heads, kKv) << what;
  EXPECT_EQ(st.tokens_kept, (rows + kKv / 2) / kKv) << what;
  EXPECT_DOUBLE_EQ(st.keep_rate(),
                   static_cast<double>(rows) / kKv / static_cast<double>(cache.offset()))
      << what;
  size_t bytes = 0;
  for (size_t h = 0; h < kKv; ++h) bytes += cache.keys(h).bytes() + cache.values(h).bytes();
  EXPECT_EQ(st.bytes_stored, bytes) << what;
  if (cache.config().codec == CodecKind::fp16) {
    EXPECT_EQ(st.bytes_stored, rows * kD * 2 * sizeof(uint16_t)) << what;  // K and V, fp16
  }
}

TEST(RaggedHeads, AdaKeepsTheLayerTotalAndAttendsThroughDecode) {
  const Prompt p = make_prompt(21);
  for (const CodecKind codec : {CodecKind::fp16, CodecKind::kivi2, CodecKind::kivi4}) {
    for (const PolicyKind policy : {PolicyKind::snapkv, PolicyKind::keydiff,
                                    PolicyKind::expected_attention, PolicyKind::knorm}) {
      const std::string what = std::string(to_string(policy)) + " " + std::string(to_string(codec));
      const CacheConfig config = ada_config(policy, codec);
      LayerCache cache({kHeads, kKv, kD}, config);
      fill(cache, p);
      EXPECT_EQ(cache.size(0) + cache.size(1), kKv * config.budget) << what;
      EXPECT_EQ(cache.compressions(), 1u) << what;
      expect_consistent(cache, what.c_str());
      LayerCache copy = cache.clone();
      for (size_t step = 0; step < 20; ++step) {  // decode appends one row to every head
        test::expect_attend_matches_reference(cache, 1, 100 + step);
        const auto k1 = random_normal(kKv * kD, 200 + step),
                   v1 = random_normal(kKv * kD, 300 + step);
        const size_t s0 = cache.size(0), s1 = cache.size(1);
        cache.update(view(k1, kKv, 1, kD), view(v1, kKv, 1, kD));
        ASSERT_EQ(cache.size(0), s0 + 1);
        ASSERT_EQ(cache.size(1), s1 + 1);
        ASSERT_EQ(cache.positions(0).back(), static_cast<int64_t>(kS + step));
        ASSERT_EQ(cache.positions(1).back(), static_cast<int64_t>(kS + step));
      }
      expect_consistent(cache, what.c_str());
      test::expect_attend_matches_reference(cache, 13, 400);  // a prefill-sized chunk
      // The clone taken before decode is untouched and equal to a fresh run.
      LayerCache again({kHeads, kKv, kD}, config);
      fill(again, p);
      for (size_t h = 0; h < kKv; ++h) {
        EXPECT_TRUE(std::ranges::equal(copy.positions(h), again.positions(h))) << what;
        std::vector<float> a(copy.size(h) * kD), b(again.size(h) * kD);
        copy.read_keys(h, a.data());
        again.read_keys(h, b.data());
        EXPECT_EQ(a, b) << what;
      }
    }
  }
}

TEST(RaggedHeads, AdaMovesBudgetToTheHeadThatNeedsIt) {
  const Prompt p = make_prompt(23);
  LayerCache uniform({kHeads, kKv, kD}, [] {
    CacheConfig c = ada_config(PolicyKind::snapkv, CodecKind::fp16);
    c.head_allocation = HeadAllocation::uniform;
    return c;
  }());
  LayerCache ada({kHeads, kKv, kD}, ada_config(PolicyKind::snapkv, CodecKind::fp16));
  fill(uniform, p);
  fill(ada, p);
  EXPECT_EQ(uniform.size(0), 30u);
  EXPECT_EQ(uniform.size(1), 30u);
  EXPECT_NE(ada.size(0), ada.size(1));                // skewed scores: different budgets per head
  EXPECT_GE(std::min(ada.size(0), ada.size(1)), 6u);  // ceil(0.2 * 30) floor
}

TEST(RaggedHeads, EveryChunkStaysWithinTheLayerTotal) {
  const Prompt p = make_prompt(25);
  CacheConfig config = ada_config(PolicyKind::keydiff, CodecKind::kivi2);
  config.chunk_mode = ChunkMode::every_chunk;
  LayerCache cache({kHeads, kKv, kD}, config);
  size_t seen = 0;
  for (const size_t len : {25u, 40u, 30u, 25u}) {
    const auto k = test::slice_tokens(p.k, kKv, kS, kD, seen, seen + len);
    const auto v = test::slice_tokens(p.v, kKv, kS, kD, seen, seen + len);
    cache.update(view(k, kKv, len, kD), view(v, kKv, len, kD), nullptr, UpdateKind::prefill);
    seen += len;
    EXPECT_LE(cache.stats().rows_kept, kKv * config.budget);
    EXPECT_EQ(cache.stats().rows_kept, std::min(seen, config.budget) * kKv);
    expect_consistent(cache, "every_chunk");
  }
}

TEST(PyramidLayers, BuildCachesKeepTheUniformTotalOverLayers) {
  const ModelDims dims{6, kHeads, kKv, kD};
  const Prompt p = make_prompt(27);
  for (const bool ada : {false, true}) {
    CacheConfig config = ada_config(PolicyKind::snapkv, CodecKind::fp16);
    config.head_allocation = ada ? HeadAllocation::ada : HeadAllocation::uniform;
    config.layer_allocation = LayerAllocation::pyramid;
    config.chunk_mode = ChunkMode::end_of_prompt;
    std::vector<LayerCache> caches = build_caches(dims, config);
    size_t previous = kS;
    for (LayerCache& cache : caches) {
      fill(cache, p);
      const CacheStats st = cache.stats();
      EXPECT_EQ(st.rows_kept, kKv * cache.layer_budget());
      EXPECT_LE(cache.layer_budget(), previous);
      previous = cache.layer_budget();
      expect_consistent(cache, ada ? "ada-pyramid" : "pyramid");
    }
    EXPECT_GT(caches.front().layer_budget(), caches.back().layer_budget());
    const CacheStats total = total_stats(caches);
    EXPECT_EQ(total.rows_kept, dims.n_layers * kKv * config.budget);  // = the uniform total
    EXPECT_EQ(total.tokens_kept, config.budget);  // mean per KV head over layers
    EXPECT_EQ(total.kv_heads, dims.n_layers * kKv);
  }
}

// PyramidKV keeps the window in every layer even with keep_window false (config.h keeps_window):
// the deepest layers' budgets sit at the floor sinks + window, and every layer of every head holds
// the sinks and the last kW positions, in order, with the uniform total over layers.
TEST(PyramidLayers, EveryLayerKeepsSinksAndWindowWithoutKeepWindow) {
  const ModelDims dims{6, kHeads, kKv, kD};
  const Prompt p = make_prompt(29);
  for (const bool ada : {false, true}) {
    CacheConfig config = ada_config(PolicyKind::snapkv, CodecKind::fp16);
    config.head_allocation = ada ? HeadAllocation::ada : HeadAllocation::uniform;
    config.layer_allocation = LayerAllocation::pyramid;
    config.keep_window = false;
    config.chunk_mode = ChunkMode::end_of_prompt;
    config.budget = 16;  // 6 layers: the deepest ones are clamped up to the floor 3 + 8
    ASSERT_TRUE(keeps_window(config));
    std::vector<LayerCache> caches = build_caches(dims, config);
    size_t rows = 0;
    for (LayerCache& cache : caches) {
      fill(cache, p);
      EXPECT_GE(cache.layer_budget(), config.n_sink + kW);
      EXPECT_EQ(cache.stats().rows_kept, kKv * cache.layer_budget());
      rows += cache.stats().rows_kept;
      expect_consistent(cache, ada ? "ada-pyramid" : "pyramid");
      for (size_t h = 0; h < kKv; ++h) {
        const auto pos = cache.positions(h);
        ASSERT_GE(pos.size(), kW);
        for (size_t r = 0; r < kW; ++r) {
          EXPECT_EQ(pos[pos.size() - kW + r], static_cast<int64_t>(kS - kW + r)) << "head " << h;
        }
      }
    }
    EXPECT_EQ(caches.back().layer_budget(), config.n_sink + kW);
    EXPECT_EQ(rows, dims.n_layers * kKv * config.budget);
  }
}

// kvzip's scores come from outside the cache (the model's reconstruction pass); with ada the
// cache compares them across the heads. Head 0's external scores peak on 20 rows, head 1's are
// flat and low: ada gives head 0 more rows, keeps the layer total, floors, sinks, the window,
// position order and exact bytes; every peaked row survives (kernel 1: no pooling).
std::vector<float> kvzip_scores(size_t n_rows) {
  std::vector<float> scores(kKv * n_rows);  // [kKv][n_rows]
  for (size_t i = 0; i < n_rows; ++i) {
    scores[i] = 0.01f + 0.001f * static_cast<float>(i % 7);
    scores[n_rows + i] = 0.02f + 0.001f * static_cast<float>(i % 5);
  }
  for (size_t i = 10; i < 10 + 4 * 20; i += 4) scores[i] = 0.5f + 0.01f * static_cast<float>(i);
  return scores;
}

TEST(RaggedHeads, AdaKvzipSplitsTheLayerTotalByTheSuppliedScores) {
  const Prompt p = make_prompt(31);
  for (const CodecKind codec : {CodecKind::fp16, CodecKind::kivi2}) {
    CacheConfig config = ada_config(PolicyKind::kvzip, codec);
    config.kernel = 1;
    config.keep_window = true;  // the floor and the window checks below
    config.chunk_mode = ChunkMode::end_of_prompt;
    LayerCache cache({kHeads, kKv, kD}, config);
    cache.update(view(p.k, kKv, kS, kD), view(p.v, kKv, kS, kD), nullptr, UpdateKind::prefill);
    cache.compress_with_scores(kvzip_scores(kS));
    const std::string what = std::string("ada-kvzip ") + std::string(to_string(codec));
    EXPECT_EQ(cache.size(0) + cache.size(1), kKv * config.budget) << what;
    EXPECT_GT(cache.size(0), cache.size(1)) << what;
    EXPECT_GE(cache.size(1), config.n_sink + kW) << what;  // the floor: sinks and window
    expect_consistent(cache, what.c_str());
    const auto pos0 = cache.positions(0);
    for (int64_t i = 10; i < 10 + 4 * 20; i += 4) {
      EXPECT_TRUE(std::ranges::find(pos0, i) != pos0.end()) << what << " row " << i;
    }
    for (size_t h = 0; h < kKv; ++h) {  // the window stays (keep_window)
      const auto pos = cache.positions(h);
      EXPECT_EQ(pos.back(), static_cast<int64_t>(kS - 1)) << what;
      EXPECT_EQ(pos[pos.size() - kW], static_cast<int64_t>(kS - kW)) << what;
    }
  }
}

TEST(PyramidLayers, KvzipLayersKeepTheUniformTotal) {
  const ModelDims dims{5, kHeads, kKv, kD};
  const Prompt p = make_prompt(33);
  for (const bool ada : {false, true}) {
    CacheConfig config = ada_config(PolicyKind::kvzip, CodecKind::fp16);
    config.head_allocation = ada ? HeadAllocation::ada : HeadAllocation::uniform;
    config.layer_allocation = LayerAllocation::pyramid;
    config.chunk_mode = ChunkMode::end_of_prompt;
    std::vector<LayerCache> caches = build_caches(dims, config);
    for (LayerCache& cache : caches) {
      cache.update(view(p.k, kKv, kS, kD), view(p.v, kKv, kS, kD), nullptr, UpdateKind::prefill);
      cache.compress_with_scores(kvzip_scores(kS));
      EXPECT_EQ(cache.stats().rows_kept, kKv * cache.layer_budget());
      expect_consistent(cache, ada ? "ada-pyramid-kvzip" : "pyramid-kvzip");
    }
    EXPECT_GT(caches.front().layer_budget(), caches.back().layer_budget());
    EXPECT_EQ(total_stats(caches).rows_kept, dims.n_layers * kKv * config.budget);
  }
}

TEST(PyramidLayers, ALoneCacheWithoutLayerCountIsRefused) {
  CacheConfig config = ada_config(PolicyKind::snapkv, CodecKind::fp16);
  config.layer_allocation = LayerAllocation::pyramid;
  EXPECT_THROW(LayerCache({kHeads, kKv, kD}, config), std::invalid_argument);
  EXPECT_THROW(LayerCache({kHeads, kKv, kD}, config, 4, 4), std::invalid_argument);
  EXPECT_NO_THROW(LayerCache({kHeads, kKv, kD}, config, 3, 4));
  config.policy = PolicyKind::streaming;  // ada needs per-row scores
  EXPECT_THROW(config.validate(), std::invalid_argument);
}

TEST(RaggedHeads, ForkEqualsADedicatedCacheForEveryAllocation) {
  const Prompt p = make_prompt(29);
  CacheConfig base_config = ada_config(PolicyKind::snapkv, CodecKind::kivi2);
  base_config.head_allocation = HeadAllocation::uniform;
  base_config.chunk_mode = ChunkMode::end_of_prompt;
  base_config.budget = kS;
  const Tensor3 q = view(p.q, kHeads, kW, kD);
  LayerCache base({kHeads, kKv, kD}, base_config, 2, 5);
  base.update(view(p.k, kKv, kS, kD), view(p.v, kKv, kS, kD), &q, UpdateKind::prefill);
  for (const PolicyKind policy :
       {PolicyKind::snapkv, PolicyKind::keydiff, PolicyKind::expected_attention}) {
    for (const HeadAllocation heads : {HeadAllocation::uniform, HeadAllocation::ada}) {
      for (const LayerAllocation layers : {LayerAllocation::uniform, LayerAllocation::pyramid}) {
        CacheConfig target = base_config;
        target.policy = policy;
        target.head_allocation = heads;
        target.layer_allocation = layers;
        target.budget = 25;
        LayerCache dedicated({kHeads, kKv, kD}, target, 2, 5);
        fill(dedicated, p);
        LayerCache forked = base.fork(target, 2);
        forked.end_prompt();
        const std::string what = std::string(to_string(policy)) + " " +
                                 std::string(to_string(heads)) + " " +
                                 std::string(to_string(layers));
        EXPECT_EQ(forked.layer_budget(), dedicated.layer_budget()) << what;
        EXPECT_EQ(forked.stats().bytes_stored, dedicated.stats().bytes_stored) << what;
        for (size_t h = 0; h < kKv; ++h) {
          ASSERT_TRUE(std::ranges::equal(forked.positions(h), dedicated.positions(h))) << what;
          EXPECT_TRUE(std::ranges::equal(forked.last_scores(h), dedicated.last_scores(h))) << what;
          std::vector<float> a(forked.size(h) * kD), b(dedicated.size(h) * kD);
          forked.read_values(h, a.data());
          dedicated.read_values(h, b.data());
          EXPECT_EQ(a, b) << what;
        }
        expect_consistent(forked, what.c_str());
      }
    }
  }
}

}  // namespace
}  // namespace snapkv
