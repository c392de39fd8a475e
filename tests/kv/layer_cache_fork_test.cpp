// LayerCache::fork: a cache forked from a shared end_of_prompt prefill equals, bit for bit, the
// cache a dedicated run with the target config builds from the same updates (every policy, both
// query sources, fp16 and KIVI codecs), and every combination fork cannot honour is refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "kv/kv_test_util.h"
#include "snapkv/kv/core/layer_cache.h"

namespace snapkv {
namespace {

using test::random_normal;
using test::slice_tokens;
using test::view;

constexpr size_t kHeads = 4, kKv = 2, kS = 90, kD = 8, kW = 6;

struct Updates {
  std::vector<float> k, v, q;  // [kKv][kS][kD], [kKv][kS][kD], [kHeads][kS][kD]
};

Updates make_updates(uint64_t seed) {
  return {random_normal(kKv * kS * kD, seed), random_normal(kKv * kS * kD, seed + 1),
          random_normal(kHeads * kS * kD, seed + 2)};
}

// The prefill a session would run: chunks of 40, 44 and 6 tokens, each with its last kW queries
// when pass_queries (as LlamaSession does for query_source != keys).
void prefill(LayerCache& cache, const Updates& u, bool pass_queries) {
  size_t seen = 0;
  for (const size_t len : {40u, 44u, 6u}) {
    const auto k = slice_tokens(u.k, kKv, kS, kD, seen, seen + len);
    const auto v = slice_tokens(u.v, kKv, kS, kD, seen, seen + len);
    const auto q = slice_tokens(u.q, kHeads, kS, kD, seen + len - kW, seen + len);
    const Tensor3 qt = view(q, kHeads, kW, kD);
    cache.update(view(k, kKv, len, kD), view(v, kKv, len, kD), pass_queries ? &qt : nullptr,
                 UpdateKind::prefill);
    seen += len;
  }
}

CacheConfig base_config(CodecKind codec) {
  CacheConfig c;
  c.policy = PolicyKind::snapkv;
  c.codec = codec;
  c.budget = kS;
  c.window = kW;
  c.n_sink = 2;
  c.pool = PoolKind::max;
  c.kernel = 3;
  c.chunk_mode = ChunkMode::end_of_prompt;
  c.kivi_group = 8;
  c.kivi_residual = 16;
  return c;
}

void expect_same(const LayerCache& a, const LayerCache& b, const char* what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  EXPECT_EQ(a.offset(), b.offset()) << what;
  EXPECT_EQ(a.compressions(), b.compressions()) << what;
  const CacheStats sa = a.stats(), sb = b.stats();
  EXPECT_EQ(sa.bytes_stored, sb.bytes_stored) << what;
  for (size_t h = 0; h < kKv; ++h) {
    EXPECT_TRUE(std::ranges::equal(a.positions(h), b.positions(h))) << what;
    EXPECT_TRUE(std::ranges::equal(a.last_scores(h), b.last_scores(h))) << what;
    std::vector<float> ka(a.size() * kD), kb(b.size() * kD), va(ka.size()), vb(kb.size());
    a.read_keys(h, ka.data());
    b.read_keys(h, kb.data());
    a.read_values(h, va.data());
    b.read_values(h, vb.data());
    EXPECT_EQ(ka, kb) << what;
    EXPECT_EQ(va, vb) << what;
  }
}

TEST(LayerCacheFork, EqualsADedicatedCacheForEveryPolicyAndCodec) {
  const Updates u = make_updates(41);
  for (const CodecKind codec : {CodecKind::fp16, CodecKind::kivi2}) {
    LayerCache base({kHeads, kKv, kD}, base_config(codec), 3);
    prefill(base, u, true);
    for (const PolicyKind policy : {PolicyKind::full, PolicyKind::snapkv, PolicyKind::streaming,
                                    PolicyKind::chunkkv, PolicyKind::knorm, PolicyKind::random,
                                    PolicyKind::keydiff, PolicyKind::expected_attention}) {
      for (const QuerySource source : {QuerySource::auto_select, QuerySource::keys}) {
        CacheConfig target = base_config(codec);
        target.policy = policy;
        target.query_source = source;
        target.budget = 23;
        target.keep_window = source == QuerySource::keys;  // vary a selection knob too
        target.chunk_size = 4;
        target.seed = 5;
        LayerCache dedicated({kHeads, kKv, kD}, target, 3);
        prefill(dedicated, u, source != QuerySource::keys);
        LayerCache forked = base.fork(target, 3);
        dedicated.end_prompt();
        forked.end_prompt();
        const std::string what = std::string(to_string(policy)) + " " +
                                 std::string(to_string(source)) + " " +
                                 std::string(to_string(codec));
        expect_same(forked, dedicated, what.c_str());
        if (policy != PolicyKind::full) {
          EXPECT_EQ(forked.size(), 23u) << what;
        }
        // Both go on identically (decode appends after the compressed prompt).
        const auto k1 = random_normal(kKv * kD, 7), v1 = random_normal(kKv * kD, 8);
        forked.update(view(k1, kKv, 1, kD), view(v1, kKv, 1, kD));
        dedicated.update(view(k1, kKv, 1, kD), view(v1, kKv, 1, kD));
        expect_same(forked, dedicated, what.c_str());
      }
    }
    // The base is untouched by its forks: still open, every row present.
    EXPECT_EQ(base.size(), kS);
    EXPECT_EQ(base.compressions(), 0u);
  }
}

TEST(LayerCacheFork, RefusesWhatItCannotReproduce) {
  const Updates u = make_updates(43);
  const CacheConfig base_cfg = base_config(CodecKind::fp16);
  LayerCache base({kHeads, kKv, kD}, base_cfg);
  CacheConfig target = base_cfg;
  target.budget = 20;
  EXPECT_THROW((void)base.fork(target, 0), std::invalid_argument);  // nothing prefilled yet
  prefill(base, u, true);
  EXPECT_NO_THROW((void)base.fork(target, 0));

  CacheConfig other = target;
  other.codec = CodecKind::kivi2;
  EXPECT_THROW((void)base.fork(other, 0), std::invalid_argument);
  other = target;
  other.window = kW + 1;
  EXPECT_THROW((void)base.fork(other, 0), std::invalid_argument);
  other = target;
  other.chunk_mode = ChunkMode::every_chunk;
  EXPECT_THROW((void)base.fork(other, 0), std::invalid_argument);

  // A base prefilled without queries cannot serve a target that scores with them.
  LayerCache proxy_base({kHeads, kKv, kD}, base_cfg);
  prefill(proxy_base, u, false);
  EXPECT_THROW((void)proxy_base.fork(target, 0), std::invalid_argument);
  other = target;
  other.query_source = QuerySource::keys;
  EXPECT_NO_THROW((void)proxy_base.fork(other, 0));

  // Once the prompt has ended (compressed), the rows a target might want are gone.
  base.end_prompt();
  EXPECT_THROW((void)base.fork(target, 0), std::invalid_argument);
  // every_chunk bases never hold an open prompt.
  CacheConfig every = base_cfg;
  every.chunk_mode = ChunkMode::every_chunk;
  LayerCache every_base({kHeads, kKv, kD}, every);
  prefill(every_base, u, true);
  EXPECT_THROW((void)every_base.fork(target, 0), std::invalid_argument);
}

}  // namespace
}  // namespace snapkv
