// kv/core/fork.h: the shared-prefill rules. Which config fields a fork may change (the policy and
// everything that only acts at compression) and which it may not (what decides the stored rows
// and the kept window queries: chunk mode, codec and its parameters, window); which configs keep
// window queries; the base config serving every target with a fork key.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "snapkv/kv/core/fork.h"

namespace snapkv {
namespace {

CacheConfig base() {
  CacheConfig c;
  c.policy = PolicyKind::snapkv;
  c.chunk_mode = ChunkMode::end_of_prompt;
  c.codec = CodecKind::kivi2;
  c.kivi_group = 8;
  c.kivi_residual = 16;
  c.window = 6;
  return c;
}

using Change = std::pair<std::string, std::function<void(CacheConfig&)>>;

TEST(ForkRules, FieldsThatActOnlyAtCompressionMayDiffer) {
  const std::vector<Change> allowed = {
      {"policy knorm", [](CacheConfig& c) { c.policy = PolicyKind::knorm; }},
      {"policy full", [](CacheConfig& c) { c.policy = PolicyKind::full; }},
      {"policy kvzip", [](CacheConfig& c) { c.policy = PolicyKind::kvzip; }},
      {"policy expected_attention",
       [](CacheConfig& c) { c.policy = PolicyKind::expected_attention; }},
      {"budget", [](CacheConfig& c) { c.budget = 3; }},
      {"n_sink", [](CacheConfig& c) { c.n_sink = 1; }},
      {"pool", [](CacheConfig& c) { c.pool = PoolKind::avg; }},
      {"kernel", [](CacheConfig& c) { c.kernel = 5; }},
      {"keep_window", [](CacheConfig& c) { c.keep_window = false; }},
      {"query_source keys", [](CacheConfig& c) { c.query_source = QuerySource::keys; }},
      {"query_source queries", [](CacheConfig& c) { c.query_source = QuerySource::queries; }},
      {"ada", [](CacheConfig& c) { c.head_allocation = HeadAllocation::ada; }},
      {"pyramid", [](CacheConfig& c) { c.layer_allocation = LayerAllocation::pyramid; }},
      {"decode_budget", [](CacheConfig& c) { c.decode_budget = 64; }},
  };
  for (const auto& [what, change] : allowed) {
    CacheConfig target = base();
    change(target);
    EXPECT_TRUE(can_fork(base(), target)) << what;
    EXPECT_EQ(fork_key(target), fork_key(base())) << what;
  }
}

TEST(ForkRules, FieldsThatDecideTheStoredRowsMustAgree) {
  const std::vector<Change> refused = {
      {"chunk_mode", [](CacheConfig& c) { c.chunk_mode = ChunkMode::every_chunk; }},
      {"codec", [](CacheConfig& c) { c.codec = CodecKind::kivi4; }},
      {"kivi_group", [](CacheConfig& c) { c.kivi_group = 4; }},
      {"kivi_residual", [](CacheConfig& c) { c.kivi_residual = 32; }},
      {"kivi_fp16_sinks", [](CacheConfig& c) { c.kivi_fp16_sinks = 4; }},
      {"window", [](CacheConfig& c) { c.window = 7; }},
  };
  // The zipcache / gear parameters shape their stores: they matter when that codec is used.
  const std::vector<Change> codec_refused = {
      {"zip_salient", [](CacheConfig& c) { c.zip_salient = 0.5; }},
      {"zip_high_bits", [](CacheConfig& c) { c.zip_high_bits = 16; }},
      {"gear_rank", [](CacheConfig& c) { c.gear_rank = 3; }},
      {"gear_sparse", [](CacheConfig& c) { c.gear_sparse = 0.5; }},
      {"gear_bits", [](CacheConfig& c) { c.gear_bits = 4; }},
  };
  for (const auto& [what, change] : codec_refused) {
    for (const CodecKind codec : {CodecKind::zipcache, CodecKind::gear}) {
      CacheConfig b = base(), target = base();
      b.codec = target.codec = codec;
      change(target);
      const bool matters = (codec == CodecKind::zipcache) == what.starts_with("zip");
      EXPECT_EQ(can_fork(b, target), !matters) << what << " " << to_string(codec);
      EXPECT_EQ(fork_key(target) == fork_key(b), !matters) << what;
    }
  }
  for (const auto& [what, change] : refused) {
    CacheConfig target = base();
    change(target);
    EXPECT_FALSE(can_fork(base(), target)) << what;
    EXPECT_NE(fork_key(target), fork_key(base())) << what;
    const auto refusal = fork_refusal(base(), target, true);
    ASSERT_TRUE(refusal.has_value()) << what;
    EXPECT_FALSE(refusal->what.empty()) << what;
  }
  EXPECT_FALSE(fork_key([] {
                 CacheConfig c = base();
                 c.chunk_mode = ChunkMode::every_chunk;
                 return c;
               }())
                   .has_value());
}

TEST(ForkRules, BasesMustHoldAnOpenPromptAndTheQueriesTargetsNeed) {
  CacheConfig full = base();
  full.policy = PolicyKind::full;
  EXPECT_FALSE(can_be_fork_base(full));
  EXPECT_FALSE(can_fork(full, base()));
  CacheConfig every = base();
  every.chunk_mode = ChunkMode::every_chunk;
  EXPECT_FALSE(can_be_fork_base(every));
  EXPECT_TRUE(can_be_fork_base(base()));

  // A base without window queries serves only targets that do not score with them.
  CacheConfig proxy = base();
  proxy.query_source = QuerySource::keys;
  EXPECT_FALSE(wants_window_queries(proxy));
  EXPECT_FALSE(can_fork(proxy, base()));
  EXPECT_TRUE(can_fork(proxy, proxy));
  CacheConfig knorm = base();
  knorm.policy = PolicyKind::knorm;
  EXPECT_TRUE(can_fork(proxy, knorm));
  EXPECT_TRUE(fork_refusal(base(), base(), false).has_value());
  EXPECT_FALSE(fork_refusal(base(), knorm, false).has_value());
}

TEST(ForkRules, WindowQueriesOnlyForEvictingQueryPolicies) {
  for (const PolicyKind p : {PolicyKind::full, PolicyKind::snapkv, PolicyKind::chunkkv,
                             PolicyKind::expected_attention, PolicyKind::knorm, PolicyKind::keydiff,
                             PolicyKind::streaming, PolicyKind::random, PolicyKind::kvzip}) {
    for (const QuerySource q :
         {QuerySource::auto_select, QuerySource::queries, QuerySource::keys}) {
      CacheConfig c = base();
      c.policy = p;
      c.query_source = q;
      const bool expected = (p == PolicyKind::snapkv || p == PolicyKind::chunkkv ||
                             p == PolicyKind::expected_attention) &&
                            q != QuerySource::keys;
      EXPECT_EQ(wants_window_queries(c), expected) << to_string(p) << " " << to_string(q);
    }
  }
}

TEST(ForkRules, TheBaseConfigServesEveryTargetWithAKey) {
  for (const PolicyKind p : {PolicyKind::full, PolicyKind::snapkv, PolicyKind::knorm,
                             PolicyKind::kvzip, PolicyKind::expected_attention}) {
    for (const QuerySource q :
         {QuerySource::auto_select, QuerySource::queries, QuerySource::keys}) {
      CacheConfig target = base();
      target.policy = p;
      target.query_source = q;
      target.budget = 10;
      const CacheConfig b = fork_base_config(target, 100);
      EXPECT_TRUE(can_fork(b, target)) << to_string(p) << " " << to_string(q);
      EXPECT_TRUE(wants_window_queries(b));
      EXPECT_GE(b.budget, 100u);  // evicts nothing
    }
  }
}

}  // namespace
}  // namespace snapkv
