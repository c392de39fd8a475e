// kivimix (2/4-bit key channels per block, 2-bit values; include/snapkv/kv/codecs/kivi.h "Mixed key
// widths"): the wide channels are the block's largest ranges and decode as kivi4 does (within the
// fp32 rounding of the split code), the narrow ones bit for bit as kivi2; exact bytes (2.5 code
// bits per element on average), values identical to kivi2's, snapkv + kivimix keeping snapkv's
// rows, and clear errors for configurations it does not take. Round-trip bounds, fused attention
// vs the dequantized reference, no drift under repeated eviction and store records:
// codec_variants_test.cpp (kNewCodecs); .kvc files: kvc_file_test.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "kv/codecs/stores.h"
#include "kv/kivi_test_util.h"
#include "kv/kv_test_util.h"
#include "snapkv/kv/codecs/kivi.h"
#include "snapkv/kv/core/layer_cache.h"
#include "snapkv/kv/core/row_store.h"
#include "snapkv/util/error.h"

namespace snapkv {
namespace {

using kivi_test::realistic_rows;

constexpr double kU32 = 1.0 / 16777216.0;

std::vector<float> read_all(const RowStore& s) {
  std::vector<float> out(s.rows() * s.head_dim());
  s.read(out.data(), 0, s.rows());
  return out;
}

std::string error_of(auto&& fn) {
  try {
    fn();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

CacheConfig config_of(CodecKind codec) {
  CacheConfig c;
  c.codec = codec;
  c.kivi_group = 32;
  c.kivi_residual = 32;
  c.kivi_fp16_sinks = 0;
  return c;
}

// Rows whose channels with (c * 7) % hd >= hd / 2 spread 20 times wider than the others, so the
// wide half of every block is known (a block's range of 32 normal draws is 2.5 to 10 sigma). A wide
// channel decodes as kivi4's (same (s, z) and 4-bit code u = 4 h + l; z + 4 s h is exact up to one
// fp32 rounding of the sum and the final add rounds once: |mix - kivi4| <= 2 u (|x'| + 4 s)); a
// narrow one bit for bit as kivi2's (same params, same code, same decode).
TEST(Kivimix, WideChannelsAreTheLargestRangesAndDecodeAsKivi4) {
  const size_t hd = 32, n = 64 + 1;
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(n * hd);
  const auto spread = [&](size_t c) {
    const size_t rank = (c * 7) % hd;
    return (rank >= hd / 2 ? 20.0f : 1.0f) + 0.01f * float(rank);
  };
  for (size_t r = 0; r < n; ++r) {
    for (size_t c = 0; c < hd; ++c) x[r * hd + c] = spread(c) * normal(rng) + float(c % 5);
  }
  auto mix = make_row_store(config_of(CodecKind::kivimix), RowRole::key, hd);
  auto k4 = make_row_store(config_of(CodecKind::kivi4), RowRole::key, hd);
  auto k2 = make_row_store(config_of(CodecKind::kivi2), RowRole::key, hd);
  for (RowStore* s : {mix.get(), k4.get(), k2.get()}) {
    s->append(x.data(), 64);
    s->append(x.data() + 64 * hd, 1);  // packs the 64 rows: 2 blocks
  }
  const std::vector<float> m = read_all(*mix), a4 = read_all(*k4), a2 = read_all(*k2);
  size_t wide_seen = 0;
  for (size_t r = 0; r < 64; ++r) {
    for (size_t c = 0; c < hd; ++c) {
      const size_t i = r * hd + c;
      if ((c * 7) % hd >= hd / 2) {
        float lo = INFINITY, hi = -INFINITY;
        for (size_t k = r / 32 * 32; k < r / 32 * 32 + 32; ++k) {
          lo = std::min(lo, kivi_test::round_fp16(x[k * hd + c]));
          hi = std::max(hi, kivi_test::round_fp16(x[k * hd + c]));
        }
        const double s = kivi_test::scale_bound(double(hi) - lo, 4);
        ASSERT_NEAR(m[i], a4[i], 2.0 * kU32 * (std::fabs(a4[i]) + 4.0 * s)) << r << " " << c;
        ++wide_seen;
      } else {
        ASSERT_EQ(m[i], a2[i]) << r << " " << c;
      }
    }
  }
  EXPECT_EQ(wide_seen, 64 * hd / 2);
  for (size_t i = 64 * hd; i < n * hd; ++i) EXPECT_EQ(m[i], kivi_test::round_fp16(x[i]));
}

// Bytes: a key block of n rows costs 2 n hd / 8 bytes of words + n (hd / 2) / 4 bytes of low codes
// (3 bits per element), 2 hd fp16 parameters, hd / 2 uint16 channel indices and its 8-byte table
// entry; values are kivi2's. At G = 32 = head_dim: keys 3 + 1.31 bits, values 2 + 1 bits per
// element, 2.5 code bits on average. Values decode and save exactly as kivi2's.
TEST(Kivimix, BytesAreExactAndValuesAreKivi2) {
  const size_t hd = 32, group = 32, n = 96 + 5;
  const std::vector<float> x = realistic_rows(n, hd, 8, true);
  const CacheConfig cm = config_of(CodecKind::kivimix), c2 = config_of(CodecKind::kivi2);
  for (RowRole role : {RowRole::key, RowRole::value}) {
    auto s = make_row_store(cm, role, hd);
    auto ref = make_row_store(c2, role, hd);
    for (RowStore* st : {s.get(), ref.get()}) {
      st->append(x.data(), 96);
      st->append(x.data() + 96 * hd, 5);  // packs 96 rows: 3 key blocks
    }
    if (role == RowRole::key) {
      const size_t blocks = 96 / group;
      EXPECT_EQ(s->bytes(), 96 * hd * 3 / 8 + blocks * (2 * hd * 2 + 8 + hd / 2 * 2) + 5 * hd * 2);
      EXPECT_EQ(s->bytes(), ref->bytes() + 96 * hd / 8 + blocks * hd);
    } else {
      EXPECT_EQ(read_all(*s), read_all(*ref));
      EXPECT_EQ(s->bytes(), ref->bytes());
      std::vector<uint8_t> a, b;
      s->save(a);
      ref->save(b);
      EXPECT_EQ(a, b);
    }
  }
  EXPECT_EQ(codec_kivi_bits(CodecKind::kivimix, true), 2);
  EXPECT_EQ(codec_kivi_bits(CodecKind::kivimix, false), 2);
  EXPECT_EQ(parse_codec("kivimix"), CodecKind::kivimix);
  EXPECT_EQ(to_string(CodecKind::kivimix), "kivimix");
  EXPECT_EQ(kivi_residual_of(CacheConfig{.codec = CodecKind::kivimix}), 32u);
  EXPECT_EQ(kivi_fp16_sinks_of(CacheConfig{.codec = CodecKind::kivimix}), 4u);
}

// An odd head_dim keeps floor(hd / 2) wide channels; a partial octet of low codes round-trips.
TEST(Kivimix, OddHeadDimAndPartialLowWords) {
  const size_t hd = 21, n = 64 + 1;  // 10 wide channels: one full and one partial low word
  const std::vector<float> x = realistic_rows(n, hd, 9, true);
  auto s = make_row_store(config_of(CodecKind::kivimix), RowRole::key, hd);
  auto k2 = make_row_store(config_of(CodecKind::kivi2), RowRole::key, hd);
  for (RowStore* st : {s.get(), k2.get()}) {
    st->append(x.data(), 64);
    st->append(x.data() + 64 * hd, 1);
  }
  EXPECT_EQ(s->bytes(), k2->bytes() + 64 * 4 + 2 * 10 * 2);  // 4 bytes of low codes per row
  std::vector<uint8_t> record;
  s->save(record);
  auto back = load_row_store(config_of(CodecKind::kivimix), RowRole::key, hd, record);
  EXPECT_EQ(read_all(*back), read_all(*s));
  // A nonzero code past the 10th low code is refused (the last low word of row 0: bytes 2..3 of
  // the low-code array, which ends the record).
  record[record.size() - 64 * 4 + 3] |= 0x80;
  EXPECT_THROW(load_row_store(config_of(CodecKind::kivimix), RowRole::key, hd, record),
               RuntimeError);
}

TEST(Kivimix, InvalidConfigurationsAreClearErrors) {
  const std::string ev =
      error_of([] { make_kivi_row_store(RowRole::value, 2, 32, 32, 32, 0, 0, true); });
  EXPECT_NE(ev.find("mixed 2/4-bit channels are for 2-bit key stores"), std::string::npos) << ev;
  EXPECT_NE(error_of([] {
              make_kivi_row_store(RowRole::key, 4, 32, 32, 32, 0, 0, true);
            }).find("a key store of 4 bits"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              make_kivi_row_store(RowRole::key, 2, 1, 32, 32, 0, 0, true);
            }).find("head_dim 1"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              make_kivi_row_store(RowRole::key, 2, 32, 32, 32, 0, 4, true);
            }).find("kitty channels 4"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_codec("kivimixed"); }).find("kivimix"), std::string::npos);
  CacheConfig bad = config_of(CodecKind::kivimix);
  bad.kivi_group = 48;  // residual 32 is no multiple of it
  EXPECT_THROW(bad.validate(), std::invalid_argument);
  EXPECT_THROW(make_row_store(config_of(CodecKind::kivimix), RowRole::key, 1),
               std::invalid_argument);
}

// Under LayerCache, snapkv + kivimix keeps exactly snapkv + fp16's rows, and once packed costs
// less than kivi42 and more than kivi2 at the same residual and sinks.
TEST(KivimixCache, StackingKeepsThePolicysRows) {
  const CacheDims dims{4, 2, 32};
  CacheConfig base;
  base.policy = PolicyKind::snapkv;
  base.budget = 84;
  base.window = 8;
  base.n_sink = 4;
  base.kernel = 5;
  CacheConfig km = base, k42 = base, k2 = base;
  km.codec = CodecKind::kivimix;
  k42.codec = CodecKind::kivi42;
  k2.codec = CodecKind::kivi2;
  k2.kivi_residual = 32;
  k2.kivi_fp16_sinks = 4;
  LayerCache fp16(dims, base), cm(dims, km), c42(dims, k42), c2(dims, k2);
  const size_t s_total = 300;
  const auto k = test::random_normal(dims.n_kv_heads * s_total * dims.head_dim, 1);
  const auto v = test::random_normal(dims.n_kv_heads * s_total * dims.head_dim, 2);
  const auto q = test::random_normal(dims.n_heads * base.window * dims.head_dim, 3);
  const Tensor3 qt{q.data(), dims.n_heads, base.window, dims.head_dim};
  const auto k1 = test::random_normal(dims.n_kv_heads * dims.head_dim, 4);
  const auto v1 = test::random_normal(dims.n_kv_heads * dims.head_dim, 5);
  for (LayerCache* c : {&fp16, &cm, &c42, &c2}) {
    c->update(test::view(k, dims.n_kv_heads, s_total, dims.head_dim),
              test::view(v, dims.n_kv_heads, s_total, dims.head_dim), &qt, UpdateKind::prefill);
    c->end_prompt();
    c->update(test::view(k1, dims.n_kv_heads, 1, dims.head_dim),
              test::view(v1, dims.n_kv_heads, 1, dims.head_dim), nullptr, UpdateKind::decode);
  }
  for (size_t h = 0; h < dims.n_kv_heads; ++h) {
    const auto pm = cm.positions(h), pf = fp16.positions(h);
    ASSERT_EQ(std::vector<int64_t>(pm.begin(), pm.end()),
              std::vector<int64_t>(pf.begin(), pf.end()));
  }
  EXPECT_LT(cm.stats().bytes_stored, c42.stats().bytes_stored);
  EXPECT_GT(cm.stats().bytes_stored, c2.stats().bytes_stored);
}

}  // namespace
}  // namespace snapkv
