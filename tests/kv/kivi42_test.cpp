// The mixed-width KIVI codecs kivi42 (4-bit keys, 2-bit values), kivi24 (the mirror) and kivi42r
// (kivi42 with Hadamard-rotated values): each role's store is exactly KIVI (or rotated KIVI) at
// that role's width, so bytes add up from those stores; per-codec defaults of kivi_residual and
// zip_salient resolve and can be overridden; snapkv + kivi42 keeps exactly snapkv + fp16's rows.
// Round-trip bounds, fused attention, no drift and .kvc records: codec_variants_test.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "kv/codecs/stores.h"
#include "kv/kivi_test_util.h"
#include "kv/kv_test_util.h"
#include "snapkv/kv/core/layer_cache.h"
#include "snapkv/kv/core/row_store.h"

namespace snapkv {
namespace {

using kivi_test::realistic_rows;

CacheConfig mixed(CodecKind codec, size_t group = 8, size_t residual = 16) {
  CacheConfig c;
  c.codec = codec;
  c.kivi_group = group;
  c.kivi_residual = residual;
  c.rotation_seed = 99;
  c.kivi_fp16_sinks =
      0;  // as the single-width codecs' default (kivi42's own is 4: kv/core/config.h)
  return c;
}

std::vector<float> read_all(const RowStore& s) {
  std::vector<float> out(s.rows() * s.head_dim());
  s.read(out.data(), 0, s.rows());
  return out;
}

// Each role's store decodes bit for bit like the single-width store it is made of, and costs
// exactly its bytes: kivi42 = kivi4 keys + kivi2 values, kivi24 the mirror, kivi42r = kivi4 keys
// + kivi2r values. So a kivi42 cache costs, per quantized element, 4 + 32/G bits for keys and
// 2 + 32/G for values (G = 32: 5 and 3 bits, 4 on average), plus the fp16 residual.
TEST(Kivi42, EachRoleIsKiviAtItsWidth) {
  const size_t hd = 32, n = 70;
  const std::vector<float> x = realistic_rows(n, hd, 21, true);
  struct Case {
    CodecKind codec, key_as, value_as;
  };
  for (const Case& k : {Case{CodecKind::kivi42, CodecKind::kivi4, CodecKind::kivi2},
                        Case{CodecKind::kivi24, CodecKind::kivi2, CodecKind::kivi4},
                        Case{CodecKind::kivi42r, CodecKind::kivi4, CodecKind::kivi2r}}) {
    for (RowRole role : {RowRole::key, RowRole::value}) {
      auto s = make_row_store(mixed(k.codec), role, hd);
      auto ref = make_row_store(mixed(role == RowRole::key ? k.key_as : k.value_as), role, hd);
      for (RowStore* st : {s.get(), ref.get()}) {
        st->append(x.data(), n - 3);
        st->append(x.data() + (n - 3) * hd, 3);
        st->retain(std::vector<uint32_t>{0, 1, 5, 9, 17, 30, 31, 32, 50, 66, 67, 68, 69});
      }
      const std::string what =
          std::string(to_string(k.codec)) + (role == RowRole::key ? " keys" : " values");
      EXPECT_EQ(read_all(*s), read_all(*ref)) << what;
      EXPECT_EQ(s->bytes(), ref->bytes()) << what;
      std::vector<uint8_t> a, b;
      s->save(a);
      ref->save(b);
      EXPECT_EQ(a, b) << what;  // the same record as the single-width store's
    }
  }
  EXPECT_EQ(codec_kivi_bits(CodecKind::kivi42, true), 4);
  EXPECT_EQ(codec_kivi_bits(CodecKind::kivi42, false), 2);
  EXPECT_EQ(codec_kivi_bits(CodecKind::kivi24, true), 2);
  EXPECT_EQ(codec_kivi_bits(CodecKind::zipcache, true), 0);
  EXPECT_EQ(parse_codec("kivi42r"), CodecKind::kivi42r);
  EXPECT_EQ(to_string(CodecKind::kivi24), "kivi24");
  EXPECT_TRUE(codec_is_rotated(CodecKind::kivi42r));
  EXPECT_FALSE(codec_is_rotated(CodecKind::kivi42));
}

// Per-codec defaults (kv/core/config.h): 0 / kCodecDefaultFraction resolve to the codec's setting,
// explicit values win, and an explicit or default residual that is no multiple of the group is a
// clear error naming where it came from.
TEST(Kivi42, PerCodecDefaultsResolveAndCanBeOverridden) {
  CacheConfig c;
  EXPECT_EQ(c.kivi_residual, 0u);
  EXPECT_EQ(c.zip_salient, kCodecDefaultFraction);
  c.codec = CodecKind::zipcacher;
  EXPECT_EQ(kivi_residual_of(c), 32u);
  EXPECT_EQ(zip_salient_of(c), 0.7);
  c.codec = CodecKind::zipcache;
  EXPECT_EQ(kivi_residual_of(c), 128u);
  EXPECT_EQ(zip_salient_of(c), 0.2);
  for (CodecKind k : {CodecKind::kivi42, CodecKind::kivi42r, CodecKind::kivi24}) {
    c.codec = k;
    EXPECT_EQ(kivi_residual_of(c), 32u) << to_string(k);
  }
  for (CodecKind k : {CodecKind::kivi2, CodecKind::kivi4, CodecKind::kitty, CodecKind::gear}) {
    c.codec = k;
    EXPECT_EQ(kivi_residual_of(c), 128u) << to_string(k);
  }
  c.codec = CodecKind::zipcacher;
  c.kivi_residual = 64;
  c.zip_salient = 0.3;
  EXPECT_EQ(kivi_residual_of(c), 64u);
  EXPECT_EQ(zip_salient_of(c), 0.3);
  // The store uses the resolved residual and sinks: under kivi42's defaults (residual 32, 4 fp16
  // sinks) the first 4 rows stay fp16 for good, 32 more wait in the residual, and the 37th row
  // arriving packs 32 of them.
  EXPECT_EQ(kivi_fp16_sinks_of(CacheConfig{.codec = CodecKind::kivi42}), 4u);
  EXPECT_EQ(kivi_fp16_sinks_of(CacheConfig{.codec = CodecKind::kivi32}), 4u);
  for (CodecKind k : {CodecKind::kivi2, CodecKind::kivi4, CodecKind::kivi24, CodecKind::kivi42r,
                      CodecKind::kitty, CodecKind::zipcache, CodecKind::gear}) {
    EXPECT_EQ(kivi_fp16_sinks_of(CacheConfig{.codec = k}), 0u) << to_string(k);
  }
  EXPECT_EQ(kivi_fp16_sinks_of(CacheConfig{.codec = CodecKind::kivi42, .kivi_fp16_sinks = 0}), 0u);
  auto s = make_row_store(CacheConfig{.codec = CodecKind::kivi42}, RowRole::key, 16);
  const std::vector<float> x = realistic_rows(37, 16, 3, true);
  s->append(x.data(), 36);
  const size_t fp16_bytes = s->bytes();
  EXPECT_EQ(fp16_bytes, 36u * 16 * 2);
  s->append(x.data() + 36 * 16, 1);
  EXPECT_LT(s->bytes(), fp16_bytes);
  std::vector<float> y(37 * 16);
  s->read(y.data(), 0, 37);
  for (size_t i = 0; i < 4 * 16; ++i) EXPECT_EQ(y[i], kivi_test::round_fp16(x[i])) << i;
  // A wrapped codec keeps its own defaults: zipcacher's stores (keys plain zipcache, values
  // rotated zipcache) with the default fields decode and count bytes exactly as with residual 32
  // and salient 0.7 spelled out, and not as zipcache's 128 / 0.2.
  for (RowRole role : {RowRole::key, RowRole::value}) {
    CacheConfig def{.codec = CodecKind::zipcacher}, spelled = def, zipdef = def;
    spelled.kivi_residual = 32;
    spelled.zip_salient = 0.7;
    zipdef.kivi_residual = 128;
    zipdef.zip_salient = 0.2;
    const std::vector<float> rows = realistic_rows(200, 16, 8, true);
    std::vector<float> sal(200);
    for (size_t i = 0; i < sal.size(); ++i) sal[i] = float((i * 37) % 200);
    std::vector<std::vector<float>> decoded;
    std::vector<size_t> bytes;
    for (const CacheConfig& cfg : {def, spelled, zipdef}) {
      auto st = make_row_store(cfg, role, 16);
      st->append(rows.data(), 200);
      st->settle(sal);
      decoded.push_back(read_all(*st));
      bytes.push_back(st->bytes());
    }
    EXPECT_EQ(decoded[0], decoded[1]);
    EXPECT_EQ(bytes[0], bytes[1]);
    EXPECT_NE(bytes[0], bytes[2]);
  }
  // kivi_group 48: kivi42's default residual 32 is no multiple of it.
  CacheConfig bad;
  bad.codec = CodecKind::kivi42;
  bad.kivi_group = 48;
  try {
    bad.validate();
    ADD_FAILURE() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("(the codec's default)"), std::string::npos) << e.what();
  }
  bad.kivi_residual = 96;
  EXPECT_NO_THROW(bad.validate());
  CacheConfig sal;
  sal.zip_salient = -0.5;
  EXPECT_THROW(sal.validate(), std::invalid_argument);
}

// Under LayerCache, snapkv + kivi42 keeps exactly snapkv + fp16's rows (the codec never changes
// which rows the policy keeps), and once packed its bytes are below kivi4's at the same residual.
TEST(Kivi42Cache, StackingKeepsThePolicysRows) {
  const CacheDims dims{4, 2, 32};
  CacheConfig base;
  base.policy = PolicyKind::snapkv;
  base.budget = 84;
  base.window = 8;
  base.n_sink = 4;
  base.kernel = 5;
  CacheConfig mix = base, k4 = base;
  mix.codec = CodecKind::kivi42;
  k4.codec = CodecKind::kivi4;
  k4.kivi_residual = 32;
  LayerCache fp16(dims, base), cache(dims, mix), cache4(dims, k4);
  const size_t s_total = 300;
  const auto k = test::random_normal(dims.n_kv_heads * s_total * dims.head_dim, 1);
  const auto v = test::random_normal(dims.n_kv_heads * s_total * dims.head_dim, 2);
  const auto q = test::random_normal(dims.n_heads * base.window * dims.head_dim, 3);
  const Tensor3 qt{q.data(), dims.n_heads, base.window, dims.head_dim};
  for (LayerCache* c : {&fp16, &cache, &cache4}) {
    c->update(test::view(k, dims.n_kv_heads, s_total, dims.head_dim),
              test::view(v, dims.n_kv_heads, s_total, dims.head_dim), &qt, UpdateKind::prefill);
    c->end_prompt();
  }
  for (size_t h = 0; h < dims.n_kv_heads; ++h) {
    const auto pm = cache.positions(h), pf = fp16.positions(h);
    ASSERT_EQ(std::vector<int64_t>(pm.begin(), pm.end()),
              std::vector<int64_t>(pf.begin(), pf.end()));
    ASSERT_EQ(cache.size(h), 84u);
  }
  // The prompt's kept rows wait in the fp16 residual until the next append packs them
  // (kv/codecs/kivi.h): one decode step, then every cache but fp16 holds 84 quantized rows (+ 1
  // fp16 row).
  const auto k1 = test::random_normal(dims.n_kv_heads * dims.head_dim, 4);
  const auto v1 = test::random_normal(dims.n_kv_heads * dims.head_dim, 5);
  for (LayerCache* c : {&fp16, &cache, &cache4}) {
    c->update(test::view(k1, dims.n_kv_heads, 1, dims.head_dim),
              test::view(v1, dims.n_kv_heads, 1, dims.head_dim), nullptr, UpdateKind::decode);
  }
  EXPECT_LT(cache.stats().bytes_stored, cache4.stats().bytes_stored);
  EXPECT_LT(cache4.stats().bytes_stored, fp16.stats().bytes_stored);
}

}  // namespace
}  // namespace snapkv
