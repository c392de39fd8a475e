// KIVI codec: parameter choice, packing, round-trip distortion per bit width on realistic data,
// constant groups, residual flush boundaries, sinks, byte accounting, bad configs and clones. The
// no-drift rule under repeated eviction: codec_contract_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kv/codecs/stores.h"
#include "kv/kivi_test_util.h"
#include "snapkv/kv/codecs/kivi.h"
#include "snapkv/kv/core/row_store.h"

namespace snapkv {
namespace {

using kivi_test::fp16_rounding;
using kivi_test::read_all;
using kivi_test::realistic_rows;
using kivi_test::round_fp16;
using kivi_test::scale_bound;

constexpr double kU32 = 1.0 / 16777216.0;  // fp32 unit roundoff 2^-24

TEST(KiviParams, ConstantGroupIsExactWithZeroScale) {
  for (int bits : {2, 4}) {
    for (float v : {0.0f, -3.5f, 1234.0f, round_fp16(0.1f), -65504.0f}) {
      const KiviParams p = kivi_choose_params(v, v, bits);
      EXPECT_EQ(p.scale, 0);
      EXPECT_EQ(kivi_encode(v, p, bits), 0u);
      EXPECT_EQ(kivi_decode(0, p), v);
    }
  }
}

TEST(KiviParams, GridCoversRangeAndScaleIsTight) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-100.0f, 100.0f);
  for (int bits : {2, 4}) {
    const uint32_t top = kivi_max_code(bits);
    for (int t = 0; t < 2000; ++t) {
      float lo = round_fp16(u(rng)), hi = round_fp16(u(rng));
      if (t % 7 == 0) hi = round_fp16(lo + 1e-4f * std::fabs(lo));  // tiny ranges
      if (lo > hi) std::swap(lo, hi);
      const KiviParams p = kivi_choose_params(lo, hi, bits);
      EXPECT_EQ(fp16_to_fp32(p.zero), lo);  // lo is an fp16 value: zero is exact
      EXPECT_GE(kivi_decode(top, p), hi);   // the grid reaches the maximum
      if (hi > lo) {
        EXPECT_GT(p.scale, 0);  // a positive range never gets a zero scale
        // one fp16 step below the chosen scale would no longer reach hi (rounded up, not more)
        const float smaller = fp16_to_fp32(static_cast<fp16_t>(p.scale - 1));
        EXPECT_LT(kivi_decode(top, smaller, lo), hi);
      }
    }
  }
}

TEST(KiviParams, EncodePicksTheNearestCode) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-8.0f, 8.0f);
  for (int bits : {2, 4}) {
    for (int t = 0; t < 200; ++t) {
      float lo = round_fp16(u(rng)), hi = round_fp16(u(rng));
      if (lo > hi) std::swap(lo, hi);
      const KiviParams p = kivi_choose_params(lo, hi, bits);
      std::uniform_real_distribution<float> in(lo, hi);
      for (int k = 0; k < 50; ++k) {
        const float x = round_fp16(in(rng));
        const uint32_t code = kivi_encode(x, p, bits);
        ASSERT_LE(code, kivi_max_code(bits));
        for (uint32_t other = 0; other <= kivi_max_code(bits); ++other) {
          EXPECT_LE(std::fabs(x - kivi_decode(code, p)), std::fabs(x - kivi_decode(other, p)));
        }
      }
    }
  }
}

TEST(KiviParams, BadInputsAreClearErrors) {
  EXPECT_THROW(kivi_choose_params(0.0f, 1.0f, 5), std::invalid_argument);  // 2, 3 or 4
  EXPECT_THROW(kivi_choose_params(1.0f, 0.0f, 2), std::invalid_argument);
  EXPECT_THROW(kivi_choose_params(0.0f, 70000.0f, 2), std::invalid_argument);
  EXPECT_THROW(kivi_choose_params(NAN, 1.0f, 2), std::invalid_argument);
}

