// Head types (kv/core/head_types.h) in the cache: the method grammar's duo- prefix, the streaming
// heads' rows (sinks + most recent), the budget accounting of every layer (the rows kept are what
// the budget allows: H b per layer, the streaming heads' rows plus the retrieval heads' shares),
// duo_ada over the retrieval heads, the choice of streaming heads from scores, and a duo cache
// refusing to compress without head types.
#include <gtest/gtest.h>

#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "kv/kv_test_util.h"
#include "snapkv/kv/core/head_types.h"
#include "snapkv/kv/core/layer_cache.h"
#include "snapkv/kv/core/method.h"
#include "snapkv/kv/core/prefill_plan.h"

namespace snapkv {
namespace {

using test::random_normal;
using test::view;

constexpr size_t kHeads = 8, kKv = 4, kS = 90, kD = 8, kW = 6;

CacheConfig duo_config(std::string_view method) {
  CacheConfig knobs;
  knobs.budget = 20;
  knobs.window = kW;
  knobs.n_sink = 2;
  knobs.duo_recent = 6;
  knobs.kernel = 3;
  return parse_method(method, knobs).config;
}

LayerCache prefilled(const CacheConfig& config, std::vector<uint8_t> types, uint64_t seed,
                     size_t n = kS, size_t layer = 0, size_t n_layers = 1) {
  LayerCache cache(CacheDims{kHeads, kKv, kD}, config, layer, n_layers);
  if (!types.empty()) cache.set_head_types(std::move(types));
  const auto k = random_normal(kKv * n * kD, seed, 0.3f);
  const auto v = random_normal(kKv * n * kD, seed + 1);
  const auto q = random_normal(kHeads * kW * kD, seed + 2, 0.3f);
  const Tensor3 qt = view(q, kHeads, kW, kD);
  cache.update(view(k, kKv, n, kD), view(v, kKv, n, kD), &qt, UpdateKind::prefill);
  if (policy_takes_external_scores(config.policy)) {
    cache.compress_with_scores(random_normal(kKv * cache.size(), seed + 3));
  } else {
    cache.end_prompt();
  }
  return cache;
}

size_t total_rows(const LayerCache& c) {
  size_t t = 0;
  for (size_t h = 0; h < kKv; ++h) t += c.size(h);
  return t;
}

TEST(HeadTypes, MethodGrammarTakesTheDuoPrefix) {
  const CacheConfig knobs;
  EXPECT_EQ(parse_method("duo-snapkv", knobs).config.head_allocation, HeadAllocation::duo);
  const Method ada = parse_method("duo-ada-kvzip", knobs);
  EXPECT_EQ(ada.config.head_allocation, HeadAllocation::duo_ada);
  EXPECT_EQ(ada.config.policy, PolicyKind::kvzip);
  const Method codec = parse_method("duo-snapkv+kivi4", knobs);
  EXPECT_EQ(codec.config.head_allocation, HeadAllocation::duo);
  EXPECT_EQ(codec.config.codec, CodecKind::kivi4);
  const Method pyr = parse_method("duo-ada-pyramid-kvzap", knobs);
  EXPECT_EQ(pyr.config.head_allocation, HeadAllocation::duo_ada);
  EXPECT_EQ(pyr.config.layer_allocation, LayerAllocation::pyramid);
  EXPECT_EQ(pyr.config.policy, PolicyKind::kvzap);
  EXPECT_EQ(parse_method("duo-chunkkv", knobs).config.head_allocation, HeadAllocation::duo);
  for (const char* bad : {"duo-streaming", "duo-full", "ada-duo-snapkv", "duo-", "duo-ada-random",
                          "duo-duo-snapkv"}) {
    EXPECT_THROW(parse_method(bad, knobs), std::invalid_argument) << bad;
  }
  EXPECT_EQ(parse_head_allocation("duo_ada"), HeadAllocation::duo_ada);
  EXPECT_EQ(to_string(HeadAllocation::duo), "duo");
  CacheConfig c;
  c.head_allocation = HeadAllocation::duo;
  c.policy = PolicyKind::streaming;
  EXPECT_THROW(c.validate(), std::invalid_argument);
  c.policy = PolicyKind::snapkv;
  c.duo_streaming = 1.5;
  EXPECT_THROW(c.validate(), std::invalid_argument);
}

// The engine learns from the prefill plan, not from the policy's name, whether to hand the cache
// the model's head types.
TEST(HeadTypes, PrefillPlanSaysWhenHeadTypesAreNeeded) {
  const CacheConfig knobs;
  EXPECT_TRUE(prefill_plan(parse_method("duo-snapkv", knobs).config).head_types);
  EXPECT_TRUE(prefill_plan(parse_method("duo-ada-kvzip", knobs).config).head_types);
  EXPECT_FALSE(prefill_plan(parse_method("snapkv", knobs).config).head_types);
  EXPECT_FALSE(prefill_plan(parse_method("ada-snapkv", knobs).config).head_types);
  CacheConfig full;
  full.policy = PolicyKind::full;
  full.head_allocation = HeadAllocation::duo;
  EXPECT_FALSE(prefill_plan(full).head_types);
}

TEST(HeadTypes, StreamingKeepIsSinksPlusMostRecent) {
  EXPECT_EQ(streaming_keep(10, 5, 2), (std::vector<uint32_t>{0, 1, 7, 8, 9}));
  EXPECT_EQ(streaming_keep(10, 2, 4), (std::vector<uint32_t>{0, 1}));
  EXPECT_EQ(streaming_keep(4, 4, 2), (std::vector<uint32_t>{0, 1, 2, 3}));
  EXPECT_TRUE(streaming_keep(7, 0, 2).empty());
}

TEST(HeadTypes, StreamingHeadsAreTheLowestScores) {
  const std::vector<float> s = {0.9f, 0.1f, 0.5f, 0.1f, 0.7f, 0.0f};
  EXPECT_EQ(streaming_heads(s, 0.5), (std::vector<uint8_t>{0, 1, 0, 1, 0, 1}));
  EXPECT_EQ(streaming_heads(s, 0.0), (std::vector<uint8_t>(6, 0)));
  EXPECT_EQ(streaming_heads(s, 1.0), (std::vector<uint8_t>(6, 1)));
  // Ties: the earlier index streams first.
  EXPECT_EQ(streaming_heads(std::vector<float>{0.2f, 0.2f, 0.2f}, 0.34),
            (std::vector<uint8_t>{1, 0, 0}));
  EXPECT_THROW(streaming_heads(s, -0.1), std::invalid_argument);
  EXPECT_THROW(streaming_heads(std::vector<float>{NAN}, 0.5), std::invalid_argument);
}

TEST(HeadTypes, MassOutsideWindowIsWhatAStreamingHeadLoses) {
  // query at position 9: sinks {0, 1}, recent (9 - 3, 9] = {7, 8, 9}; outside: 2..6.
  const std::vector<float> p = {0.1f, 0.1f, 0.05f, 0.05f, 0.1f, 0.1f, 0.2f, 0.1f, 0.1f, 0.1f};
  EXPECT_NEAR(mass_outside_window(p, 2, 3), 0.5, 1e-6);
  EXPECT_NEAR(mass_outside_window(p, 0, 10), 0.0, 1e-12);
  EXPECT_NEAR(mass_outside_window(p, 10, 1), 0.0, 1e-12);
}

TEST(HeadTypes, BudgetsGiveTheFreedRowsToRetrievalHeads) {
  CacheConfig c = duo_config("duo-snapkv");  // b 20, sinks 2, recent 6: streaming heads keep 8
  const std::vector<size_t> n(4, 90);
  DuoBudgets d = duo_budgets(std::vector<uint8_t>{1, 0, 0, 1}, n, 20, c);
  EXPECT_EQ(d.rows, (std::vector<size_t>{8, 32, 32, 8}));
  EXPECT_EQ(d.retrieval_total, 64u);
  d = duo_budgets(std::vector<uint8_t>{1, 0, 0, 0}, n, 20, c);  // 72 over three: 24 each
  EXPECT_EQ(d.rows, (std::vector<size_t>{8, 24, 24, 24}));
  d = duo_budgets(std::vector<uint8_t>{1, 1, 1, 0}, n, 20, c);  // 56 to one head
  EXPECT_EQ(d.rows, (std::vector<size_t>{8, 8, 8, 56}));
  d = duo_budgets(std::vector<uint8_t>{1, 0, 0, 1}, std::vector<size_t>{90, 25, 90, 90}, 20, c);
  EXPECT_EQ(d.rows, (std::vector<size_t>{8, 25, 39, 8}));  // a short head's rest goes on
  d = duo_budgets(std::vector<uint8_t>{0, 0, 1, 1}, std::vector<size_t>{90, 90, 90, 90}, 21, c);
  EXPECT_EQ(d.rows, (std::vector<size_t>{34, 34, 8, 8}));  // 68 = 84 - 16
  d = duo_budgets(std::vector<uint8_t>(4, 1), n, 20, c);   // nothing to give the rows to
  EXPECT_EQ(d.rows, (std::vector<size_t>(4, 8)));
  EXPECT_EQ(d.retrieval_total, 0u);
  c.duo_recent = 100;  // capped at the budget: a streaming head frees nothing
  d = duo_budgets(std::vector<uint8_t>{1, 0, 0, 1}, n, 20, c);
  EXPECT_EQ(d.rows, (std::vector<size_t>(4, 20)));
  EXPECT_THROW(duo_budgets(std::vector<uint8_t>{1, 0}, n, 20, c), std::invalid_argument);
}

TEST(HeadTypes, CacheKeepsWhatTheBudgetAllows) {
  for (const char* method : {"duo-snapkv", "duo-ada-snapkv", "duo-kvzap", "duo-ada-kvzip",
                             "duo-knorm", "duo-random", "duo-snapkv+kivi4"}) {
    const CacheConfig c = duo_config(method);
    const LayerCache cache = prefilled(c, {1, 0, 0, 1}, 40);
    SCOPED_TRACE(method);
    EXPECT_EQ(total_rows(cache), kKv * c.budget);    // the layer's H b rows, no more, no fewer
    for (const size_t h : {size_t{0}, size_t{3}}) {  // streaming: sinks + the most recent rows
      const std::span<const int64_t> pos = cache.positions(h);
      ASSERT_EQ(pos.size(), 8u);
      EXPECT_EQ(pos[0], 0);
      EXPECT_EQ(pos[1], 1);
      for (size_t i = 2; i < 8; ++i) EXPECT_EQ(pos[i], static_cast<int64_t>(kS - 8 + i));
    }
    if (c.head_allocation == HeadAllocation::duo) {
      EXPECT_EQ(cache.size(1), 32u);
      EXPECT_EQ(cache.size(2), 32u);
    } else {
      EXPECT_EQ(cache.size(1) + cache.size(2), 64u);
    }
  }
}

TEST(HeadTypes, PyramidLayersKeepTheirShare) {
  const CacheConfig c = duo_config("duo-pyramid-snapkv");
  const size_t n_layers = 3;
  for (size_t l = 0; l < n_layers; ++l) {
    const LayerCache cache = prefilled(c, {0, 1, 0, 1}, 50 + l, kS, l, n_layers);
    const size_t b = cache.layer_budget();
    EXPECT_EQ(total_rows(cache), kKv * b) << "layer " << l;
    EXPECT_EQ(cache.size(1), std::min(b, c.n_sink + c.duo_recent)) << "layer " << l;
  }
}

TEST(HeadTypes, NoHeadTypesNoCompression) {
  const CacheConfig c = duo_config("duo-snapkv");
  try {
    prefilled(c, {}, 60);
    ADD_FAILURE() << "a duo cache compressed without head types";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("head types"), std::string::npos) << e.what();
  }
  LayerCache cache(CacheDims{kHeads, kKv, kD}, c, 0, 1);
  EXPECT_THROW(cache.set_head_types({1, 0}), std::invalid_argument);
}

TEST(HeadTypes, CloneAndForkKeepTheTypes) {
  const CacheConfig c = duo_config("duo-snapkv");
  const LayerCache a = prefilled(c, {1, 0, 0, 1}, 70);
  EXPECT_EQ(std::vector<uint8_t>(a.head_types().begin(), a.head_types().end()),
            (std::vector<uint8_t>{1, 0, 0, 1}));
  const LayerCache b = a.clone();
  EXPECT_EQ(std::vector<uint8_t>(b.head_types().begin(), b.head_types().end()),
            (std::vector<uint8_t>{1, 0, 0, 1}));
}

}  // namespace
}  // namespace snapkv
