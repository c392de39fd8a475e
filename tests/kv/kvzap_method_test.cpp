// Policies kvzap and kvzap_snapkv in the cache's vocabulary: the method grammar (prefixes,
// codecs, kvzap-snapkv and kvzap-proxy), the spec table every front end reads (CLI flags, server
// fields, C ABI keys, Python keywords), the config rules they share with kvzip, and the plan that
// tells the engine to run the learned scorer (and, for kvzap-snapkv, to keep the window's queries).
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "snapkv/kv/core/config.h"
#include "snapkv/kv/core/fork.h"
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
  EXPECT_THROW(parse_method("kvzap_snapkv", knobs), std::invalid_argument);
  EXPECT_THROW(parse_method("kvzap-snapkv-proxy", knobs), std::invalid_argument);
  EXPECT_THROW(parse_method("ada-kvzap-", knobs), std::invalid_argument);
}

TEST(KvzapMethod, PriorMethodsNameTheQuerySource) {
  CacheConfig knobs;
  knobs.prior_weight = 0.25;
  const Method with = parse_method("kvzap-snapkv", knobs);
  EXPECT_EQ(with.config.policy, PolicyKind::kvzap_snapkv);
  EXPECT_EQ(with.config.query_source, QuerySource::queries);
  EXPECT_EQ(with.config.prior_weight, 0.25);  // a knob, not part of the name
  EXPECT_TRUE(with.uses_keep);
  const Method without = parse_method("kvzap-proxy", knobs);
  EXPECT_EQ(without.config.policy, PolicyKind::kvzap_snapkv);
  EXPECT_EQ(without.config.query_source, QuerySource::keys);
  const Method ada = parse_method("duo-ada-pyramid-kvzap-proxy+kivi4", knobs);
  EXPECT_EQ(ada.config.policy, PolicyKind::kvzap_snapkv);
  EXPECT_EQ(ada.config.query_source, QuerySource::keys);
  EXPECT_EQ(ada.config.head_allocation, HeadAllocation::duo_ada);
  EXPECT_EQ(ada.config.layer_allocation, LayerAllocation::pyramid);
  EXPECT_EQ(ada.config.codec, CodecKind::kivi4);
  EXPECT_EQ(parse_policy("kvzap_snapkv"), PolicyKind::kvzap_snapkv);
  EXPECT_EQ(to_string(PolicyKind::kvzap_snapkv), "kvzap_snapkv");
  EXPECT_TRUE(policy_scores_rows(PolicyKind::kvzap_snapkv));
  EXPECT_TRUE(policy_takes_external_scores(PolicyKind::kvzap_snapkv));
  EXPECT_TRUE(policy_uses_kvzap(PolicyKind::kvzap_snapkv));
  EXPECT_TRUE(policy_uses_kvzap(PolicyKind::kvzap));
  EXPECT_FALSE(policy_uses_kvzap(PolicyKind::kvzip));
  // The real queries are kept for kvzap-snapkv only: the proxy needs none, plain kvzap neither.
  EXPECT_TRUE(wants_window_queries(with.config));
  EXPECT_FALSE(wants_window_queries(without.config));
  EXPECT_FALSE(wants_window_queries(parse_method("kvzap", knobs).config));
}

TEST(KvzapMethod, SpecTableHoldsThePriorWeight) {
  const CacheOption* o = find_cache_option("prior_weight");
  ASSERT_NE(o, nullptr);
  EXPECT_EQ(o->flag, std::string("prior-weight"));
  CacheConfig c;
  EXPECT_EQ(std::get<double>(o->get(c)), 0.9);  // the default (kv/core/config.h)
  set_cache_option(c, "prior-weight", "0.3");
  EXPECT_EQ(c.prior_weight, 0.3);
  EXPECT_THROW(set_cache_option(c, "prior_weight", "1.5"), std::invalid_argument);
  EXPECT_THROW(set_cache_option(c, "prior_weight", "-0.1"), std::invalid_argument);
  c.prior_weight = 2.0;
  EXPECT_THROW(c.validate(), std::invalid_argument);
  set_cache_option(c, "policy", "kvzap_snapkv");
  EXPECT_EQ(c.policy, PolicyKind::kvzap_snapkv);
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
  c.policy = PolicyKind::kvzap_snapkv;
  EXPECT_TRUE(prefill_plan(c).learned_scores);
  EXPECT_TRUE(prefill_plan(c).window_queries);
  c.query_source = QuerySource::keys;
  EXPECT_TRUE(prefill_plan(c).learned_scores);
  EXPECT_FALSE(prefill_plan(c).window_queries);
  c.chunk_mode = ChunkMode::every_chunk;
  EXPECT_THROW(c.validate(), std::invalid_argument);
  c.chunk_mode = ChunkMode::end_of_prompt;
  c.query_source = QuerySource::auto_select;
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