TEST(KiviPack, WordsRoundTrip) {
  for (int bits : {2, 4}) {
    std::mt19937 rng(static_cast<uint32_t>(bits));
    for (int t = 0; t < 100; ++t) {
      uint8_t codes[kKiviOctet], back[kKiviOctet];
      for (auto& c : codes) c = static_cast<uint8_t>(rng() & kivi_max_code(bits));
      const uint32_t word = kivi_pack_word(codes, bits);
      EXPECT_LT(word, bits == 2 ? 1u << 16 : 0xFFFFFFFFu);
      kivi_unpack_word(back, word, bits);
      EXPECT_EQ(0, std::memcmp(codes, back, kKiviOctet));
      uint8_t buf[16] = {};
      kivi_store_word(buf, 1, word, bits);
      EXPECT_EQ(kivi_load_word(buf, 1, bits), word);
      // element k sits in bits [b*k, b*k + b)
      EXPECT_EQ((word >> (bits * 5)) & kivi_max_code(bits), codes[5]);
    }
  }
}

// Round trip of a whole store on realistic data, with the per-element bound
//   |x - x'| <= |x - fp16(x)| + scale/2 + |x'| * 2^-23
// (fp16 residual rounding, half a grid step, the decode's fp32 rounding plus slack for the
// nearest-point choice). scale is bounded from the group's own range (scale_bound).
struct Distortion {
  double nmse = 0, max_abs = 0, max_ratio = 0, expected_mse_ratio = 0;
  size_t sign_flips = 0, elements = 0;
};

Distortion round_trip(RowRole role, int bits, size_t head_dim, size_t group, bool outliers) {
  const size_t residual = 4 * group, n = 8 * residual + 5;  // 32 groups quantized, 5 in residual
  const std::vector<float> x = realistic_rows(n, head_dim, 1234, outliers);
  auto store = make_kivi_row_store(role, bits, head_dim, group, residual, 0);
  // append in uneven chunks: the result must not depend on chunking
  std::mt19937 rng(5);
  size_t n_resid = 0;  // the flush rule: at an append, R rows at a time while >= R wait
  for (size_t done = 0; done < n;) {
    const size_t take = std::min<size_t>(n - done, 1 + rng() % 50);
    store->append(x.data() + done * head_dim, take);
    while (n_resid >= residual) n_resid -= residual;
    n_resid += take;
    done += take;
  }
  EXPECT_EQ(store->rows(), n);
  const std::vector<float> y = read_all(*store);
  const size_t n_quant = n - n_resid;
  EXPECT_GE(n_quant, 7 * residual);
  // each quantized element's group range, from the fp16-rounded data:
  // keys [n_quant / group][head_dim], values [n_quant][n_vgroups]
  const size_t n_vgroups = (head_dim + group - 1) / group;
  std::vector<std::pair<float, float>> ranges(
      role == RowRole::key ? n_quant / group * head_dim : n_quant * n_vgroups,
      {INFINITY, -INFINITY});
  for (size_t r = 0; r < n_quant; ++r) {
    for (size_t c = 0; c < head_dim; ++c) {
      auto& [lo, hi] =
          ranges[role == RowRole::key ? (r / group) * head_dim + c : r * n_vgroups + c / group];
      lo = std::min(lo, round_fp16(x[r * head_dim + c]));
      hi = std::max(hi, round_fp16(x[r * head_dim + c]));
    }
  }
  Distortion d;
  double err2 = 0, sig2 = 0, bound_mse = 0;
  for (size_t r = 0; r < n; ++r) {
    for (size_t c = 0; c < head_dim; ++c) {
      const size_t i = r * head_dim + c;
      if (r >= n_quant) {  // residual: exactly fp16
        EXPECT_EQ(y[i], round_fp16(x[i]));
        continue;
      }
      const auto [lo, hi] =
          ranges[role == RowRole::key ? (r / group) * head_dim + c : r * n_vgroups + c / group];
      const double s = scale_bound(double(hi) - lo, bits);
      const double e = std::fabs(double(x[i]) - y[i]);
      const double bound = fp16_rounding(x[i]) + s / 2 + std::fabs(y[i]) * 2 * kU32;
      EXPECT_LE(e, bound) << "row " << r << " channel " << c;
      d.max_abs = std::max(d.max_abs, e);
      d.max_ratio = std::max(d.max_ratio, e / (s / 2 + 1e-30));
      if (x[i] != 0 && (x[i] > 0) != (y[i] > 0)) {
        ++d.sign_flips;
        EXPECT_LE(std::fabs(x[i]), bound);  // a flip needs |x| within the error bound
      }
      err2 += e * e;
      sig2 += double(x[i]) * x[i];
      bound_mse += s * s / 12.0;  // uniform rounding error over a step s
      ++d.elements;
    }
  }
  d.nmse = err2 / sig2;
  d.expected_mse_ratio = err2 / bound_mse;
  return d;
}

