// every_chunk prefill updates on fp16 rows select before they store
// (kv/core/layer_cache_select.cpp). Held to two references: (1) the simple loop in this file — keep
// the stored rows plus the chunk's, rounded through fp16, run the policy (make_policy) on them,
// keep what it keeps — over several chunks and policies (with and without true queries, one that
// reads values, a random one); (2) for a single chunk, the general append-then-compress path, which
// an end_of_prompt cache takes at end_prompt(). Rows, positions and last scores must match exactly.
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "kv/kv_test_util.h"
#include "snapkv/kv/core/layer_cache.h"
#include "snapkv/kv/core/policy.h"

namespace snapkv {
namespace {

using test::random_normal;
using test::round_fp16;
using test::slice_tokens;
using test::view;

constexpr size_t kHeads = 4, kKv = 2, kD = 16, kW = 6;

struct Case {
  PolicyKind policy;
  QuerySource source;
  const char* name;
};

CacheConfig every_chunk_config(const Case& c) {
  CacheConfig config;
  config.policy = c.policy;
  config.query_source = c.source;
  config.chunk_mode = ChunkMode::every_chunk;
  config.budget = 20;
  config.window = kW;
  config.n_sink = 2;
  config.kernel = 3;
  return config;
}

// The reference state of one KV head: rows as fp16 would store them, and their positions.
struct HeadRef {
  std::vector<float> keys, values;  // [n][kD]
  std::vector<int64_t> positions;   // [n]
  std::vector<float> scores;        // the last selection's, [candidates]
};

// One chunk through the reference: k, v [kKv][s][kD], q [kHeads][s][kD] (the window is its last
// min(s, kW) rows).
void reference_update(std::vector<HeadRef>& heads, EvictionPolicy& policy,
                      const CacheConfig& config, const std::vector<float>& k,
                      const std::vector<float>& v, const std::vector<float>& q, size_t s,
                      size_t first_position) {
  const size_t w = std::min(s, config.window), group = kHeads / kKv;
  std::vector<float> window(kHeads * w * kD);  // [kHeads][w][kD]
  for (size_t h = 0; h < kHeads; ++h) {
    std::copy_n(q.data() + (h * s + s - w) * kD, w * kD, window.data() + h * w * kD);
  }
  for (size_t h = 0; h < kKv; ++h) {
    HeadRef& ref = heads[h];
    for (size_t i = 0; i < s * kD; ++i) {
      ref.keys.push_back(round_fp16(k[h * s * kD + i]));
      ref.values.push_back(round_fp16(v[h * s * kD + i]));
    }
    for (size_t i = 0; i < s; ++i)
      ref.positions.push_back(static_cast<int64_t>(first_position + i));
    const size_t n = ref.positions.size();
    if (n <= config.budget) continue;
    SelectionInput in;
    in.kv_head = h;
    in.head_dim = kD;
    in.n_rows = n;
    in.keys = ref.keys.data();
    in.values = ref.values.data();
    in.positions = ref.positions.data();
    if (config.query_source == QuerySource::queries) {
      in.queries = window.data() + h * group * w * kD;
      in.n_group = group;
      in.n_window = w;
    }
    const SelectionResult r = policy.select(in);
    HeadRef kept;
    for (const uint32_t i : r.keep) {
      kept.keys.insert(kept.keys.end(), ref.keys.begin() + i * kD, ref.keys.begin() + (i + 1) * kD);
      kept.values.insert(kept.values.end(), ref.values.begin() + i * kD,
                         ref.values.begin() + (i + 1) * kD);
      kept.positions.push_back(ref.positions[i]);
    }
    kept.scores = r.scores;
    ref = std::move(kept);
  }
}

void expect_head_equal(const LayerCache& cache, size_t h, const HeadRef& ref,
                       const std::string& what) {
  const auto pos = cache.positions(h);
  ASSERT_EQ(std::vector<int64_t>(pos.begin(), pos.end()), ref.positions) << what;
  std::vector<float> keys(pos.size() * kD), values(pos.size() * kD);
  cache.read_keys(h, keys.data());
  cache.read_values(h, values.data());
  EXPECT_EQ(keys, ref.keys) << what;
  EXPECT_EQ(values, ref.values) << what;
  const auto scores = cache.last_scores(h);
  EXPECT_EQ(std::vector<float>(scores.begin(), scores.end()), ref.scores) << what;
}

const Case kCases[] = {
    {PolicyKind::snapkv, QuerySource::queries, "snapkv"},
    {PolicyKind::snapkv, QuerySource::keys, "snapkv-proxy"},
    {PolicyKind::expected_attention, QuerySource::queries, "expected_attention"},
    {PolicyKind::random, QuerySource::queries, "random"},
    {PolicyKind::knorm, QuerySource::queries, "knorm"},
};

// Every chunk through an every_chunk cache and through reference_update; equal after each.
void check_chunks(std::span<const size_t> chunks, std::span<const Case> cases) {
  for (const Case& c : cases) {
    const CacheConfig config = every_chunk_config(c);
    LayerCache cache(CacheDims{kHeads, kKv, kD}, config);
    std::unique_ptr<EvictionPolicy> policy = make_policy(config, 0);
    std::vector<HeadRef> ref(kKv);
    size_t seen = 0, step = 0;
    for (const size_t s : chunks) {
      const std::vector<float> k = random_normal(kKv * s * kD, 100 + step, 0.5f);
      const std::vector<float> v = random_normal(kKv * s * kD, 200 + step);
      const std::vector<float> q = random_normal(kHeads * s * kD, 300 + step, 0.5f);
      const std::vector<float> q_window = slice_tokens(q, kHeads, s, kD, s - std::min(s, kW), s);
      const Tensor3 qt = view(q_window, kHeads, std::min(s, kW), kD);
      cache.update(view(k, kKv, s, kD), view(v, kKv, s, kD), &qt, UpdateKind::prefill);
      reference_update(ref, *policy, config, k, v, q, s, seen);
      seen += s;
      for (size_t h = 0; h < kKv; ++h) {
        expect_head_equal(
            cache, h, ref[h],
            std::string(c.name) + " chunk " + std::to_string(step) + " head " + std::to_string(h));
      }
      ++step;
    }
    EXPECT_EQ(cache.size(), config.budget) << c.name;
    EXPECT_EQ(cache.compressions(), step - (chunks[0] <= config.budget ? 1 : 0)) << c.name;
  }
}

TEST(LayerCacheSelect, EveryChunkMatchesTheReferenceOverChunks) {
  const size_t chunks[] = {9, 37, 50, 1 + kW, 13};  // the first fits the budget, the rest do not
  check_chunks(chunks, kCases);
}

// snapkv scores keys a tile of 1024 rows at a time, read while it scores (SelectionInput::key_rows)
// where the reference hands the policy all keys at once: chunks over several tiles, the stored
// rows and the chunk's both in the first.
TEST(LayerCacheSelect, LongChunksReadInTilesMatchTheReference) {
  const size_t chunks[] = {1100, 2100};
  check_chunks(chunks, std::span<const Case>(kCases, 2));  // snapkv, snapkv-proxy
}

// The general path (end_of_prompt: append, then compress at end_prompt) reads fp16 store rows a
// tile at a time for snapkv too; held to the reference over all keys at once.
TEST(LayerCacheSelect, EndOfPromptTilesMatchTheReference) {
  constexpr size_t kS = 2100;
  for (const Case& c : std::span<const Case>(kCases, 2)) {
    CacheConfig config = every_chunk_config(c);
    config.chunk_mode = ChunkMode::end_of_prompt;
    LayerCache cache(CacheDims{kHeads, kKv, kD}, config);
    std::unique_ptr<EvictionPolicy> policy = make_policy(config, 0);
    const std::vector<float> k = random_normal(kKv * kS * kD, 17, 0.5f);
    const std::vector<float> v = random_normal(kKv * kS * kD, 18);
    const std::vector<float> q = random_normal(kHeads * kS * kD, 19, 0.5f);
    const std::vector<float> q_window = slice_tokens(q, kHeads, kS, kD, kS - kW, kS);
    const Tensor3 qt = view(q_window, kHeads, kW, kD);
    cache.update(view(k, kKv, kS, kD), view(v, kKv, kS, kD), &qt, UpdateKind::prefill);
    cache.end_prompt();
    std::vector<HeadRef> ref(kKv);
    reference_update(ref, *policy, config, k, v, q, kS, 0);
    for (size_t h = 0; h < kKv; ++h) {
      expect_head_equal(cache, h, ref[h], std::string(c.name) + " head " + std::to_string(h));
    }
  }
}

TEST(LayerCacheSelect, OneChunkMatchesAppendThenCompress) {
  constexpr size_t kS = 90;
  for (const Case& c : kCases) {
    const CacheConfig every = every_chunk_config(c);
    CacheConfig at_end = every;
    at_end.chunk_mode = ChunkMode::end_of_prompt;
    LayerCache fast(CacheDims{kHeads, kKv, kD}, every), general(CacheDims{kHeads, kKv, kD}, at_end);
    const std::vector<float> k = random_normal(kKv * kS * kD, 7, 0.5f);
    const std::vector<float> v = random_normal(kKv * kS * kD, 8);
    const std::vector<float> q = random_normal(kHeads * kW * kD, 9, 0.5f);
    const Tensor3 qt = view(q, kHeads, kW, kD);
    fast.update(view(k, kKv, kS, kD), view(v, kKv, kS, kD), &qt, UpdateKind::prefill);
    general.update(view(k, kKv, kS, kD), view(v, kKv, kS, kD), &qt, UpdateKind::prefill);
    general.end_prompt();
    for (size_t h = 0; h < kKv; ++h) {
      HeadRef ref;
      const auto pos = general.positions(h);
      ref.positions.assign(pos.begin(), pos.end());
      ref.keys.resize(pos.size() * kD);
      ref.values.resize(pos.size() * kD);
      general.read_keys(h, ref.keys.data());
      general.read_values(h, ref.values.data());
      const auto scores = general.last_scores(h);
      ref.scores.assign(scores.begin(), scores.end());
      expect_head_equal(fast, h, ref, std::string(c.name) + " head " + std::to_string(h));
    }
  }
}

// The snapshot of a cache a failed update must leave as it was.
struct CacheState {
  std::vector<HeadRef> heads;
  size_t offset = 0, compressions = 0;
};

CacheState state_of(const LayerCache& cache) {
  CacheState st;
  st.offset = cache.offset();
  st.compressions = cache.compressions();
  for (size_t h = 0; h < kKv; ++h) {
    HeadRef ref;
    const auto pos = cache.positions(h);
    ref.positions.assign(pos.begin(), pos.end());
    ref.keys.resize(pos.size() * kD);
    ref.values.resize(pos.size() * kD);
    cache.read_keys(h, ref.keys.data());
    cache.read_values(h, ref.values.data());
    const auto scores = cache.last_scores(h);
    ref.scores.assign(scores.begin(), scores.end());
    st.heads.push_back(std::move(ref));
  }
  return st;
}

// k's values are checked while its rows are rounded for the policy (no separate pass over k):
// a NaN, an Inf or a value beyond 65504 anywhere in k — in the first tile, a later one, the
// window rows (read apart in proxy mode), or with a policy that takes all keys at once — is still
// the error that names the first bad value, before v's, and the cache is left as it was. Also
// when the chunk fits the budget (no selection).
TEST(LayerCacheSelect, BadKeysAreTheNamedErrorAndLeaveTheCacheUnchanged) {
  constexpr size_t kFirst = 30, kS = 1100;  // the second chunk spans two 1024-row tiles
  struct Bad {
    size_t head, row, col;
    float value;
    const char* what;
  };
  const Bad bads[] = {
      {1, 0, 3, std::numeric_limits<float>::quiet_NaN(), "k holds a non-finite value at [1][0][3]"},
      {0, 1050, 0, 70000.0f, "k holds a value outside the fp16 range at [0][1050][0]"},
      {1, kS - 1, kD - 1, -std::numeric_limits<float>::infinity(),
       "k holds a non-finite value at [1][1099][15]"},
  };
  for (const Case& c : kCases) {
    const CacheConfig config = every_chunk_config(c);
    LayerCache cache(CacheDims{kHeads, kKv, kD}, config);
    const std::vector<float> k0 = random_normal(kKv * kFirst * kD, 40, 0.5f);
    const std::vector<float> v0 = random_normal(kKv * kFirst * kD, 41);
    const std::vector<float> q = random_normal(kHeads * kW * kD, 42, 0.5f);
    const Tensor3 qt = view(q, kHeads, kW, kD);
    cache.update(view(k0, kKv, kFirst, kD), view(v0, kKv, kFirst, kD), &qt, UpdateKind::prefill);
    const CacheState before = state_of(cache);
    const std::vector<float> k = random_normal(kKv * kS * kD, 43, 0.5f);
    std::vector<float> v = random_normal(kKv * kS * kD, 44);
    v[5] = std::numeric_limits<float>::quiet_NaN();  // v is bad too: k is named first
    for (const Bad& bad : bads) {
      std::vector<float> bad_k = k;
      bad_k[(bad.head * kS + bad.row) * kD + bad.col] = bad.value;
      for (const bool bad_v : {false, true}) {
        const std::string label = std::string(c.name) + " " + bad.what + (bad_v ? " + v" : "");
        try {
          cache.update(view(bad_k, kKv, kS, kD), view(bad_v ? v : k, kKv, kS, kD), &qt,
                       UpdateKind::prefill);
          ADD_FAILURE() << label << ": accepted";
        } catch (const std::invalid_argument& e) {
          EXPECT_NE(std::string(e.what()).find(bad.what), std::string::npos) << e.what();
        }
        const CacheState after = state_of(cache);
        EXPECT_EQ(after.offset, before.offset) << label;
        EXPECT_EQ(after.compressions, before.compressions) << label;
        for (size_t h = 0; h < kKv; ++h) {
          EXPECT_EQ(after.heads[h].positions, before.heads[h].positions) << label;
          EXPECT_EQ(after.heads[h].keys, before.heads[h].keys) << label;
          EXPECT_EQ(after.heads[h].values, before.heads[h].values) << label;
          EXPECT_EQ(after.heads[h].scores, before.heads[h].scores) << label;
        }
      }
    }
    // A chunk that fits the budget is not scored first; its bad k is the same error.
    LayerCache roomy(CacheDims{kHeads, kKv, kD}, config);
    std::vector<float> small_k(k.begin(), k.begin() + kKv * kW * kD);
    small_k[kW * kD + 2] = 1e30f;
    EXPECT_THROW(roomy.update(view(small_k, kKv, kW, kD), view(small_k, kKv, kW, kD), &qt,
                              UpdateKind::prefill),
                 std::invalid_argument)
        << c.name;
    EXPECT_EQ(roomy.offset(), 0u) << c.name;
    EXPECT_EQ(roomy.size(), 0u) << c.name;
    // And the cache still takes a good chunk.
    cache.update(view(k, kKv, kS, kD), view(k, kKv, kS, kD), &qt, UpdateKind::prefill);
    EXPECT_EQ(cache.offset(), kFirst + kS) << c.name;
    EXPECT_EQ(cache.size(), config.budget) << c.name;
  }
}

}  // namespace
}  // namespace snapkv
