// LayerCache: the cache contract (README.md, "The library") and SnapKV's documented behaviour on
// the cache object (compressed shape and fp16 storage, budget >= S keeps all, eviction_ratio,
// keep_rate, decode growth, determinism, offset vs size across chunks and decode), query vs proxy
// mode, GQA scores vs a double reference, both chunk modes, accounting, every invalid input.
#include "snapkv/kv/core/layer_cache.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "kv/kv_test_util.h"
#include "plain_config.h"
#include "snapkv/kv/core/snapkv_score.h"

namespace snapkv {
using snapkv::test::plain_config;
namespace {

using test::random_normal;
using test::round_fp16;
using test::slice_tokens;
using test::view;

struct Prompt {
  size_t n_kv, s, d;
  std::vector<float> k, v;
};

Prompt make_prompt(size_t n_kv, size_t s, size_t d, uint64_t seed) {
  return {n_kv, s, d, random_normal(n_kv * s * d, seed), random_normal(n_kv * s * d, seed + 1000)};
}

CacheConfig small_config(size_t budget = 24) {
  CacheConfig config = plain_config();
  config.budget = budget;
  config.window = 6;
  config.n_sink = 2;
  return config;
}

void decode_one(LayerCache& cache, uint64_t seed) {
  const CacheDims dims = cache.dims();
  const auto k = random_normal(dims.n_kv_heads * dims.head_dim, seed);
  const auto v = random_normal(dims.n_kv_heads * dims.head_dim, seed + 1);
  cache.update(view(k, dims.n_kv_heads, 1, dims.head_dim),
               view(v, dims.n_kv_heads, 1, dims.head_dim));
}

TEST(LayerCache, PrefillCompressesToBudgetAndStoresFp16Rows) {
  const CacheDims dims{4, 2, 16};
  const auto p = make_prompt(2, 100, 16, 1);
  LayerCache cache(dims, small_config());
  cache.update(view(p.k, 2, 100, 16), view(p.v, 2, 100, 16));
  EXPECT_EQ(cache.offset(), 100u);
  EXPECT_EQ(cache.size(), 24u);
  EXPECT_EQ(cache.compressions(), 1u);
  for (size_t h = 0; h < 2; ++h) {
    const auto pos = cache.positions(h);
    ASSERT_EQ(pos.size(), 24u);
    EXPECT_TRUE(std::is_sorted(pos.begin(), pos.end()));
    EXPECT_EQ(pos[0], 0);
    EXPECT_EQ(pos[1], 1);
    EXPECT_EQ(cache.keys(h).rows(), 24u);
    EXPECT_EQ(cache.keys(h).bytes(), 24u * 16 * sizeof(fp16_t));
    std::vector<float> keys(24 * 16), values(24 * 16);
    cache.read_keys(h, keys.data());
    cache.read_values(h, values.data());
    for (size_t i = 0; i < 24; ++i) {
      for (size_t c = 0; c < 16; ++c) {
        const size_t src = (h * 100 + static_cast<size_t>(pos[i])) * 16 + c;
        ASSERT_EQ(keys[i * 16 + c], round_fp16(p.k[src]));
        ASSERT_EQ(values[i * 16 + c], round_fp16(p.v[src]));
      }
    }
    EXPECT_EQ(cache.last_scores(h).size(), 100u);
  }
  const CacheStats s = cache.stats();
  EXPECT_EQ(s.tokens_seen, 100u);
  EXPECT_EQ(s.tokens_kept, 24u);
  EXPECT_EQ(s.bytes_stored, 2u * 2 * 24 * 16 * 2);      // heads * (K, V) * rows * D * 2 bytes
  EXPECT_EQ(s.bytes_full_fp16, 100u * 2 * 16 * 2 * 2);  // seen * heads * D * (K, V) * 2 bytes
  EXPECT_GT(cache.eviction_ratio(), 1.0);
  EXPECT_DOUBLE_EQ(cache.eviction_ratio(), 100.0 / 24.0);
  EXPECT_GT(cache.keep_rate(), 0.0);
  EXPECT_LE(cache.keep_rate(), 1.0);
}

TEST(LayerCache, BudgetAtLeastPromptKeepsAll) {
  const auto p = make_prompt(1, 24, 8, 2);
  LayerCache cache({1, 1, 8}, small_config(24));
  cache.update(view(p.k, 1, 24, 8), view(p.v, 1, 24, 8));
  EXPECT_EQ(cache.size(), 24u);
  EXPECT_EQ(cache.compressions(), 0u);
  EXPECT_DOUBLE_EQ(cache.eviction_ratio(), 1.0);
  EXPECT_DOUBLE_EQ(cache.keep_rate(), 1.0);
  EXPECT_TRUE(cache.last_scores(0).empty());
  const LayerCache empty({1, 1, 8}, small_config());
  EXPECT_DOUBLE_EQ(empty.keep_rate(), 1.0);
  EXPECT_DOUBLE_EQ(empty.eviction_ratio(), 1.0);
}

TEST(LayerCache, OffsetTracksTruePositionThroughChunksAndDecode) {
  const auto p = make_prompt(2, 90, 8, 3);
  CacheConfig config = small_config(20);
  config.keep_window = true;  // so the newest row is always among the kept ones
  LayerCache cache({2, 2, 8}, config);
  size_t seen = 0;
  for (const size_t len : {30u, 35u, 25u}) {
    const auto k = slice_tokens(p.k, 2, 90, 8, seen, seen + len);
    const auto v = slice_tokens(p.v, 2, 90, 8, seen, seen + len);
    cache.update(view(k, 2, len, 8), view(v, 2, len, 8));
    seen += len;
    EXPECT_EQ(cache.offset(), seen);
    EXPECT_EQ(cache.size(), 20u);  // every_chunk: the budget stays capped
    EXPECT_EQ(cache.positions(1).back(), static_cast<int64_t>(seen - 1));
  }
  for (size_t step = 0; step < 5; ++step) {
    decode_one(cache, 100 + step);
    EXPECT_EQ(cache.offset(), 91 + step);
    EXPECT_EQ(cache.size(), 21 + step);  // decode appends, never evicts
    EXPECT_EQ(cache.positions(0).back(), static_cast<int64_t>(90 + step));
  }
  EXPECT_EQ(cache.compressions(), 3u);
}

TEST(LayerCache, DeterministicAndCloneIsIndependent) {
  const auto p = make_prompt(2, 80, 8, 4);
  CacheConfig config = small_config();
  config.pool = PoolKind::max;
  config.kernel = 3;
  LayerCache a({2, 2, 8}, config), b({2, 2, 8}, config);
  a.update(view(p.k, 2, 80, 8), view(p.v, 2, 80, 8));
  b.update(view(p.k, 2, 80, 8), view(p.v, 2, 80, 8));
  LayerCache c = a.clone();
  for (size_t h = 0; h < 2; ++h) {
    EXPECT_TRUE(std::ranges::equal(a.positions(h), b.positions(h)));
    EXPECT_TRUE(std::ranges::equal(a.last_scores(h), b.last_scores(h)));
  }
  decode_one(a, 9);
  EXPECT_EQ(c.size(), 24u);
  EXPECT_EQ(a.size(), 25u);
  decode_one(c, 9);
  std::vector<float> ka(25 * 8), kc(25 * 8);
  a.read_keys(1, ka.data());
  c.read_keys(1, kc.data());
  EXPECT_EQ(ka, kc);
}

TEST(LayerCache, QueryModeScoresWithTheCallersQueriesPerGqaGroup) {
  const size_t n_heads = 8, n_kv = 2, s = 64, d = 16, w = 6;
  const auto p = make_prompt(n_kv, s, d, 5);
  const auto q = random_normal(n_heads * w * d, 6);
  LayerCache cache({n_heads, n_kv, d}, small_config());
  const Tensor3 qt = view(q, n_heads, w, d);
  cache.update(view(p.k, n_kv, s, d), view(p.v, n_kv, s, d), &qt);
  for (size_t h = 0; h < n_kv; ++h) {
    // Candidates were all rows; the store holds their fp16 rounding, which the policy saw.
    std::vector<float> keys(s * d);
    for (size_t i = 0; i < s * d; ++i) keys[i] = round_fp16(p.k[h * s * d + i]);
    std::vector<double> ref(s);
    window_scores_ref(ref.data(), keys.data(), s, d, q.data() + h * 4 * w * d, 4, w, true);
    const auto got = cache.last_scores(h);
    for (size_t j = 0; j < s; ++j) EXPECT_NEAR(got[j], ref[j], 1e-5 * ref[j] + 1e-12) << j;
  }
  // Proxy mode on the same keys gives other scores.
  CacheConfig proxy = small_config();
  proxy.query_source = QuerySource::keys;
  LayerCache proxy_cache({n_heads, n_kv, d}, proxy);
  proxy_cache.update(view(p.k, n_kv, s, d), view(p.v, n_kv, s, d), &qt);
  EXPECT_FALSE(std::ranges::equal(proxy_cache.last_scores(0), cache.last_scores(0)));
}

TEST(LayerCache, QueryModeFindsAPlantedKeyThatProxyModeMisses) {
  // Key 40 aligns with the true queries but not with the other keys: query mode keeps it.
  const size_t s = 80, d = 16, w = 6;
  auto p = make_prompt(1, s, d, 7);
  std::vector<float> q(w * d, 0.0f);
  for (size_t c = 0; c < d; ++c) p.k[40 * d + c] = 0.0f;
  p.k[40 * d + 0] = 6.0f;
  for (size_t r = 0; r < w; ++r) q[r * d + 0] = 6.0f;
  for (size_t i = 0; i < s; ++i) p.k[i * d + 0] = i == 40 ? 6.0f : 0.0f;  // only key 40 on axis 0
  const Tensor3 qt = view(q, 1, w, d);
  LayerCache query_cache({1, 1, d}, small_config(8));
  query_cache.update(view(p.k, 1, s, d), view(p.v, 1, s, d), &qt);
  const auto kept = query_cache.positions(0);
  EXPECT_NE(std::find(kept.begin(), kept.end(), 40), kept.end());
  CacheConfig proxy = small_config(8);
  proxy.query_source = QuerySource::keys;
  LayerCache proxy_cache({1, 1, d}, proxy);
  proxy_cache.update(view(p.k, 1, s, d), view(p.v, 1, s, d), &qt);
  const auto proxy_kept = proxy_cache.positions(0);
  EXPECT_EQ(std::find(proxy_kept.begin(), proxy_kept.end(), 40), proxy_kept.end());
}

TEST(LayerCache, EndOfPromptEqualsOneShotCompression) {
  const size_t n_heads = 4, n_kv = 2, s = 96, d = 8, w = 6;
  const auto p = make_prompt(n_kv, s, d, 8);
  const auto q_all = random_normal(n_heads * s * d, 9);  // queries of every prompt position
  for (const bool with_queries : {false, true}) {
    CacheConfig config = small_config(20);
    config.pool = PoolKind::avg;
    config.kernel = 3;
    LayerCache one_shot({n_heads, n_kv, d}, config);
    const auto q_last = slice_tokens(q_all, n_heads, s, d, s - w, s);
    const Tensor3 q_last_t = view(q_last, n_heads, w, d);
    one_shot.update(view(p.k, n_kv, s, d), view(p.v, n_kv, s, d),
                    with_queries ? &q_last_t : nullptr);

    config.chunk_mode = ChunkMode::end_of_prompt;
    LayerCache chunked({n_heads, n_kv, d}, config);
    size_t seen = 0;
    for (const size_t len : {40u, 50u, 6u}) {
      const auto k = slice_tokens(p.k, n_kv, s, d, seen, seen + len);
      const auto v = slice_tokens(p.v, n_kv, s, d, seen, seen + len);
      const auto q = slice_tokens(q_all, n_heads, s, d, seen + len - w, seen + len);
      const Tensor3 qt = view(q, n_heads, w, d);
      chunked.update(view(k, n_kv, len, d), view(v, n_kv, len, d), with_queries ? &qt : nullptr);
      seen += len;
      EXPECT_EQ(chunked.size(), seen);  // nothing dropped before the prompt is complete
    }
    EXPECT_EQ(chunked.compressions(), 0u);
    chunked.end_prompt();
    chunked.end_prompt();  // idempotent
    EXPECT_EQ(chunked.compressions(), 1u);
    EXPECT_EQ(chunked.size(), 20u);
    for (size_t h = 0; h < n_kv; ++h) {
      EXPECT_TRUE(std::ranges::equal(chunked.positions(h), one_shot.positions(h)));
      EXPECT_TRUE(std::ranges::equal(chunked.last_scores(h), one_shot.last_scores(h)));
    }
    EXPECT_EQ(chunked.stats().bytes_stored, one_shot.stats().bytes_stored);
  }
}

TEST(LayerCache, EndOfPromptCompressesBeforeTheFirstDecodeStep) {
  const auto p = make_prompt(1, 50, 8, 10);
  CacheConfig config = small_config(20);
  config.chunk_mode = ChunkMode::end_of_prompt;
  LayerCache cache({1, 1, 8}, config);
  cache.update(view(p.k, 1, 50, 8), view(p.v, 1, 50, 8));
  EXPECT_EQ(cache.size(), 50u);
  decode_one(cache, 11);
  EXPECT_EQ(cache.size(), 21u);
  EXPECT_EQ(cache.offset(), 51u);
  EXPECT_EQ(cache.positions(0).back(), 50);
}

TEST(LayerCache, UpdateKindOverridesTheSizeRule) {
  const auto p = make_prompt(1, 40, 8, 12);
  LayerCache cache({1, 1, 8}, small_config(20));
  cache.update(view(p.k, 1, 40, 8), view(p.v, 1, 40, 8), nullptr, UpdateKind::decode);
  EXPECT_EQ(cache.size(), 40u);  // a decode update never evicts, whatever S
  const auto k1 = random_normal(8, 13);
  cache.update(view(k1, 1, 1, 8), view(k1, 1, 1, 8), nullptr, UpdateKind::prefill);
  EXPECT_EQ(cache.size(), 20u);  // a one-token prefill chunk enforces the budget
}

TEST(LayerCache, FullPolicyNeverEvicts) {
  const auto p = make_prompt(1, 300, 4, 14);
  CacheConfig config;
  config.policy = PolicyKind::full;
  LayerCache cache({1, 1, 4}, config);
  cache.update(view(p.k, 1, 300, 4), view(p.v, 1, 300, 4));
  cache.end_prompt();
  EXPECT_EQ(cache.size(), 300u);
  EXPECT_EQ(cache.stats().bytes_stored, cache.stats().bytes_full_fp16);
}

// Every invalid input throws std::invalid_argument naming what is wrong and leaves the cache as
// it was.
TEST(LayerCache, InvalidInputsThrowAndLeaveTheCacheUnchanged) {
  const size_t n_heads = 4, n_kv = 2, s = 10, d = 8;
  const auto p = make_prompt(n_kv, s, d, 15);
  CacheConfig config = small_config(6);
  LayerCache cache({n_heads, n_kv, d}, config);
  cache.update(view(p.k, n_kv, s, d), view(p.v, n_kv, s, d));
  const auto before_positions =
      std::vector<int64_t>(cache.positions(0).begin(), cache.positions(0).end());
  const CacheStats before = cache.stats();

  auto bad_k = p.k;
  bad_k[17] = std::numeric_limits<float>::quiet_NaN();
  auto bad_v = p.v;
  bad_v[3] = std::numeric_limits<float>::infinity();
  const auto q_ok = random_normal(n_heads * 2 * d, 16);
  auto q_nan = q_ok;
  q_nan[5] = -std::numeric_limits<float>::infinity();
  const auto q3 = random_normal(n_heads * 11 * d, 17);
  const Tensor3 k_ok = view(p.k, n_kv, s, d), v_ok = view(p.v, n_kv, s, d);
  const Tensor3 q_wrong_heads = view(q_ok, 2, 4, d), q_wrong_dim = view(q_ok, n_heads, 4, 4);
  const Tensor3 q_too_long = view(q3, n_heads, 11, d), q_bad = view(q_nan, n_heads, 2, d);

  struct Case {
    const char* name;
    Tensor3 k, v;
    const Tensor3* q;
    const char* expect_in_message;
  };
  const Case cases[] = {
      {"k head count", view(p.k, 1, 2 * s, d), v_ok, nullptr, "k head count, got 1"},
      {"v head count", k_ok, view(p.v, 1, 2 * s, d), nullptr, "v head count, got 1"},
      {"k head_dim", view(p.k, n_kv, 2 * s, d / 2), v_ok, nullptr, "k head_dim, got 4"},
      {"S == 0", view(p.k, n_kv, 0, d), view(p.v, n_kv, 0, d), nullptr, "S = 0"},
      {"v S differs", k_ok, view(p.v, n_kv, s - 1, d), nullptr, "v token count"},
      {"null data", Tensor3{nullptr, n_kv, s, d}, v_ok, nullptr, "k data"},
      {"NaN in k", view(bad_k, n_kv, s, d), v_ok, nullptr, "k holds a non-finite value"},
      {"Inf in v", k_ok, view(bad_v, n_kv, s, d), nullptr, "v holds a non-finite value"},
      {"q heads", k_ok, v_ok, &q_wrong_heads, "q_window head count, got 2"},
      {"q head_dim", k_ok, v_ok, &q_wrong_dim, "q_window head_dim, got 4"},
      {"q longer than S", k_ok, v_ok, &q_too_long, "q_window has more rows"},
      {"Inf in q", k_ok, v_ok, &q_bad, "q_window holds a non-finite value"},
  };
  for (const Case& c : cases) {
    try {
      cache.update(c.k, c.v, c.q);
      ADD_FAILURE() << c.name << ": no exception";
    } catch (const std::invalid_argument& e) {
      const std::string msg = e.what();
      EXPECT_EQ(msg.rfind("[layer_cache] ", 0), 0u) << msg;
      EXPECT_NE(msg.find(c.expect_in_message), std::string::npos) << c.name << ": " << msg;
      EXPECT_NE(msg.find("expected"), std::string::npos) << msg;
    }
    EXPECT_EQ(cache.offset(), before.tokens_seen) << c.name;
    EXPECT_EQ(cache.stats().bytes_stored, before.bytes_stored) << c.name;
    EXPECT_TRUE(std::ranges::equal(cache.positions(0), before_positions)) << c.name;
  }
  EXPECT_THROW(cache.positions(2), std::invalid_argument);
  EXPECT_THROW(cache.keys(7), std::invalid_argument);
  EXPECT_THROW(cache.last_scores(2), std::invalid_argument);

  CacheConfig needs_queries = config;
  needs_queries.query_source = QuerySource::queries;
  LayerCache strict({n_heads, n_kv, d}, needs_queries);
  EXPECT_THROW(strict.update(k_ok, v_ok), std::invalid_argument);
  EXPECT_EQ(strict.offset(), 0u);
  EXPECT_NO_THROW(strict.update(view(p.k, n_kv, 1, d), view(p.v, n_kv, 1, d)));  // decode: fine
}

// Keys or values that fit fp32 but not fp16 (stored rows are fp16 or fp16-based for every codec):
// one named error for every codec and policy, in update() and attend(), instead of infinities
// turning scores into zeros (keys x 1e30) for one codec and an error for another.
TEST(LayerCache, ValuesOutsideTheFp16RangeAreOneNamedErrorForEveryCodec) {
  const size_t n_heads = 2, n_kv = 2, s = 40, d = 8;
  const auto p = make_prompt(n_kv, s, d, 21);
  for (const CodecKind codec : {CodecKind::fp16, CodecKind::kivi2, CodecKind::kivi4}) {
    for (const float big : {70000.0f, 1e30f, -65520.0f}) {
      CacheConfig config = small_config(8);
      config.codec = codec;
      if (codec != CodecKind::fp16) config.kivi_group = 8, config.kivi_residual = 8;
      LayerCache cache({n_heads, n_kv, d}, config);
      auto k = p.k;
      k[3 * d + 1] = big;
      auto v = p.v;
      v[s * d + 2] = big;
      const std::string label = std::string(to_string(codec)) + " " + std::to_string(big);
      for (const bool in_k : {true, false}) {
        const Tensor3 kt = view(in_k ? k : p.k, n_kv, s, d);
        const Tensor3 vt = view(in_k ? p.v : v, n_kv, s, d);
        const std::string where = in_k ? "k holds a value outside the fp16 range at [0][3][1]"
                                       : "v holds a value outside the fp16 range at [1][0][2]";
        try {
          cache.update(kt, vt);
          ADD_FAILURE() << label << ": update accepted it";
        } catch (const std::invalid_argument& e) {
          EXPECT_NE(std::string(e.what()).find(where), std::string::npos) << e.what();
          EXPECT_NE(std::string(e.what()).find("|x| <= 65504"), std::string::npos) << e.what();
        }
        EXPECT_EQ(cache.offset(), 0u) << label;
        std::vector<float> out(n_heads * s * d);
        const auto q = random_normal(n_heads * s * d, 22);
        EXPECT_THROW(cache.attend(out.data(), view(q, n_heads, s, d), kt, vt),
                     std::invalid_argument)
            << label;
      }
      // The largest finite fp16 magnitude itself is accepted.
      auto edge = p.k;
      edge[0] = -65504.0f;
      EXPECT_NO_THROW(cache.update(view(edge, n_kv, s, d), view(p.v, n_kv, s, d))) << label;
    }
  }
}

TEST(LayerCache, InvalidDimsAndConfigsThrowAtConstruction) {
  EXPECT_THROW(LayerCache({6, 4, 8}, CacheConfig{}), std::invalid_argument);  // 6 % 4 != 0
  EXPECT_THROW(LayerCache({0, 1, 8}, CacheConfig{}), std::invalid_argument);
  EXPECT_THROW(LayerCache({4, 0, 8}, CacheConfig{}), std::invalid_argument);
  EXPECT_THROW(LayerCache({4, 2, 0}, CacheConfig{}), std::invalid_argument);
  CacheConfig bad;
  bad.kernel = 2;
  EXPECT_THROW(LayerCache({4, 2, 8}, bad), std::invalid_argument);
  bad = CacheConfig{};
  bad.budget = 2;  // < n_sink 4
  EXPECT_THROW(LayerCache({4, 2, 8}, bad), std::invalid_argument);
  bad = CacheConfig{};
  bad.window = 0;
  EXPECT_THROW(LayerCache({4, 2, 8}, bad), std::invalid_argument);
}

TEST(LayerCache, EveryPolicyRunsThroughTheCache) {
  const auto p = make_prompt(2, 70, 8, 18);
  for (const auto kind : {PolicyKind::snapkv, PolicyKind::streaming, PolicyKind::random,
                          PolicyKind::knorm, PolicyKind::chunkkv}) {
    CacheConfig config = small_config(20);
    config.policy = kind;
    config.chunk_size = 4;
    LayerCache cache({2, 2, 8}, config);
    cache.update(view(p.k, 2, 70, 8), view(p.v, 2, 70, 8));
    EXPECT_EQ(cache.size(), 20u) << to_string(kind);
    EXPECT_EQ(cache.positions(0)[0], 0) << to_string(kind);
    decode_one(cache, 19);
    EXPECT_EQ(cache.size(), 21u);
    EXPECT_EQ(cache.offset(), 71u);
  }
}

}  // namespace
}  // namespace snapkv
