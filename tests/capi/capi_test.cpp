// The C ABI (include/snapkv/snapkv.h): the same results as the C++ caches it wraps (bit for bit:
// same config, same inputs), the config string parsed key by key, and every misuse a status code
// plus a named message with nothing changed.
#include "snapkv/snapkv.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "snapkv/kv/core/builder.h"

namespace {

// Deterministic values in [-1, 1] (splitmix64).
std::vector<float> values(size_t n, uint64_t seed) {
  std::vector<float> v(n);
  uint64_t s = seed;
  for (float& x : v) {
    s += 0x9E3779B97F4A7C15ull;
    uint64_t z = s;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    x = static_cast<float>(static_cast<double>(z >> 11) / 4503599627370496.0 - 1.0);
  }
  return v;
}

struct Caches {
  snapkv_caches* p = nullptr;
  ~Caches() { snapkv_caches_free(p); }
};

std::string last_error() {
  return snapkv_last_error();
}

constexpr snapkv_model_dims kDims = {2, 4, 2, 8};  // layers, heads, kv heads, head_dim

TEST(CApi, MatchesTheCppCachesBitForBit) {
  const char* config =
      "policy=snapkv budget=12 window=4 sinks=2 pool=max kernel=3 codec=kivi4 "
      "kivi_group=8 kivi_residual=8 chunk_mode=every_chunk";
  Caches c;
  ASSERT_EQ(snapkv_caches_create(&kDims, config, &c.p), SNAPKV_OK) << last_error();

  snapkv::CacheConfig cfg;
  cfg.policy = snapkv::PolicyKind::snapkv;
  cfg.budget = 12;
  cfg.window = 4;
  cfg.n_sink = 2;
  cfg.pool = snapkv::PoolKind::max;
  cfg.kernel = 3;
  cfg.codec = snapkv::CodecKind::kivi4;
  cfg.kivi_group = 8;
  cfg.kivi_residual = 8;
  cfg.chunk_mode = snapkv::ChunkMode::every_chunk;  // each update compresses (the default waits)
  std::vector<snapkv::LayerCache> ref =
      snapkv::build_caches({kDims.n_layers, kDims.n_heads, kDims.n_kv_heads, kDims.head_dim}, cfg);

  const size_t s = 30, w = 4, d = kDims.head_dim;
  for (size_t layer = 0; layer < kDims.n_layers; ++layer) {
    const auto k = values(kDims.n_kv_heads * s * d, 10 + layer);
    const auto v = values(kDims.n_kv_heads * s * d, 20 + layer);
    const auto q = values(kDims.n_heads * s * d, 30 + layer);
    const auto qw = values(kDims.n_heads * w * d, 40 + layer);
    std::vector<float> out_c(kDims.n_heads * s * d), out_ref(out_c.size());
    ASSERT_EQ(snapkv_attend(c.p, layer, out_c.data(), q.data(), k.data(), v.data(), s), SNAPKV_OK);
    ref[layer].attend(out_ref.data(), {q.data(), kDims.n_heads, s, d},
                      {k.data(), kDims.n_kv_heads, s, d}, {v.data(), kDims.n_kv_heads, s, d});
    EXPECT_EQ(out_c, out_ref);
    ASSERT_EQ(snapkv_update(c.p, layer, k.data(), v.data(), s, qw.data(), w, SNAPKV_UPDATE_AUTO),
              SNAPKV_OK)
        << last_error();
    const snapkv::Tensor3 qwt{qw.data(), kDims.n_heads, w, d};
    ref[layer].update({k.data(), kDims.n_kv_heads, s, d}, {v.data(), kDims.n_kv_heads, s, d}, &qwt);
    for (size_t h = 0; h < kDims.n_kv_heads; ++h) {
      std::vector<int64_t> pos(64);
      size_t n = 0;
      ASSERT_EQ(snapkv_kept_positions(c.p, layer, h, pos.data(), pos.size(), &n), SNAPKV_OK);
      pos.resize(n);
      const auto want = ref[layer].positions(h);
      EXPECT_EQ(pos, std::vector<int64_t>(want.begin(), want.end()));
      EXPECT_EQ(n, 12u);
    }
    // One decode step: attention over the compressed rows, then append.
    const auto k1 = values(kDims.n_kv_heads * d, 50 + layer);
    const auto v1 = values(kDims.n_kv_heads * d, 60 + layer);
    const auto q1 = values(kDims.n_heads * d, 70 + layer);
    std::vector<float> o1(kDims.n_heads * d), o1_ref(o1.size());
    ASSERT_EQ(snapkv_attend(c.p, layer, o1.data(), q1.data(), k1.data(), v1.data(), 1), SNAPKV_OK);
    ref[layer].attend(o1_ref.data(), {q1.data(), kDims.n_heads, 1, d},
                      {k1.data(), kDims.n_kv_heads, 1, d}, {v1.data(), kDims.n_kv_heads, 1, d});
    EXPECT_EQ(o1, o1_ref);
    ASSERT_EQ(snapkv_update(c.p, layer, k1.data(), v1.data(), 1, nullptr, 0, SNAPKV_UPDATE_AUTO),
              SNAPKV_OK);
    ref[layer].update({k1.data(), kDims.n_kv_heads, 1, d}, {v1.data(), kDims.n_kv_heads, 1, d});
  }
  snapkv_stats st{};
  ASSERT_EQ(snapkv_total_stats(c.p, &st), SNAPKV_OK);
  const snapkv::CacheStats want = snapkv::total_stats(ref);
  EXPECT_EQ(st.tokens_seen, 31u);
  EXPECT_EQ(st.tokens_kept, 13u);
  EXPECT_EQ(st.tokens_seen, want.tokens_seen);
  EXPECT_EQ(st.tokens_kept, want.tokens_kept);
  EXPECT_EQ(st.bytes_stored, want.bytes_stored);
  EXPECT_EQ(st.bytes_full_fp16, want.bytes_full_fp16);
  EXPECT_EQ(st.eviction_ratio, want.eviction_ratio());
  EXPECT_EQ(st.keep_rate, want.keep_rate());
  snapkv_stats l1{};
  ASSERT_EQ(snapkv_layer_stats(c.p, 1, &l1), SNAPKV_OK);
  EXPECT_EQ(l1.bytes_stored, ref[1].stats().bytes_stored);
}

TEST(CApi, EndOfPromptCompressesEveryLayerOnce) {
  Caches c;
  ASSERT_EQ(
      snapkv_caches_create(&kDims, "chunk_mode=end_of_prompt,budget=8;window=4 sinks=1", &c.p),
      SNAPKV_OK)
      << last_error();
  const size_t s = 20, d = kDims.head_dim;
  for (size_t layer = 0; layer < kDims.n_layers; ++layer) {
    const auto k = values(kDims.n_kv_heads * s * d, 80 + layer);
    const auto v = values(kDims.n_kv_heads * s * d, 90 + layer);
    ASSERT_EQ(snapkv_update(c.p, layer, k.data(), v.data(), s, nullptr, 0, SNAPKV_UPDATE_PREFILL),
              SNAPKV_OK);
  }
  snapkv_stats st{};
  ASSERT_EQ(snapkv_total_stats(c.p, &st), SNAPKV_OK);
  EXPECT_EQ(st.tokens_kept, 20u);  // nothing compressed while the prompt is open
  ASSERT_EQ(snapkv_end_prompt(c.p), SNAPKV_OK);
  ASSERT_EQ(snapkv_total_stats(c.p, &st), SNAPKV_OK);
  EXPECT_EQ(st.tokens_seen, 20u);
  EXPECT_EQ(st.tokens_kept, 8u);
  EXPECT_DOUBLE_EQ(st.eviction_ratio, 2.5);
  EXPECT_DOUBLE_EQ(st.keep_rate, 0.4);
  size_t n = 0;
  ASSERT_EQ(snapkv_kept_positions(c.p, 0, 1, nullptr, 0, &n), SNAPKV_OK);  // count only
  EXPECT_EQ(n, 8u);
}

TEST(CApi, ConfigErrorsAreNamed) {
  struct Case {
    const char* config;
    const char* expect;
  };
  const Case cases[] = {
      {"budget=-3", "[kv] option 'budget' has a bad value, got '-3'"},
      {"budget", "[capi] config item is not key=value, got 'budget'"},
      {"bugdet=4", "[capi] unknown config key, got 'bugdet'"},
      {"policy=snapkv policy=full", "[capi] config key given twice, got 'policy'"},
      {"keep_window=yes", "option 'keep_window' has a bad value, got 'yes'"},
      {"policy=h2o", "h2o"},
      {"kernel=4 pool=max", "[config] "},  // CacheConfig::validate: even kernel
  };
  for (const Case& tc : cases) {
    snapkv_caches* p = reinterpret_cast<snapkv_caches*>(&p);  // must be reset to NULL
    EXPECT_EQ(snapkv_caches_create(&kDims, tc.config, &p), SNAPKV_INVALID_ARGUMENT) << tc.config;
    EXPECT_EQ(p, nullptr) << tc.config;
    EXPECT_NE(last_error().find(tc.expect), std::string::npos) << tc.config << ": " << last_error();
  }
  const snapkv_model_dims bad = {2, 3, 2, 8};  // n_heads not a multiple of n_kv_heads
  snapkv_caches* p = nullptr;
  EXPECT_EQ(snapkv_caches_create(&bad, nullptr, &p), SNAPKV_INVALID_ARGUMENT);
  EXPECT_EQ(snapkv_caches_create(nullptr, nullptr, &p), SNAPKV_INVALID_ARGUMENT);
  EXPECT_EQ(snapkv_caches_create(&kDims, nullptr, nullptr), SNAPKV_INVALID_ARGUMENT);
  EXPECT_EQ(snapkv_caches_create(&kDims, "", &p), SNAPKV_OK);  // defaults
  EXPECT_STREQ(snapkv_last_error(), "");                       // cleared by a success
  snapkv_caches_free(p);
  snapkv_caches_free(nullptr);
}

TEST(CApi, MisuseIsAStatusAndChangesNothing) {
  Caches c;
  ASSERT_EQ(snapkv_caches_create(&kDims, "budget=8 window=2", &c.p), SNAPKV_OK);
  const size_t s = 6, d = kDims.head_dim;
  auto k = values(kDims.n_kv_heads * s * d, 1);
  const auto v = values(kDims.n_kv_heads * s * d, 2);
  EXPECT_EQ(snapkv_update(c.p, 2, k.data(), v.data(), s, nullptr, 0, SNAPKV_UPDATE_AUTO),
            SNAPKV_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("[capi] layer index out of range, got 2, expected < n_layers = 2"),
            std::string::npos)
      << last_error();
  EXPECT_EQ(snapkv_update(c.p, 0, nullptr, v.data(), s, nullptr, 0, SNAPKV_UPDATE_AUTO),
            SNAPKV_INVALID_ARGUMENT);
  EXPECT_EQ(snapkv_update(c.p, 0, k.data(), v.data(), 0, nullptr, 0, SNAPKV_UPDATE_AUTO),
            SNAPKV_INVALID_ARGUMENT);
  EXPECT_EQ(snapkv_update(c.p, 0, k.data(), v.data(), s, nullptr, 0, 7), SNAPKV_INVALID_ARGUMENT);
  k[3] = 1e30f;  // fits fp32, not fp16
  EXPECT_EQ(snapkv_update(c.p, 0, k.data(), v.data(), s, nullptr, 0, SNAPKV_UPDATE_AUTO),
            SNAPKV_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("outside the fp16 range"), std::string::npos) << last_error();
  k[3] = std::nanf("");
  EXPECT_EQ(snapkv_update(c.p, 0, k.data(), v.data(), s, nullptr, 0, SNAPKV_UPDATE_AUTO),
            SNAPKV_INVALID_ARGUMENT);
  snapkv_stats st{};
  ASSERT_EQ(snapkv_layer_stats(c.p, 0, &st), SNAPKV_OK);
  EXPECT_EQ(st.tokens_seen, 0u);
  EXPECT_EQ(st.bytes_stored, 0u);
  EXPECT_EQ(snapkv_layer_stats(c.p, 0, nullptr), SNAPKV_INVALID_ARGUMENT);
  EXPECT_EQ(snapkv_total_stats(nullptr, &st), SNAPKV_INVALID_ARGUMENT);
  size_t n = 0;
  EXPECT_EQ(snapkv_kept_positions(c.p, 0, 5, nullptr, 0, &n), SNAPKV_INVALID_ARGUMENT);
  EXPECT_EQ(snapkv_kept_positions(c.p, 0, 0, nullptr, 3, &n), SNAPKV_INVALID_ARGUMENT);
  EXPECT_EQ(snapkv_end_prompt(nullptr), SNAPKV_INVALID_ARGUMENT);
  std::vector<float> out(kDims.n_heads * s * d);
  const auto q = values(kDims.n_heads * s * d, 3);
  EXPECT_EQ(snapkv_attend(c.p, 0, nullptr, q.data(), k.data(), v.data(), s),
            SNAPKV_INVALID_ARGUMENT);
  EXPECT_STREQ(snapkv_status_name(SNAPKV_INVALID_ARGUMENT), "invalid argument");
  EXPECT_STREQ(snapkv_version(), "0.1.0");
}

}  // namespace
