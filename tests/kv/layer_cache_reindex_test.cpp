// LayerCache::reindex (positions by place in the cache, for running past a model's context): the
// turned keys are held to a double-precision RoPE of the original (unrotated) keys at their new
// positions for every RoPE variant the engine supports (NORM, NEOX, partial n_rot, linear
// scaling, frequency factors), within the bound of two binary16 roundings; values, row order and
// accounting are untouched; the refusals are named and change nothing; clone and .kvc keep the
// numbering.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "kv/kv_test_util.h"
#include "plain_config.h"
#include "snapkv/kv/core/layer_cache.h"
#include "snapkv/kv/file/kvc_file.h"
#include "snapkv/kv/file/kvc_format.h"
#include "snapkv/ops/rope.h"

namespace snapkv {
namespace {

using test::random_normal;
using test::slice_tokens;
using test::view;

constexpr size_t kHeads = 4, kKv = 2, kD = 16, kTokens = 48, kChunk = 4;

struct Variant {
  std::string name;
  RopeParams rope;
};

// freq_factors must outlive the caches: a static array.
const float kFactors[6] = {1.0f, 1.5f, 2.0f, 4.0f, 8.0f, 0.75f};

std::vector<Variant> variants() {
  return {
      {"norm", RopeParams{kD, 10000.0, 1.0, RopeKind::norm, nullptr}},
      {"neox", RopeParams{kD, 1000000.0, 1.0, RopeKind::neox, nullptr}},
      {"norm_partial_scaled", RopeParams{12, 10000.0, 0.25, RopeKind::norm, nullptr}},
      {"neox_partial_factors", RopeParams{12, 500000.0, 1.0, RopeKind::neox, kFactors}},
  };
}

CacheConfig streaming_config() {
  CacheConfig c = test::plain_config();  // every_chunk
  c.policy = PolicyKind::streaming;
  c.budget = 10;
  c.n_sink = 3;
  c.window = 4;
  return c;
}

// The plain RoPE, written out here in float64 (not ops/rope.h's): pair i of x turned by
// pos * freq_scale * base^(-2i / n_rot) / factor[i]; NORM pairs (2i, 2i + 1), NEOX (i, i + n/2).
std::vector<double> plain_rope(const float* x, int64_t pos, const RopeParams& p) {
  std::vector<double> out(x, x + kD);
  const size_t half = p.n_rot / 2;
  for (size_t i = 0; i < half; ++i) {
    const double factor = p.freq_factors != nullptr ? p.freq_factors[i] : 1.0;
    const double theta =
        static_cast<double>(pos) * p.freq_scale *
        std::pow(p.freq_base, -2.0 * static_cast<double>(i) / static_cast<double>(p.n_rot)) /
        factor;
    const size_t a = p.kind == RopeKind::norm ? 2 * i : i;
    const size_t b = p.kind == RopeKind::norm ? 2 * i + 1 : i + half;
    out[a] = x[a] * std::cos(theta) - x[b] * std::sin(theta);
    out[b] = x[a] * std::sin(theta) + x[b] * std::cos(theta);
  }
  return out;
}

// Keys before RoPE [n_kv][kTokens][kD], and the same rotated at their true positions.
struct Keys {
  std::vector<float> raw, rotated;
};

Keys make_keys(const RopeParams& rope, uint64_t seed) {
  Keys k;
  k.raw = random_normal(kKv * kTokens * kD, seed);
  k.rotated = k.raw;
  for (size_t h = 0; h < kKv; ++h) {
    for (size_t t = 0; t < kTokens; ++t) {
      const size_t at = (h * kTokens + t) * kD;
      const std::vector<double> r = plain_rope(k.raw.data() + at, static_cast<int64_t>(t), rope);
      for (size_t d = 0; d < kD; ++d) k.rotated[at + d] = static_cast<float>(r[d]);
    }
  }
  return k;
}

// Prefills `cache` with kTokens tokens of keys.rotated / values in chunks of kChunk.
void fill(LayerCache& cache, const Keys& keys, const std::vector<float>& values) {
  for (size_t t = 0; t < kTokens; t += kChunk) {
    const std::vector<float> k = slice_tokens(keys.rotated, kKv, kTokens, kD, t, t + kChunk);
    const std::vector<float> v = slice_tokens(values, kKv, kTokens, kD, t, t + kChunk);
    cache.update(view(k, kKv, kChunk, kD), view(v, kKv, kChunk, kD), nullptr, UpdateKind::prefill);
  }
  cache.end_prompt();
}

std::vector<float> read_all(const RowStore& store) {
  std::vector<float> out(store.rows() * store.head_dim());
  store.read(out.data(), 0, store.rows());
  return out;
}

TEST(LayerCacheReindex, TurnsEveryKeyToItsNewPositionWithinTwoFp16Roundings) {
  const double u = std::ldexp(1.0, -11);  // binary16 unit roundoff
  for (const Variant& var : variants()) {
    SCOPED_TRACE(var.name);
    const Keys keys = make_keys(var.rope, 11);
    const std::vector<float> values = random_normal(kKv * kTokens * kD, 12);
    LayerCache cache(CacheDims{kHeads, kKv, kD}, streaming_config());
    cache.set_rope(var.rope);
    fill(cache, keys, values);
    ASSERT_EQ(cache.size(), 10u);
    std::vector<std::vector<int64_t>> before(kKv);
    std::vector<std::vector<float>> values_before(kKv);
    for (size_t h = 0; h < kKv; ++h) {
      before[h].assign(cache.positions(h).begin(), cache.positions(h).end());
      values_before[h] = read_all(cache.values(h));
    }
    ASSERT_EQ(before[0].front(), 0);
    ASSERT_EQ(before[0].back(), static_cast<int64_t>(kTokens - 1));

    cache.reindex(cache.size());
    EXPECT_EQ(cache.offset(), kTokens);  // tokens seen are still counted
    EXPECT_EQ(cache.next_position(), 10u);
    EXPECT_EQ(cache.stats().tokens_seen, kTokens);
    const size_t half = var.rope.n_rot / 2;
    for (size_t h = 0; h < kKv; ++h) {
      const std::span<const int64_t> pos = cache.positions(h);
      ASSERT_EQ(pos.size(), 10u);
      const std::vector<float> stored = read_all(cache.keys(h));
      EXPECT_EQ(read_all(cache.values(h)), values_before[h]);  // values are not positional
      for (size_t i = 0; i < pos.size(); ++i) {
        EXPECT_EQ(pos[i], static_cast<int64_t>(i));
        // The reference: the original key, unrotated, turned in double to its new position.
        const std::vector<double> want =
            plain_rope(keys.raw.data() + (h * kTokens + before[h][i]) * kD, pos[i], var.rope);
        const float* got = stored.data() + i * kD;
        for (size_t p = 0; p < half; ++p) {
          const size_t a = var.rope.kind == RopeKind::norm ? 2 * p : p;
          const size_t b = var.rope.kind == RopeKind::norm ? 2 * p + 1 : p + half;
          const double norm = std::hypot(static_cast<double>(want[a]), want[b]);
          // Each of the two binary16 roundings moves the pair by at most u * its norm; the
          // inputs' and the turn's fp32 roundings add a few 2^-24 of it.
          const double bound = (2.0 * u + 8.0 * std::ldexp(1.0, -24)) * norm + 1e-7;
          const double err = std::hypot(got[a] - static_cast<double>(want[a]), got[b] - want[b]);
          EXPECT_LE(err, bound) << "head " << h << " row " << i << " pair " << p;
        }
        for (size_t d = var.rope.n_rot; d < kD; ++d) {  // not rotated: one rounding, exact
          EXPECT_EQ(got[d], test::round_fp16(static_cast<float>(want[d]))) << "dim " << d;
        }
      }
    }
  }
}

TEST(LayerCacheReindex, NewTokensContinueAtTheNextPositionAndClonesKeepIt) {
  const RopeParams rope = variants()[0].rope;
  const Keys keys = make_keys(rope, 21);
  const std::vector<float> values = random_normal(kKv * kTokens * kD, 22);
  LayerCache cache(CacheDims{kHeads, kKv, kD}, streaming_config());
  cache.set_rope(rope);
  fill(cache, keys, values);
  cache.reindex(12);  // right-aligned: the 10 rows take 2..11
  EXPECT_EQ(cache.positions(0).front(), 2);
  EXPECT_EQ(cache.positions(1).back(), 11);
  const LayerCache copy = cache.clone();
  EXPECT_EQ(copy.next_position(), 12u);
  const std::vector<float> k = random_normal(kKv * kD, 23), v = random_normal(kKv * kD, 24);
  cache.update(view(k, kKv, 1, kD), view(v, kKv, 1, kD), nullptr, UpdateKind::decode);
  EXPECT_EQ(cache.positions(0).back(), 12);
  EXPECT_EQ(cache.next_position(), 13u);
  EXPECT_EQ(cache.offset(), kTokens + 1);
  // every_chunk: the next prefill chunk is compressed among the renumbered rows by place.
  const std::vector<float> k4 = random_normal(kKv * 4 * kD, 25),
                           v4 = random_normal(kKv * 4 * kD, 26);
  cache.update(view(k4, kKv, 4, kD), view(v4, kKv, 4, kD), nullptr, UpdateKind::prefill);
  const std::span<const int64_t> pos = cache.positions(0);
  ASSERT_EQ(pos.size(), 10u);
  EXPECT_EQ(pos[0], 2);  // the three sinks keep their places
  EXPECT_EQ(pos[2], 4);
  EXPECT_EQ(pos[3], 10);  // then the 7 most recent: 10..16
  EXPECT_EQ(pos.back(), 16);
}

TEST(LayerCacheReindex, RefusalsAreNamedAndChangeNothing) {
  const RopeParams rope = variants()[1].rope;
  const Keys keys = make_keys(rope, 31);
  const std::vector<float> values = random_normal(kKv * kTokens * kD, 32);

  CacheConfig kivi = streaming_config();
  kivi.codec = CodecKind::kivi2;
  kivi.kivi_group = 4;
  kivi.kivi_residual = 4;
  LayerCache quantized(CacheDims{kHeads, kKv, kD}, kivi);
  quantized.set_rope(rope);
  fill(quantized, keys, values);
  const std::vector<int64_t> kept(quantized.positions(0).begin(), quantized.positions(0).end());
  try {
    quantized.reindex(quantized.size());
    FAIL() << "kivi2 keys re-indexed";
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("keys stored quantized"), std::string::npos) << what;
    EXPECT_NE(what.find("codec kivi2"), std::string::npos) << what;
    EXPECT_NE(what.find("fp16 key codec"), std::string::npos) << what;
  }
  EXPECT_THROW(LayerCache::check_reindexable(kivi), std::invalid_argument);
  EXPECT_NO_THROW(LayerCache::check_reindexable(streaming_config()));
  EXPECT_EQ(std::vector<int64_t>(quantized.positions(0).begin(), quantized.positions(0).end()),
            kept);
  EXPECT_EQ(quantized.next_position(), kTokens);

