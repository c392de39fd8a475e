// Policy kvzap in the cache's vocabulary: the method grammar (prefixes, codecs), the spec table
// every front end reads (CLI flags, server fields, C ABI keys, Python keywords), the config rules
// it shares with kvzip, and the plan that tells the engine to run the learned scorer.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "snapkv/kv/core/config.h"
#include "snapkv/kv/core/method.h"
#include "snapkv/kv/core/policy.h"
#include "snapkv/kv/core/prefill_plan.h"
#include "snapkv/kv/core/spec.h"

namespace snapkv {
namespace {

TEST(KvzapMethod, ParsesWithPrefixesAndCodecs) {
  const CacheConfig knobs;
  const Method m = parse_method("kvzap", knobs);
  EXPECT_EQ(m.config.policy, PolicyKind::kvzap);
  EXPECT_TRUE(m.uses_keep);
  const Method ada = parse_method("ada-pyramid-kvzap+kivi2", knobs);
  EXPECT_EQ(ada.config.policy, PolicyKind::kvzap);
  EXPECT_EQ(ada.config.head_allocation, HeadAllocation::ada);
  EXPECT_EQ(ada.config.layer_allocation, LayerAllocation::pyramid);
  EXPECT_EQ(ada.config.codec, CodecKind::kivi2);
  EXPECT_EQ(parse_method("pyramid-kvzap", knobs).config.layer_allocation, LayerAllocation::pyramid);
  EXPECT_EQ(parse_policy("kvzap"), PolicyKind::kvzap);
  EXPECT_EQ(to_string(PolicyKind::kvzap), "kvzap");
  EXPECT_TRUE(policy_scores_rows(PolicyKind::kvzap));
  EXPECT_TRUE(policy_takes_external_scores(PolicyKind::kvzap));
  EXPECT_FALSE(policy_takes_external_scores(PolicyKind::snapkv));
  EXPECT_THROW(parse_method("kvzap-proxy", knobs), std::invalid_argument);
}

TEST(KvzapMethod, SpecTableAcceptsThePolicy) {
  const CacheOption* o = find_cache_option("policy");
  ASSERT_NE(o, nullptr);
  EXPECT_NE(std::string(o->choices).find("kvzap"), std::string::npos);
  CacheConfig c;
  set_cache_option(c, "policy", "kvzap");
  EXPECT_EQ(c.policy, PolicyKind::kvzap);
  EXPECT_EQ(std::get<std::string>(o->get(c)), "kvzap");
}

TEST(KvzapMethod, ScoresComeFromTheEngineOnce) {
  CacheConfig c;
  c.policy = PolicyKind::kvzap;
  c.budget = 16;
  c.validate();
  const PrefillPlan plan = prefill_plan(c);
  EXPECT_TRUE(plan.scoring_pass);
  EXPECT_TRUE(plan.learned_scores);
  c.policy = PolicyKind::kvzip;
  EXPECT_FALSE(prefill_plan(c).learned_scores);
  c.policy = PolicyKind::kvzap;
  c.chunk_mode = ChunkMode::every_chunk;
  EXPECT_THROW(c.validate(), std::invalid_argument);
  c.chunk_mode = ChunkMode::end_of_prompt;
  const auto policy = make_policy(c, 0);
  EXPECT_EQ(policy->kind(), PolicyKind::kvzap);
}

}  // namespace
}  // namespace snapkv