TEST(KiviStore, RoundTripDistortionPerBitWidth) {
  Distortion results[2][2];  // [role][bits == 4]
  for (RowRole role : {RowRole::key, RowRole::value}) {
    for (int bits : {2, 4}) {
      const Distortion d = round_trip(role, bits, 128, 32, true);
      const int ri = role == RowRole::key ? 0 : 1;
      results[ri][bits == 4] = d;
      std::printf(
          "[kivi] %s %d-bit: nmse %.5f  max|err| %.4f  max err/(scale/2) %.3f  "
          "mse/(s^2/12) %.3f  sign flips %zu / %zu\n",
          ri == 0 ? "keys  " : "values", bits, d.nmse, d.max_abs, d.max_ratio, d.expected_mse_ratio,
          d.sign_flips, d.elements);
      // Rounding to a grid of step s leaves an error roughly uniform on [-s/2, s/2] (variance
      // s^2/12) except at each group's min and max, which are exact. At 2 bits a step spans
      // ~1.3 sigma of a normal group, so the density tilts inside a step and the in-step error
      // is not quite uniform (measured 0.93-1.16 of s^2/12 on this data); over ~130K elements
      // the mean concentrates, so 1.4 leaves margin while a wrong code choice or grid shows up
      // as a factor (always rounding down: ~4x; a one-step grid offset: ~13x).
      EXPECT_LE(d.expected_mse_ratio, 1.4);
      EXPECT_GT(d.expected_mse_ratio, 0.5);
    }
    // 4-bit steps are 5x finer than 2-bit ((2^2-1)/(2^4-1)): the MSE ratio is ~25; ask for 10.
    const int ri = role == RowRole::key ? 0 : 1;
    EXPECT_LT(results[ri][1].nmse * 10, results[ri][0].nmse);
    EXPECT_LT(results[ri][1].sign_flips, results[ri][0].sign_flips);
  }
  // Absolute levels on N(0,1) data with outliers: 2-bit NMSE well under 1 (the signal survives),
  // 4-bit under 1%.
  EXPECT_LT(results[0][0].nmse, 0.25);
  EXPECT_LT(results[0][1].nmse, 0.01);
}

// Why keys are quantized per channel: with outlier channels a per-token grouping (the value
// layout) must stretch every group over the outlier, per-channel groups do not.
TEST(KiviStore, PerChannelKeysBeatPerTokenOnOutlierChannels) {
  for (int bits : {2, 4}) {
    const Distortion as_keys = round_trip(RowRole::key, bits, 128, 32, true);
    const Distortion as_values = round_trip(RowRole::value, bits, 128, 32, true);
    EXPECT_LT(as_keys.nmse, as_values.nmse) << bits;
  }
}

TEST(KiviStore, OddHeadDimAndValueTailGroup) {
  // head_dim 40 with G = 16: value groups of 16, 16 and an 8-channel tail; 13 is not a multiple
  // of the 8-code word either.
  for (size_t head_dim : {size_t{40}, size_t{13}}) {
    for (RowRole role : {RowRole::key, RowRole::value}) {
      const Distortion d = round_trip(role, 2, head_dim, 16, false);
      EXPECT_GT(d.elements, 0u);
      EXPECT_LE(d.max_ratio, 1.0 + 1e-3);
    }
  }
}

TEST(KiviStore, ConstantGroupsAreExact) {
  const size_t head_dim = 16, group = 8, residual = 16, n = 40;
  std::vector<float> x(n * head_dim);
  for (size_t r = 0; r < n; ++r) {
    for (size_t c = 0; c < head_dim; ++c) {
      // key channels constant over rows; value rows constant over each 8-channel group
      x[r * head_dim + c] = round_fp16(0.37f * float(c) - 2.0f);
    }
  }
  for (int bits : {2, 4}) {
    auto keys = make_kivi_row_store(RowRole::key, bits, head_dim, group, residual, 0);
    keys->append(x.data(), n);
    EXPECT_EQ(read_all(*keys), x);
    std::vector<float> v(n * head_dim);
    for (size_t r = 0; r < n; ++r) {
      for (size_t c = 0; c < head_dim; ++c)
        v[r * head_dim + c] = round_fp16(float(r) - float(c / 8));
    }
    auto values = make_kivi_row_store(RowRole::value, bits, head_dim, group, residual, 0);
    values->append(v.data(), n);
    EXPECT_EQ(read_all(*values), v);
    std::vector<float> zeros(n * head_dim, 0.0f);
    auto z = make_kivi_row_store(RowRole::key, bits, head_dim, group, residual, 0);
    z->append(zeros.data(), n);
    EXPECT_EQ(read_all(*z), zeros);
  }
}

