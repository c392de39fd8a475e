// The mixed-width KIVI codecs: kivi42 (4-bit keys, 2-bit values), kivi24 (the mirror), kivi42r
// (kivi42 with Hadamard-rotated values), kivi32 (3-bit keys, 2-bit values) and kivimix (2-bit keys
// with the half of the channels of largest range at 4 bits, 2-bit values; all in
// include/snapkv/kv/codecs/kivi.h).
//  - kivi42 / kivi24 / kivi42r: each role's store is exactly KIVI (or rotated KIVI) at that role's
//    width, so bytes add up from those stores; per-codec defaults of kivi_residual and zip_salient
//    resolve and can be overridden.
//  - kivi32: the 3-byte code words, the 3-bit key kernel against its scalar twin within a derived
//    rounding bound, clear errors for the widths it does not take.
//  - kivimix: the wide channels are the largest ranges and decode as kivi4's, odd head_dim and
//    partial low words, clear errors for configurations it does not take.
//  - kivi32 and kivimix: exact bytes (2.5 code bits per element on average), values identical to
//    kivi2's.
//  - under LayerCache, snapkv + any of them keeps exactly snapkv + fp16's rows and costs what its
//    widths promise against the other codecs.
// Round-trip bounds, fused attention vs the dequantized reference and store records:
// codec_variants_test.cpp; no drift: codec_contract_test.cpp; .kvc files: kvc_file_test.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <optional>
#include <ostream>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/kivi/kivi3_kernels.h"
#include "kernels/kivi/kivi_kernels.h"
#include "kv/codecs/stores.h"
#include "kv/kivi_test_util.h"
#include "kv/kv_test_util.h"
#include "snapkv/kv/codecs/kivi.h"
#include "snapkv/kv/core/layer_cache.h"
#include "snapkv/kv/core/row_store.h"
#include "snapkv/util/error.h"

