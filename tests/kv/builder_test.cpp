// build_caches / total_stats: one cache per layer, config and dims propagated, layer index reaches
// seeded policies, totals add bytes and take the (shared) token counts.
#include "snapkv/kv/core/builder.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "kv/kv_test_util.h"
#include "plain_config.h"

namespace snapkv {
using snapkv::test::plain_config;
namespace {

using test::random_normal;
using test::view;

TEST(Builder, PropagatesConfigAndDims) {
  CacheConfig config;
  config.budget = 100;
  config.window = 16;
  config.n_sink = 8;
  config.pool = PoolKind::max;
  config.kernel = 7;
  const auto caches = build_caches({5, 32, 8, 128}, config);
  ASSERT_EQ(caches.size(), 5u);
  for (const LayerCache& cache : caches) {
    EXPECT_EQ(cache.config().budget, 100u);
    EXPECT_EQ(cache.config().window, 16u);
    EXPECT_EQ(cache.config().n_sink, 8u);
    EXPECT_EQ(cache.config().pool, PoolKind::max);
    EXPECT_EQ(cache.config().kernel, 7u);
    EXPECT_EQ(cache.dims().n_heads, 32u);
    EXPECT_EQ(cache.dims().n_kv_heads, 8u);
    EXPECT_EQ(cache.dims().head_dim, 128u);
    EXPECT_EQ(cache.offset(), 0u);
    EXPECT_EQ(cache.size(), 0u);
  }
}

TEST(Builder, RejectsInvalidDimsAndConfig) {
  EXPECT_THROW(build_caches({0, 4, 2, 8}, CacheConfig{}), std::invalid_argument);
  EXPECT_THROW(build_caches({2, 6, 4, 8}, CacheConfig{}), std::invalid_argument);
  EXPECT_THROW(build_caches({2, 4, 2, 0}, CacheConfig{}), std::invalid_argument);
  CacheConfig bad;
  bad.window = 0;
  EXPECT_THROW(build_caches({2, 4, 2, 8}, bad), std::invalid_argument);
}

TEST(Builder, LayersGetTheirOwnRandomStreamAndTotalsAdd) {
  CacheConfig config = plain_config();
  config.policy = PolicyKind::random;
  config.budget = 20;
  auto caches = build_caches({3, 2, 1, 8}, config);
  const auto k = random_normal(200 * 8, 1), v = random_normal(200 * 8, 2);
  for (LayerCache& cache : caches) cache.update(view(k, 1, 200, 8), view(v, 1, 200, 8));
  EXPECT_FALSE(std::ranges::equal(caches[0].positions(0), caches[1].positions(0)));
  const CacheStats total = total_stats(caches);
  EXPECT_EQ(total.tokens_seen, 200u);
  EXPECT_EQ(total.tokens_kept, 20u);
  EXPECT_EQ(total.bytes_stored, 3u * caches[0].stats().bytes_stored);
  EXPECT_EQ(total.bytes_full_fp16, 3u * 200 * 8 * 2 * 2);
  EXPECT_DOUBLE_EQ(total.eviction_ratio(), 10.0);
  EXPECT_DOUBLE_EQ(total.keep_rate(), 0.1);
  EXPECT_EQ(total_stats({}).tokens_seen, 0u);
}

}  // namespace
}  // namespace snapkv