size_t expected_bytes(RowRole role, int bits, size_t head_dim, size_t group, size_t n_quant,
                      size_t n_fp16) {
  size_t b = n_fp16 * head_dim * 2;
  if (role == RowRole::key) {
    const size_t blocks = n_quant / group;  // full blocks only (no eviction yet)
    b += blocks * ((group + 7) / 8 * head_dim * size_t(bits) + 2 * head_dim * 2 + 8);
  } else {
    b += n_quant * ((head_dim + 7) / 8 * size_t(bits) + (head_dim + group - 1) / group * 4);
  }
  return b;
}

// Decode-style appends (one row each) around the residual size R: R-1 and R rows are all fp16,
// the (R+1)-th row quantizes the first R as a block. A bulk append keeps its rows fp16 until the
// next append, which quantizes them R at a time.
TEST(KiviStore, ResidualFlushBoundaries) {
  const size_t head_dim = 64, group = 32, residual = 128;
  for (RowRole role : {RowRole::key, RowRole::value}) {
    for (int bits : {2, 4}) {
      const std::vector<float> x = realistic_rows(3 * residual + 2, head_dim, 99, true);
      for (size_t n : {residual - 1, residual, residual + 1, 2 * residual, 2 * residual + 1}) {
        auto row_by_row = make_kivi_row_store(role, bits, head_dim, group, residual, 0);
        for (size_t r = 0; r < n; ++r) row_by_row->append(x.data() + r * head_dim, 1);
        const size_t n_fp16 = (n - 1) % residual + 1, n_quant = n - n_fp16;
        EXPECT_EQ(row_by_row->bytes(), expected_bytes(role, bits, head_dim, group, n_quant, n_fp16))
            << "n = " << n;
        const std::vector<float> y = read_all(*row_by_row);
        size_t changed = 0;
        for (size_t i = 0; i < n * head_dim; ++i) {
          if (i >= n_quant * head_dim) {
            EXPECT_EQ(y[i], round_fp16(x[i]));
          } else {
            changed += y[i] != round_fp16(x[i]);
          }
        }
        if (n_quant > 0) {
          EXPECT_GT(changed, n_quant * head_dim / 2) << "rows were not quantized";
        }
        // one bulk append: everything fp16 until the next append ...
        auto bulk = make_kivi_row_store(role, bits, head_dim, group, residual, 0);
        bulk->append(x.data(), n);
        EXPECT_EQ(bulk->bytes(), expected_bytes(role, bits, head_dim, group, 0, n));
        std::vector<float> fp16(n * head_dim);
        for (size_t i = 0; i < fp16.size(); ++i) fp16[i] = round_fp16(x[i]);
        EXPECT_EQ(read_all(*bulk), fp16);
        // ... which quantizes R rows at a time, the same codes as row by row
        bulk->append(x.data() + n * head_dim, 1);
        row_by_row->append(x.data() + n * head_dim, 1);
        const size_t packed = n / residual * residual;
        EXPECT_EQ(bulk->bytes(),
                  expected_bytes(role, bits, head_dim, group, packed, n + 1 - packed));
        const std::vector<float> yb = read_all(*bulk), yr = read_all(*row_by_row);
        EXPECT_TRUE(std::equal(yb.begin(), yb.begin() + long(packed * head_dim), yr.begin()))
            << "bulk and row-by-row packing differ at n = " << n;
      }
    }
  }
}

