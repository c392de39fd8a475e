// CacheConfig: SnapKV's defaults, every validation rule (message names the field, the
// value and the rule), and the enum names round-tripping through parse_*.
#include "snapkv/kv/core/config.h"

#include <gtest/gtest.h>

#include <functional>
#include <stdexcept>
#include <string>
#include "plain_config.h"

namespace snapkv {
using snapkv::test::plain_config;
namespace {

std::string validation_error(const CacheConfig& config) {
  try {
    config.validate();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(Config, DefaultsFollowTheMethodNotesAndValidate) {
  const CacheConfig config;
  EXPECT_EQ(config.budget, 512u);
  EXPECT_EQ(config.window, 32u);
  EXPECT_EQ(config.n_sink, 4u);
  EXPECT_EQ(config.policy, PolicyKind::snapkv);
  EXPECT_EQ(config.codec, CodecKind::fp16);
  // Measured defaults (docs/TUNING.md), shared by every CLI command (tests/cli).
  EXPECT_EQ(config.pool, PoolKind::causal_max);
  EXPECT_EQ(config.kernel, 11u);
  EXPECT_FALSE(config.keep_window);
  EXPECT_EQ(config.chunk_mode, ChunkMode::end_of_prompt);
  EXPECT_NO_THROW(config.validate());
}

TEST(Config, RejectsEachInvalidSettingWithFieldValueAndRule) {
  struct Case {
    std::function<void(CacheConfig&)> edit;
    std::string field, value, rule;
  };
  const Case cases[] = {
      {[](CacheConfig& c) { c.budget = 3; }, "budget", "got budget 3", "n_sink = 4"},
      {[](CacheConfig& c) { c.budget = 0; }, "budget", "got 0", ">= 1"},
      {[](CacheConfig& c) { c.keep_window = true, c.budget = 35; }, "kept window", "budget 35",
       "n_sink + window = 4 + 32"},
      {[](CacheConfig& c) { c.kernel = 4; }, "kernel", "got 4", "odd"},
      {[](CacheConfig& c) { c.kernel = 0; }, "kernel", "got 0", "odd"},
      {[](CacheConfig& c) { c.pool = PoolKind::causal_max, c.kernel = 16; }, "kernel", "got 16",
       "odd"},
      // pyramid keeps the window even with keep_window false (keeps_window), so its floor holds.
      {[](CacheConfig& c) {
         c.keep_window = false, c.layer_allocation = LayerAllocation::pyramid, c.budget = 35;
       },
       "kept window", "budget 35", "n_sink + window = 4 + 32"},
      {[](CacheConfig& c) {
         c.keep_window = false, c.layer_allocation = LayerAllocation::pyramid;
         c.decode_budget = 40;
       },
       "decode_budget", "decode_budget 40", "+ window = 52"},
      {[](CacheConfig& c) { c.window = 0; }, "window", "got 0", ">= 1"},
      {[](CacheConfig& c) { c.chunk_size = 0; }, "chunk_size", "got 0", ">= 1"},
      {[](CacheConfig& c) { c.kivi_group = 0; }, "kivi_group", "got 0", ">= 1"},
      {[](CacheConfig& c) { c.kivi_residual = 100; }, "kivi_residual", "kivi_residual 100",
       "kivi_group = 32"},
      {[](CacheConfig& c) { c.pool = static_cast<PoolKind>(9); }, "pool", "got 9", "none|max|avg"},
      {[](CacheConfig& c) { c.policy = static_cast<PolicyKind>(42); }, "policy", "got 42",
       "snapkv"},
  };
  for (const Case& c : cases) {
    CacheConfig config;
    c.edit(config);
    const std::string msg = validation_error(config);
    ASSERT_FALSE(msg.empty()) << c.field;
    EXPECT_EQ(msg.rfind("[config] ", 0), 0u) << msg;
    EXPECT_NE(msg.find(c.field), std::string::npos) << msg;
    EXPECT_NE(msg.find(c.value), std::string::npos) << msg;
    EXPECT_NE(msg.find("expected"), std::string::npos) << msg;
    EXPECT_NE(msg.find(c.rule), std::string::npos) << msg;
  }
}

TEST(Config, BoundaryValuesAreAccepted) {
  CacheConfig config = plain_config();
  config.budget = 4;  // == n_sink
  EXPECT_NO_THROW(config.validate());
  config.keep_window = true;
  config.budget = 36;  // == n_sink + window
  EXPECT_NO_THROW(config.validate());
  config.kernel = 1;
  config.pool = PoolKind::max;
  EXPECT_NO_THROW(config.validate());
  CacheConfig full;
  full.policy = PolicyKind::full;
  full.budget = 0;  // the full policy has no budget
  EXPECT_NO_THROW(full.validate());
}

TEST(Config, EnumNamesRoundTrip) {
  for (const auto k : {PolicyKind::full, PolicyKind::snapkv, PolicyKind::streaming,
                       PolicyKind::random, PolicyKind::knorm, PolicyKind::chunkkv}) {
    EXPECT_EQ(parse_policy(to_string(k)), k);
  }
  for (const auto k : {PoolKind::none, PoolKind::max, PoolKind::avg, PoolKind::causal_max}) {
    EXPECT_EQ(parse_pool(to_string(k)), k);
  }
  for (const auto k : {QuerySource::auto_select, QuerySource::queries, QuerySource::keys}) {
    EXPECT_EQ(parse_query_source(to_string(k)), k);
  }
  for (const auto k : {ChunkMode::every_chunk, ChunkMode::end_of_prompt}) {
    EXPECT_EQ(parse_chunk_mode(to_string(k)), k);
  }
  for (const auto k : {CodecKind::fp16, CodecKind::kivi2, CodecKind::kivi4}) {
    EXPECT_EQ(parse_codec(to_string(k)), k);
  }
  EXPECT_EQ(to_string(QuerySource::auto_select), "auto");
  EXPECT_EQ(to_string(PoolKind::causal_max), "causal_max");
  EXPECT_EQ(to_string(PolicyKind::snapkv), "snapkv");
}

TEST(Config, ParseRejectsUnknownNamesListingTheAcceptedOnes) {
  try {
    parse_pool("mean");
    FAIL();
  } catch (const std::invalid_argument& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("'mean'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("none|max|avg"), std::string::npos) << msg;
  }
  EXPECT_THROW(parse_policy("SnapKV"), std::invalid_argument);
  EXPECT_THROW(parse_query_source("auto_select"), std::invalid_argument);
  EXPECT_THROW(parse_chunk_mode(""), std::invalid_argument);
  EXPECT_THROW(parse_codec("kivi8"), std::invalid_argument);
}

}  // namespace
}  // namespace snapkv