  LayerCache no_rope(CacheDims{kHeads, kKv, kD}, streaming_config());
  fill(no_rope, keys, values);
  EXPECT_THROW(no_rope.reindex(10), std::invalid_argument);

  LayerCache cache(CacheDims{kHeads, kKv, kD}, streaming_config());
  cache.set_rope(rope);
  fill(cache, keys, values);
  const std::vector<float> k_before = read_all(cache.keys(0));
  EXPECT_THROW(cache.reindex(9), std::invalid_argument);            // fewer than the rows
  EXPECT_THROW(cache.reindex(kTokens + 1), std::invalid_argument);  // past the next position
  EXPECT_EQ(read_all(cache.keys(0)), k_before);
  EXPECT_EQ(cache.next_position(), kTokens);

  CacheConfig open = streaming_config();
  open.chunk_mode = ChunkMode::end_of_prompt;
  LayerCache prompt(CacheDims{kHeads, kKv, kD}, open);
  prompt.set_rope(rope);
  const std::vector<float> k = slice_tokens(keys.rotated, kKv, kTokens, kD, 0, 20);
  const std::vector<float> v = slice_tokens(values, kKv, kTokens, kD, 0, 20);
  prompt.update(view(k, kKv, 20, kD), view(v, kKv, 20, kD), nullptr, UpdateKind::prefill);
  ASSERT_TRUE(prompt.prompt_open());
  EXPECT_THROW(prompt.reindex(20), std::invalid_argument);
}

TEST(LayerCacheReindex, DecodeWindowIsRenumberedWithTheRowsItMatches) {
  const RopeParams rope = variants()[0].rope;
  const Keys keys = make_keys(rope, 41);
  const std::vector<float> values = random_normal(kKv * kTokens * kD, 42);
  CacheConfig c = streaming_config();
  c.decode_budget = 14;
  c.decode_interval = 2;
  LayerCache cache(CacheDims{kHeads, kKv, kD}, c);
  cache.set_rope(rope);
  fill(cache, keys, values);
  for (size_t step = 0; step < 3; ++step) {
    const std::vector<float> k = random_normal(kKv * kD, 50 + step);
    const std::vector<float> v = random_normal(kKv * kD, 60 + step);
    const std::vector<float> q = random_normal(kHeads * kD, 70 + step);
    const Tensor3 qt = view(q, kHeads, 1, kD);
    cache.update(view(k, kKv, 1, kD), view(v, kKv, 1, kD), &qt, UpdateKind::decode);
  }
  const LayerCache::DecodeWindow w = cache.decode_window();
  ASSERT_EQ(w.positions.size(), 3u);
  EXPECT_EQ(w.positions.back(), static_cast<int64_t>(kTokens + 2));
  cache.reindex(cache.size());
  const LayerCache::DecodeWindow after = cache.decode_window();
  const std::span<const int64_t> pos = cache.positions(0);
  ASSERT_EQ(after.positions.size(), 3u);
  for (size_t r = 0; r < 3; ++r) EXPECT_EQ(after.positions[r], pos[pos.size() - 3 + r]);
  EXPECT_EQ(after.queries, w.queries);
}

TEST(LayerCacheReindex, KvcRoundTripKeepsTheNumberingAndContinuesIdentically) {
  const RopeParams rope = variants()[1].rope;
  const Keys keys = make_keys(rope, 81);
  const std::vector<float> values = random_normal(kKv * kTokens * kD, 82);
  std::vector<LayerCache> caches;
  for (size_t l = 0; l < 2; ++l) {
    caches.emplace_back(CacheDims{kHeads, kKv, kD}, streaming_config(), l, 2);
    caches.back().set_rope(rope);
    fill(caches.back(), keys, values);
    caches.back().reindex(10);
  }
  std::vector<int32_t> tokens(kTokens);
  for (size_t i = 0; i < kTokens; ++i) tokens[i] = static_cast<int32_t>(i);
  ModelFingerprint fp{};
  fp[0] = 7;
  const std::vector<uint8_t> bytes = encode_kvc(fp, tokens, caches);
  KvcExpect expect;
  expect.fingerprint = &fp;
  KvcContents loaded = decode_kvc(bytes, expect);
  ASSERT_EQ(loaded.caches.size(), 2u);
  for (size_t l = 0; l < 2; ++l) {
    LayerCache& a = caches[l];
    LayerCache& b = loaded.caches[l];
    b.set_rope(rope);
    EXPECT_EQ(b.offset(), kTokens);
    EXPECT_EQ(b.next_position(), 10u);
    for (size_t h = 0; h < kKv; ++h) {
      EXPECT_TRUE(std::equal(a.positions(h).begin(), a.positions(h).end(), b.positions(h).begin(),
                             b.positions(h).end()));
      EXPECT_EQ(read_all(a.keys(h)), read_all(b.keys(h)));
    }
    // Both go on alike: a chunk, then a second re-index.
    const std::vector<float> k = random_normal(kKv * 4 * kD, 90),
                             v = random_normal(kKv * 4 * kD, 91);
    a.update(view(k, kKv, 4, kD), view(v, kKv, 4, kD), nullptr, UpdateKind::prefill);
    b.update(view(k, kKv, 4, kD), view(v, kKv, 4, kD), nullptr, UpdateKind::prefill);
    a.reindex(10);
    b.reindex(10);
    for (size_t h = 0; h < kKv; ++h) {
      EXPECT_EQ(read_all(a.keys(h)), read_all(b.keys(h)));
      EXPECT_EQ(read_all(a.values(h)), read_all(b.values(h)));
    }
  }
  // A shift that leaves no position for the rows is malformed (the checksum is not verified
  // here, so the header check is what refuses it).
  std::vector<uint8_t> bad = bytes;
  const uint64_t shift = kTokens;
  std::memcpy(bad.data() + offsetof(KvcHeader, position_shift), &shift, sizeof shift);
  EXPECT_THROW(decode_kvc(bad, expect, false), KvcError);
  const uint64_t small = kTokens - 9;  // next position 9 < the 10 rows' positions
  std::memcpy(bad.data() + offsetof(KvcHeader, position_shift), &small, sizeof small);
  EXPECT_THROW(decode_kvc(bad, expect, false), KvcError);
}

}  // namespace
}  // namespace snapkv