namespace snapkv {
namespace {

using kivi_test::error_of;
using kivi_test::read_all;
using kivi_test::realistic_rows;

constexpr double kU32 = 1.0 / 16777216.0;

// Group 32, residual 32 and no fp16 sinks (the single-width codecs' default; kivi42's, kivi32's
// and kivimix's own is 4: kv/core/config.h).
CacheConfig config_of(CodecKind codec) {
  CacheConfig c;
  c.codec = codec;
  c.kivi_group = 32;
  c.kivi_residual = 32;
  c.kivi_fp16_sinks = 0;
  return c;
}

CacheConfig mixed(CodecKind codec, size_t group = 8, size_t residual = 16) {
  CacheConfig c;
  c.codec = codec;
  c.kivi_group = group;
  c.kivi_residual = residual;
  c.rotation_seed = 99;
  c.kivi_fp16_sinks = 0;
  return c;
}

// ---- kivi42, kivi24, kivi42r -------------------------------------------------------------------

// The single-width codec each role of a mixed codec is made of.
struct MixedRoles {
  CodecKind codec, key_as, value_as;
};

void PrintTo(const MixedRoles& r, std::ostream* os) {
  *os << to_string(r.codec);
}

class MixedWidthCodec : public ::testing::TestWithParam<MixedRoles> {};

// Each role's store decodes bit for bit like the single-width store it is made of, and costs
// exactly its bytes: kivi42 = kivi4 keys + kivi2 values, kivi24 the mirror, kivi42r = kivi4 keys
// + kivi2r values. So a kivi42 cache costs, per quantized element, 4 + 32/G bits for keys and
// 2 + 32/G for values (G = 32: 5 and 3 bits, 4 on average), plus the fp16 residual.
TEST_P(MixedWidthCodec, EachRoleIsKiviAtItsWidth) {
  const MixedRoles k = GetParam();
  const size_t hd = 32, n = 70;
  const std::vector<float> x = realistic_rows(n, hd, 21, true);
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

INSTANTIATE_TEST_SUITE_P(
    Codecs, MixedWidthCodec,
    ::testing::Values(MixedRoles{CodecKind::kivi42, CodecKind::kivi4, CodecKind::kivi2},
                      MixedRoles{CodecKind::kivi24, CodecKind::kivi2, CodecKind::kivi4},
                      MixedRoles{CodecKind::kivi42r, CodecKind::kivi4, CodecKind::kivi2r}),
    [](const ::testing::TestParamInfo<MixedRoles>& p) {
      return std::string(to_string(p.param.codec));
    });

TEST(Kivi42, NamesAndWidths) {
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

// ---- kivi32 ------------------------------------------------------------------------------------

// A word of 8 codes is 3 bytes, little-endian, code k in bits [3k, 3k + 3); storing word i
// touches bytes [3i, 3i + 3) only.
TEST(Kivi32, ThreeBitWordsAreThreeLittleEndianBytes) {
  EXPECT_EQ(kivi_word_bytes(3), 3u);
  const uint8_t codes[8] = {1, 2, 3, 4, 5, 6, 7, 0};
  uint32_t expect = 0;
  for (uint32_t k = 0; k < 8; ++k) expect |= uint32_t{codes[k]} << (3 * k);
  EXPECT_EQ(kivi_pack_word(codes, 3), expect);
  std::vector<uint8_t> buf(12, 0xAB);
  kivi_store_word(buf.data(), 1, expect, 3);
  EXPECT_EQ(buf[3], expect & 0xFF);
  EXPECT_EQ(buf[4], (expect >> 8) & 0xFF);
  EXPECT_EQ(buf[5], (expect >> 16) & 0xFF);
  for (size_t i : {0, 1, 2, 6, 7, 8, 9, 10, 11}) EXPECT_EQ(buf[i], 0xAB) << i;
  EXPECT_EQ(kivi_load_word(buf.data(), 1, 3), expect);
  uint8_t back[8];
  kivi_unpack_word(back, kivi_load_word(buf.data(), 1, 3), 3);
  for (size_t k = 0; k < 8; ++k) EXPECT_EQ(back[k], codes[k]);
  // Every code of every position survives a pack / store / load / unpack.
  std::mt19937 rng(3);
  for (int t = 0; t < 200; ++t) {
    uint8_t c[8];
    for (uint8_t& x : c) x = static_cast<uint8_t>(rng() % 8);
    kivi_store_word(buf.data(), 2, kivi_pack_word(c, 3), 3);
    kivi_unpack_word(back, kivi_load_word(buf.data(), 2, 3), 3);
    for (size_t k = 0; k < 8; ++k) ASSERT_EQ(back[k], c[k]);
  }
  // The quantizer's grid has 7 steps at width 3.
  const KiviParams p = kivi_choose_params(-1.0f, 6.0f, 3);
  EXPECT_EQ(fp16_to_fp32(p.scale), 1.0f);
  EXPECT_EQ(kivi_encode(2.4f, p, 3), 3u);
  EXPECT_EQ(kivi_encode(6.0f, p, 3), 7u);
}

// The 3-bit key kernel (what kivi_key_block_dot runs at width 3) against the scalar twin on raw
// packed blocks with partial octets. Both sum exactly the same products up to fp32 rounding: the
// fast one sum_c (q_c s_c) code + sum_c q_c z_c, the twin sum_c q_c (s_c code + z_c); each sum of
// hd terms is within (hd + 2) u of its magnitude, so |fast - twin| <= 2 (hd + 2) u M with
// M = sum_c |q_c| (|s_c code| + |z_c|) (plus the rounding of the products themselves, inside the
// factor 2).
TEST(Kivi32, KeyKernelMatchesScalarTwin) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  EXPECT_FALSE(kivi_key_dot_uses_q8(32, 3));
  for (size_t hd : {size_t{32}, size_t{40}, size_t{7}}) {
    for (size_t n_rows : {size_t{1}, size_t{8}, size_t{13}, size_t{32}, size_t{37}}) {
      for (size_t n_q : {size_t{1}, size_t{3}, size_t{5}}) {
        const size_t n_oct = (n_rows + 7) / 8;
        std::vector<uint8_t> words(n_oct * hd * 3);
        for (uint8_t& b : words) b = static_cast<uint8_t>(rng());
        std::vector<float> q(n_q * hd), scales(hd), zeros(hd);
        for (float& x : q) x = u(rng);
        for (float& x : scales) x = std::fabs(u(rng));
        for (float& x : zeros) x = 3.0f * u(rng);
        const size_t stride = n_rows + 3;
        std::vector<float> fast(n_q * stride, -7.0f), slow(n_q * stride, -7.0f);
        kivi_key_block_dot(fast.data(), stride, q.data(), n_q, scales.data(), zeros.data(),
                           words.data(), n_rows, hd, 3);
        kivi_key_block_dot_scalar(slow.data(), stride, q.data(), n_q, scales.data(), zeros.data(),
                                  words.data(), n_rows, hd, 3);
        for (size_t j = 0; j < n_q; ++j) {
          for (size_t r = 0; r < stride; ++r) {
            if (r >= n_rows) {  // past the block: untouched
              ASSERT_EQ(fast[j * stride + r], -7.0f);
              continue;
            }
            double m = 0;
            for (size_t c = 0; c < hd; ++c) {
              const uint32_t code =
                  (kivi_load_word(words.data() + r / 8 * hd * 3, c, 3) >> (3 * (r % 8))) & 7u;
              m += std::fabs(q[j * hd + c]) *
                   (std::fabs(double(scales[c]) * code) + std::fabs(zeros[c]));
            }
            ASSERT_NEAR(fast[j * stride + r], slow[j * stride + r], 2.0 * double(hd + 2) * kU32 * m)
                << "hd " << hd << " rows " << n_rows << " q " << j << " r " << r;
          }
        }
      }
    }
  }
}

TEST(Kivi32, UnsupportedWidthsAreClearErrors) {
  EXPECT_NE(error_of([] {
              make_kivi_row_store(RowRole::value, 3, 32, 32, 32, 0, 0);
            }).find("3-bit codes are for key stores only"),
            std::string::npos);
  EXPECT_NO_THROW(make_kivi_row_store(RowRole::key, 3, 32, 32, 32, 0, 0));
  const std::string e5 = error_of([] { make_kivi_row_store(RowRole::key, 5, 32, 32, 32, 0, 0); });
  EXPECT_NE(e5.find("unsupported bit width"), std::string::npos) << e5;
  EXPECT_NE(e5.find("2, 3 or 4"), std::string::npos) << e5;
  EXPECT_NE(error_of([] { kivi_choose_params(0.0f, 1.0f, 1); }).find("2, 3 or 4"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_codec("kivi33"); }).find("kivi32"), std::string::npos);
  CacheConfig bad;
  bad.codec = CodecKind::kivi32;
  bad.kivi_group = 48;  // the default residual 32 is no multiple of it
  EXPECT_THROW(bad.validate(), std::invalid_argument);
}

// ---- kivimix -----------------------------------------------------------------------------------

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

// ---- kivi32 and kivimix: 2-bit values, about 3-bit keys ---------------------------------------

// A codec whose values are kivi2's and whose keys cost one code bit per element more than kivi2's
// plus `extra_bytes_per_block` bytes per key block.
struct Kivi2Values {
  CodecKind codec;
  const char* name;
  int key_bits;                  // codec_kivi_bits(codec, keys)
  size_t extra_bytes_per_block;  // at head_dim 32
};

void PrintTo(const Kivi2Values& k, std::ostream* os) {
  *os << k.name;
}

class Kivi2ValueCodec : public ::testing::TestWithParam<Kivi2Values> {};

// Bytes: a key block of n rows costs 3 n hd / 8 bytes of code bits (kivi32: 3-bit codes; kivimix:
// 2-bit words + n (hd / 2) / 4 bytes of low codes, 3 bits per element), 2 hd fp16 parameters, its
// 8-byte table entry and (kivimix) hd / 2 uint16 channel indices; values are kivi2's (2-bit codes
// + one (scale, zero) per group of G channels). At G = 32 = head_dim: kivi32 keys 3 + 1 bits,
// kivimix keys 3 + 1.31 bits, values 2 + 1 bits per element, 2.5 code bits on average. Values
// decode and save exactly as kivi2's.
TEST_P(Kivi2ValueCodec, BytesAreExactAndValuesAreKivi2) {
  const Kivi2Values k = GetParam();
  const size_t hd = 32, group = 32, n = 96 + 5;
  const std::vector<float> x = realistic_rows(n, hd, 8, true);
  const CacheConfig cm = config_of(k.codec), c2 = config_of(CodecKind::kivi2);
  for (RowRole role : {RowRole::key, RowRole::value}) {
    auto s = make_row_store(cm, role, hd);
    auto ref = make_row_store(c2, role, hd);
    for (RowStore* st : {s.get(), ref.get()}) {
      st->append(x.data(), 96);
      st->append(x.data() + 96 * hd, 5);  // packs 96 rows: 3 key blocks
    }
    if (role == RowRole::key) {
      const size_t blocks = 96 / group;
      EXPECT_EQ(s->bytes(),
                96 * hd * 3 / 8 + blocks * (2 * hd * 2 + 8 + k.extra_bytes_per_block) + 5 * hd * 2);
      // one more bit per element than kivi2
      EXPECT_EQ(s->bytes(), ref->bytes() + 96 * hd / 8 + blocks * k.extra_bytes_per_block);
    } else {
      EXPECT_EQ(read_all(*s), read_all(*ref));
      EXPECT_EQ(s->bytes(), ref->bytes());
      EXPECT_EQ(s->bytes(), 96 * (hd / 4 + 4) + 5 * hd * 2);
      std::vector<uint8_t> a, b;
      s->save(a);
      ref->save(b);
      EXPECT_EQ(a, b);
    }
  }
  EXPECT_EQ(codec_kivi_bits(k.codec, true), k.key_bits);
  EXPECT_EQ(codec_kivi_bits(k.codec, false), 2);
  EXPECT_EQ(parse_codec(k.name), k.codec);
  EXPECT_EQ(to_string(k.codec), k.name);
  EXPECT_EQ(kivi_residual_of(CacheConfig{.codec = k.codec}), 32u);
  EXPECT_EQ(kivi_fp16_sinks_of(CacheConfig{.codec = k.codec}), 4u);
}

INSTANTIATE_TEST_SUITE_P(
    Codecs, Kivi2ValueCodec,
    ::testing::Values(Kivi2Values{CodecKind::kivi32, "kivi32", 3, 0},
                      Kivi2Values{CodecKind::kivimix, "kivimix", 2, 32 / 2 * 2}),
    [](const ::testing::TestParamInfo<Kivi2Values>& p) { return std::string(p.param.name); });

// ---- under LayerCache ---------------------------------------------------------------------------

// A mixed codec and the caches it must cost less than (each dearer than the one before) and,
// when set, more than.
struct Stacking {
  CodecKind codec;
  std::vector<CacheConfig> dearer;  // codec < dearer[0] < dearer[1] < ...
  std::optional<CacheConfig> cheaper;
};

void PrintTo(const Stacking& s, std::ostream* os) {
  *os << to_string(s.codec);
}

class MixedWidthCache : public ::testing::TestWithParam<Stacking> {};

CacheConfig snapkv_base() {
  CacheConfig base;
  base.policy = PolicyKind::snapkv;
  base.budget = 84;
  base.window = 8;
  base.n_sink = 4;
  base.kernel = 5;
  return base;
}

CacheConfig with_codec(CodecKind codec, size_t residual = 0, int64_t sinks = -1) {
  CacheConfig c = snapkv_base();
  c.codec = codec;
  c.kivi_residual = residual;
  if (sinks >= 0) c.kivi_fp16_sinks = size_t(sinks);
  return c;
}

// Under LayerCache, snapkv + the codec keeps exactly snapkv + fp16's rows (the codec never
// changes which rows the policy keeps), and once packed its bytes sit where its widths put them.
TEST_P(MixedWidthCache, StackingKeepsThePolicysRows) {
  const Stacking& p = GetParam();
  const CacheDims dims{4, 2, 32};
  const CacheConfig base = snapkv_base();
  LayerCache fp16(dims, base), cache(dims, with_codec(p.codec));
  std::vector<LayerCache> dearer, cheaper;
  for (const CacheConfig& c : p.dearer) dearer.emplace_back(dims, c);
  if (p.cheaper) cheaper.emplace_back(dims, *p.cheaper);
  std::vector<LayerCache*> all = {&fp16, &cache};
  for (LayerCache& c : dearer) all.push_back(&c);
  for (LayerCache& c : cheaper) all.push_back(&c);
  const size_t s_total = 300;
  const auto k = test::random_normal(dims.n_kv_heads * s_total * dims.head_dim, 1);
  const auto v = test::random_normal(dims.n_kv_heads * s_total * dims.head_dim, 2);
  const auto q = test::random_normal(dims.n_heads * base.window * dims.head_dim, 3);
  const Tensor3 qt{q.data(), dims.n_heads, base.window, dims.head_dim};
  const auto same_rows = [&](const char* when) {
    for (size_t h = 0; h < dims.n_kv_heads; ++h) {
      const auto pm = cache.positions(h), pf = fp16.positions(h);
      ASSERT_EQ(std::vector<int64_t>(pm.begin(), pm.end()),
                std::vector<int64_t>(pf.begin(), pf.end()))
          << when;
    }
  };
  for (LayerCache* c : all) {
    c->update(test::view(k, dims.n_kv_heads, s_total, dims.head_dim),
              test::view(v, dims.n_kv_heads, s_total, dims.head_dim), &qt, UpdateKind::prefill);
    c->end_prompt();
  }
  same_rows("after the prompt");
  for (size_t h = 0; h < dims.n_kv_heads; ++h) ASSERT_EQ(cache.size(h), 84u);
  // The prompt's kept rows wait in the fp16 residual until the next append packs them
  // (kv/codecs/kivi.h): one decode step, then every cache but fp16 holds 84 quantized rows (+ 1
  // fp16 row).
  const auto k1 = test::random_normal(dims.n_kv_heads * dims.head_dim, 4);
  const auto v1 = test::random_normal(dims.n_kv_heads * dims.head_dim, 5);
  for (LayerCache* c : all) {
    c->update(test::view(k1, dims.n_kv_heads, 1, dims.head_dim),
              test::view(v1, dims.n_kv_heads, 1, dims.head_dim), nullptr, UpdateKind::decode);
  }
  same_rows("after a decode step");
  size_t below = cache.stats().bytes_stored;
  for (const LayerCache& c : dearer) {
    EXPECT_LT(below, c.stats().bytes_stored) << to_string(c.config().codec);
    below = c.stats().bytes_stored;
  }
  for (const LayerCache& c : cheaper) {
    EXPECT_GT(cache.stats().bytes_stored, c.stats().bytes_stored) << to_string(c.config().codec);
  }
}

// kivi42: below kivi4 at the same residual, which is below fp16. kivi32 and kivimix: below kivi42
// and above kivi2 at the same residual (and, for kivimix, the same 4 fp16 sinks).
INSTANTIATE_TEST_SUITE_P(
    Codecs, MixedWidthCache,
    ::testing::Values(
        Stacking{CodecKind::kivi42, {with_codec(CodecKind::kivi4, 32), snapkv_base()}, {}},
        Stacking{
            CodecKind::kivi32, {with_codec(CodecKind::kivi42)}, with_codec(CodecKind::kivi2, 32)},
        Stacking{CodecKind::kivimix,
                 {with_codec(CodecKind::kivi42)},
                 with_codec(CodecKind::kivi2, 32, 4)}),
    [](const ::testing::TestParamInfo<Stacking>& p) {
      return std::string(to_string(p.param.codec));
    });

}  // namespace
}  // namespace snapkv
