// LayerCache::truncated (the common prefix of two prompts reused): a copy cut to its first n
// positions equals, bit for bit, a cache fed only those n tokens (rows, positions, offset, and
// what attend() and later updates compute from it); the source is unchanged; every cache that
// does not keep each row exactly (another policy or codec) and a length past offset() are
// refused by name.
#include <gtest/gtest.h>

#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "kv/kv_test_util.h"
#include "snapkv/kv/core/layer_cache.h"

namespace snapkv {
namespace {

using test::random_normal;
using test::slice_tokens;
using test::view;

constexpr size_t kHeads = 4, kKv = 2, kD = 16, kTokens = 40, kChunk = 7;
constexpr CacheDims kDims{kHeads, kKv, kD};

CacheConfig full_config() {
  CacheConfig c;
  c.policy = PolicyKind::full;
  c.codec = CodecKind::fp16;
  return c;
}

// Feeds tokens [begin, end) of k, v ([kKv][kTokens][kD]) in chunks of kChunk.
void feed(LayerCache& cache, const std::vector<float>& k, const std::vector<float>& v, size_t begin,
          size_t end, UpdateKind kind = UpdateKind::automatic) {
  for (size_t s = begin; s < end; s += kChunk) {
    const size_t e = std::min(end, s + kChunk);
    const std::vector<float> ks = slice_tokens(k, kKv, kTokens, kD, s, e);
    const std::vector<float> vs = slice_tokens(v, kKv, kTokens, kD, s, e);
    cache.update(view(ks, kKv, e - s, kD), view(vs, kKv, e - s, kD), nullptr, kind);
  }
  cache.end_prompt();
}

std::vector<float> keys_of(const LayerCache& c, size_t h) {
  std::vector<float> out(c.size(h) * kD);
  c.read_keys(h, out.data());
  return out;
}

std::vector<float> values_of(const LayerCache& c, size_t h) {
  std::vector<float> out(c.size(h) * kD);
  c.read_values(h, out.data());
  return out;
}

// Bit equality of two float vectors (memcmp, which an empty vector's null data may not reach).
bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

void expect_same(const LayerCache& a, const LayerCache& b) {
  ASSERT_EQ(a.offset(), b.offset());
  ASSERT_EQ(a.next_position(), b.next_position());
  for (size_t h = 0; h < kKv; ++h) {
    ASSERT_EQ(a.size(h), b.size(h)) << "head " << h;
    const std::span<const int64_t> pa = a.positions(h), pb = b.positions(h);
    EXPECT_TRUE(std::equal(pa.begin(), pa.end(), pb.begin(), pb.end())) << "head " << h;
    const std::vector<float> ka = keys_of(a, h), kb = keys_of(b, h);
    const std::vector<float> va = values_of(a, h), vb = values_of(b, h);
    EXPECT_TRUE(same_bits(ka, kb)) << "head " << h;
    EXPECT_TRUE(same_bits(va, vb)) << "head " << h;
  }
  EXPECT_EQ(a.stats().bytes_stored, b.stats().bytes_stored);
  EXPECT_EQ(a.stats().bytes_full_fp16, b.stats().bytes_full_fp16);
}

TEST(LayerCacheTruncate, EqualsACacheFedOnlyThePrefix) {
  const std::vector<float> k = random_normal(kKv * kTokens * kD, 1);
  const std::vector<float> v = random_normal(kKv * kTokens * kD, 2);
  const std::vector<float> k2 = random_normal(kKv * kTokens * kD, 3);
  const std::vector<float> v2 = random_normal(kKv * kTokens * kD, 4);
  LayerCache whole(kDims, full_config());
  feed(whole, k, v, 0, kTokens);
  const LayerCache before = whole.clone();
  for (const size_t n : {size_t{0}, size_t{1}, size_t{13}, kTokens - 1, kTokens}) {
    SCOPED_TRACE("n = " + std::to_string(n));
    LayerCache cut = whole.truncated(n);
    LayerCache fed(kDims, full_config());
    if (n > 0) feed(fed, k, v, 0, n);
    expect_same(cut, fed);
    expect_same(whole, before);  // the source is untouched
    // Both go on alike: the same attention over the kept rows, the same rows after new tokens.
    const size_t s = 5;
    const std::vector<float> q = random_normal(kHeads * s * kD, 5 + n);
    const std::vector<float> ks = slice_tokens(k2, kKv, kTokens, kD, 0, s);
    const std::vector<float> vs = slice_tokens(v2, kKv, kTokens, kD, 0, s);
    std::vector<float> out_cut(kHeads * s * kD), out_fed(kHeads * s * kD);
    cut.attend(out_cut.data(), view(q, kHeads, s, kD), view(ks, kKv, s, kD), view(vs, kKv, s, kD));
    fed.attend(out_fed.data(), view(q, kHeads, s, kD), view(ks, kKv, s, kD), view(vs, kKv, s, kD));
    EXPECT_EQ(std::memcmp(out_cut.data(), out_fed.data(), out_cut.size() * sizeof(float)), 0);
    cut.update(view(ks, kKv, s, kD), view(vs, kKv, s, kD), nullptr, UpdateKind::decode);
    fed.update(view(ks, kKv, s, kD), view(vs, kKv, s, kD), nullptr, UpdateKind::decode);
    expect_same(cut, fed);
  }
}

TEST(LayerCacheTruncate, RefusesCachesThatDoNotKeepEveryRowExactly) {
  const std::vector<float> k = random_normal(kKv * kTokens * kD, 7);
  const std::vector<float> v = random_normal(kKv * kTokens * kD, 8);
  auto refused = [&](const CacheConfig& config, const std::string& want) {
    SCOPED_TRACE(want);
    EXPECT_FALSE(LayerCache::truncatable(config));
    LayerCache cache(kDims, config);
    feed(cache, k, v, 0, kTokens);
    try {
      (void)cache.truncated(10);
      ADD_FAILURE() << "not refused";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  };
  CacheConfig snapkv = full_config();
  snapkv.policy = PolicyKind::snapkv;
  snapkv.budget = 16;
  refused(snapkv, "policy snapkv");
  CacheConfig kivi = full_config();
  kivi.codec = CodecKind::kivi2;
  refused(kivi, "codec kivi2");
  // (A decode-time budget needs an evicting policy: CacheConfig::validate refuses it with full.)
  EXPECT_TRUE(LayerCache::truncatable(full_config()));
  LayerCache cache(kDims, full_config());
  feed(cache, k, v, 0, kTokens);
  EXPECT_THROW((void)cache.truncated(kTokens + 1), std::invalid_argument);
}

}  // namespace
}  // namespace snapkv