TEST(KiviStore, SinksStayFp16) {
  const size_t head_dim = 32, n_sinks = 4;
  const std::vector<float> x = realistic_rows(300, head_dim, 3, true);
  for (RowRole role : {RowRole::key, RowRole::value}) {
    auto s = make_kivi_row_store(role, 2, head_dim, 8, 16, n_sinks);
    s->append(x.data(), 2);
    s->append(x.data() + 2 * head_dim, 298);
    std::vector<float> y = read_all(*s);
    for (size_t i = 0; i < n_sinks * head_dim; ++i) EXPECT_EQ(y[i], round_fp16(x[i]));
    // rows: 4 sinks, then the 296 others, all in the residual until the next append
    EXPECT_EQ(s->bytes(), expected_bytes(role, 2, head_dim, 8, 0, 300));
    s->append(x.data(), 1);  // quantizes 288 rows (18 x R), 8 + 1 stay fp16
    y = read_all(*s);
    for (size_t i = 0; i < n_sinks * head_dim; ++i) EXPECT_EQ(y[i], round_fp16(x[i]));
    const size_t n_fp16 = n_sinks + 9, n_quant = 301 - n_fp16;
    EXPECT_EQ(s->bytes(), expected_bytes(role, 2, head_dim, 8, n_quant, n_fp16));
    // drop sink 1: the sinks shrink to 3 and are never refilled by later rows
    std::vector<uint32_t> keep;
    for (uint32_t i = 0; i < 301; ++i) {
      if (i != 1) keep.push_back(i);
    }
    s->retain(keep);
    s->append(x.data(), 1);
    y = read_all(*s);
    ASSERT_EQ(s->rows(), 301u);
    for (size_t r : {size_t{0}, size_t{2}, size_t{3}}) {
      const size_t now = r == 0 ? 0 : r - 1;
      for (size_t c = 0; c < head_dim; ++c) {
        EXPECT_EQ(y[now * head_dim + c], round_fp16(x[r * head_dim + c]));
      }
    }
  }
}

TEST(KiviStore, BadConfigsAreClearErrors) {
  auto expect_error = [](auto&& make, const std::string& needle) {
    try {
      make();
      ADD_FAILURE() << "no error for " << needle;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("[kivi]"), std::string::npos) << e.what();
    }
  };
  CacheConfig c;
  c.codec = CodecKind::kivi2;
  c.kivi_group = 0;
  expect_error([&] { make_row_store(c, RowRole::key, 64); }, "kivi_group must be positive");
  c.kivi_group = 32;
  c.kivi_residual = 48;
  expect_error([&] { make_row_store(c, RowRole::value, 64); }, "multiple of kivi_group");
  // kivi_residual 0 in a config is the codec's default (kv/core/config.h); the store itself refuses
  // 0.
  expect_error([&] { make_kivi_row_store(RowRole::value, 2, 64, 32, 0, 0); },
               "multiple of kivi_group");
  for (int bits : {0, 1, 5, 8}) {  // 3 is kivi32's key width (kivi_mixed_test.cpp)
    expect_error([&] { make_kivi_row_store(RowRole::key, bits, 64, 32, 128, 0); },
                 "unsupported bit width");
  }
  c.kivi_residual = 128;
  c.codec = CodecKind::fp16;
  expect_error([&] { make_kivi_row_store(c, RowRole::key, 64); }, "not a KIVI codec");
  auto s = make_kivi_row_store(RowRole::key, 2, 4, 4, 4, 0);
  const float big[4] = {1.0f, 70000.0f, 0.0f, 0.0f};
  expect_error([&] { s->append(big, 1); }, "outside the fp16 range");
  EXPECT_EQ(s->rows(), 0u);  // nothing was stored
  const float ok[4] = {1, 2, 3, 4};
  s->append(ok, 1);
  const uint32_t bad_keep[2] = {0, 0};
  expect_error([&] { s->retain(bad_keep); }, "strictly increasing");
  const uint32_t out_of_range[1] = {5};
  expect_error([&] { s->retain(out_of_range); }, "strictly increasing");
  float out[8];
  expect_error([&] { s->read(out, 0, 2); }, "out of bounds");
}

TEST(KiviStore, CloneIsIndependent) {
  const std::vector<float> x = realistic_rows(100, 16, 8, false);
  auto a = make_kivi_row_store(RowRole::key, 4, 16, 8, 16, 0);
  a->append(x.data(), 100);
  auto b = a->clone();
  const std::vector<float> before = read_all(*b);
  const uint32_t keep[3] = {1, 50, 99};
  a->retain(keep);
  EXPECT_EQ(a->rows(), 3u);
  EXPECT_EQ(read_all(*b), before);
  EXPECT_EQ(b->rows(), 100u);
}

}  // namespace
}  // namespace snapkv
