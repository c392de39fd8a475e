// kivi32 (3-bit keys, 2-bit values; include/snapkv/kv/codecs/kivi.h): the 3-byte code words, the
// 3-bit key kernel against its scalar twin within a derived rounding bound, the exact bytes (2.5
// code bits per element on average), values identical to kivi2's, snapkv + kivi32 keeping snapkv's
// rows, and clear errors for the widths it does not take. Round-trip bounds, fused attention vs
// the dequantized reference, no drift and store records: codec_variants_test.cpp (kNewCodecs);
// .kvc files: kvc_file_test.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "kv/codecs/kivi/kivi3_kernels.h"
#include "kv/codecs/kivi/kivi_kernels.h"
#include "kv/codecs/stores.h"
#include "kv/kivi_test_util.h"
#include "kv/kv_test_util.h"
#include "snapkv/kv/codecs/kivi.h"
#include "snapkv/kv/core/layer_cache.h"
#include "snapkv/kv/core/row_store.h"

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

// Bytes: a 3-bit key block of n rows costs 3 n hd / 8 bytes of codes + 2 hd fp16 parameters + its
// 8-byte table entry; values are kivi2's (2-bit codes + one (scale, zero) per group of G
// channels). At G = 32 = head_dim: keys 3 + 1 bits, values 2 + 1 bits per element, 2.5 code bits
// on average. Values decode and save exactly as kivi2's.
TEST(Kivi32, BytesAreExactAndValuesAreKivi2) {
  const size_t hd = 32, group = 32, residual = 32, n = 96 + 5;
  const std::vector<float> x = realistic_rows(n, hd, 8, true);
  CacheConfig c32, c2;
  c32.codec = CodecKind::kivi32;
  c2.codec = CodecKind::kivi2;
  c32.kivi_residual = c2.kivi_residual = residual;
  c32.kivi_fp16_sinks = 0;  // as kivi2's (kivi32's own default is 4 fp16 sinks)
  for (RowRole role : {RowRole::key, RowRole::value}) {
    auto s = make_row_store(c32, role, hd);
    auto ref = make_row_store(c2, role, hd);
    for (RowStore* st : {s.get(), ref.get()}) {
      st->append(x.data(), 96);
      st->append(x.data() + 96 * hd, 5);  // packs 96 rows: 3 key blocks
    }
    if (role == RowRole::key) {
      const size_t blocks = 96 / group;
      EXPECT_EQ(s->bytes(), 96 * hd * 3 / 8 + blocks * 2 * hd * 2 + blocks * 8 + 5 * hd * 2);
      EXPECT_EQ(s->bytes(), ref->bytes() + 96 * hd / 8);  // one more bit per element than kivi2
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
  EXPECT_EQ(codec_kivi_bits(CodecKind::kivi32, true), 3);
  EXPECT_EQ(codec_kivi_bits(CodecKind::kivi32, false), 2);
  EXPECT_EQ(parse_codec("kivi32"), CodecKind::kivi32);
  EXPECT_EQ(to_string(CodecKind::kivi32), "kivi32");
  EXPECT_EQ(kivi_residual_of(CacheConfig{.codec = CodecKind::kivi32}), 32u);
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

// Under LayerCache, snapkv + kivi32 keeps exactly snapkv + fp16's rows, and once packed costs
// less than kivi42 and more than kivi2 at the same residual.
TEST(Kivi32Cache, StackingKeepsThePolicysRows) {
  const CacheDims dims{4, 2, 32};
  CacheConfig base;
  base.policy = PolicyKind::snapkv;
  base.budget = 84;
  base.window = 8;
  base.n_sink = 4;
  base.kernel = 5;
  CacheConfig k32 = base, k42 = base, k2 = base;
  k32.codec = CodecKind::kivi32;
  k42.codec = CodecKind::kivi42;
  k2.codec = CodecKind::kivi2;
  k2.kivi_residual = 32;
  LayerCache fp16(dims, base), c32(dims, k32), c42(dims, k42), c2(dims, k2);
  const size_t s_total = 300;
  const auto k = test::random_normal(dims.n_kv_heads * s_total * dims.head_dim, 1);
  const auto v = test::random_normal(dims.n_kv_heads * s_total * dims.head_dim, 2);
  const auto q = test::random_normal(dims.n_heads * base.window * dims.head_dim, 3);
  const Tensor3 qt{q.data(), dims.n_heads, base.window, dims.head_dim};
  const auto k1 = test::random_normal(dims.n_kv_heads * dims.head_dim, 4);
  const auto v1 = test::random_normal(dims.n_kv_heads * dims.head_dim, 5);
  for (LayerCache* c : {&fp16, &c32, &c42, &c2}) {
    c->update(test::view(k, dims.n_kv_heads, s_total, dims.head_dim),
              test::view(v, dims.n_kv_heads, s_total, dims.head_dim), &qt, UpdateKind::prefill);
    c->end_prompt();
    c->update(test::view(k1, dims.n_kv_heads, 1, dims.head_dim),
              test::view(v1, dims.n_kv_heads, 1, dims.head_dim), nullptr, UpdateKind::decode);
  }
  for (size_t h = 0; h < dims.n_kv_heads; ++h) {
    const auto p32 = c32.positions(h), pf = fp16.positions(h);
    ASSERT_EQ(std::vector<int64_t>(p32.begin(), p32.end()),
              std::vector<int64_t>(pf.begin(), pf.end()));
  }
  EXPECT_LT(c32.stats().bytes_stored, c42.stats().bytes_stored);
  EXPECT_GT(c32.stats().bytes_stored, c2.stats().bytes_stored);
}

}  // namespace
}  // namespace snapkv
