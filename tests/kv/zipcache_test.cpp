// ZipCache-adapted codec (include/snapkv/kv/codecs/zipcache.h): routing by saliency, round-trip
// distortion within the derived per-element bound, fused attention against dequantize-then-
// attend, exact bytes, LayerCache stacking (the policy's rows kept; the policy's top-scored rows
// high precision; the full policy's window-attention fallback) and bad configurations, which
// zipcacher (zipcacher_test.cpp) refuses alike. No drift under repeated eviction and .kvc record
// round trips: codec_contract_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kv/codecs/stores.h"
#include "kv/kivi_test_util.h"
#include "kv/kv_test_util.h"
#include "snapkv/kv/codecs/kivi.h"
#include "snapkv/kv/codecs/zipcache.h"
#include "snapkv/kv/core/layer_cache.h"
#include "snapkv/kv/core/row_store.h"
#include "snapkv/kv/core/snapkv_score.h"
#include "snapkv/util/error.h"

namespace snapkv {
namespace {

using kivi_test::read_all;
using kivi_test::realistic_rows;
using kivi_test::round_fp16;
using kivi_test::scale_bound;

constexpr double kU32 = 1.0 / 16777216.0;

CacheConfig zip_config(size_t group, size_t residual, double salient, size_t high) {
  CacheConfig c;
  c.codec = CodecKind::zipcache;
  c.kivi_group = group;
  c.kivi_residual = residual;
  c.zip_salient = salient;
  c.zip_high_bits = high;
  return c;
}

bool row_is_fp16(const std::vector<float>& y, const std::vector<float>& x, size_t r, size_t hd) {
  for (size_t c = 0; c < hd; ++c) {
    if (y[r * hd + c] != round_fp16(x[r * hd + c])) return false;
  }
  return true;
}

// With fp16 high rows, exactly the round(f * n) highest-saliency rows decode as fp16 after the
// flush; the others (2-bit, realistic data) do not.
TEST(ZipCacheStore, SettleRoutesTheTopFractionToHighPrecision) {
  for (RowRole role : {RowRole::key, RowRole::value}) {
    const size_t hd = 32, n = 64;
    auto s = make_row_store(zip_config(32, 64, 0.25, 16), role, hd);
    const std::vector<float> x = realistic_rows(n, hd, 3, true);
    s->append(x.data(), n);
    EXPECT_EQ(s->unsettled_rows(), n);
    std::vector<float> saliency(n);
    std::mt19937 rng(5);
    for (float& v : saliency) v = float(rng() % 100000);
    s->settle(saliency);
    EXPECT_EQ(s->unsettled_rows(), 0u);
    const std::vector<float> extra = realistic_rows(1, hd, 4, true);
    s->append(extra.data(), 1);  // flushes the 64 routed rows
    s->settle({});
    const std::vector<float> y = read_all(*s);
    std::vector<size_t> order(n);
    std::iota(order.begin(), order.end(), size_t{0});
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return saliency[a] > saliency[b]; });
    std::vector<bool> high(n, false);
    for (size_t k = 0; k < 16; ++k) high[order[k]] = true;
    for (size_t r = 0; r < n; ++r) {
      EXPECT_EQ(row_is_fp16(y, x, r, hd), high[r]) << "role " << int(role) << " row " << r;
    }
  }
}

// Per element: |x - x'| <= chan_c (scale_g / 2) + rounding, with chan_c = fp16(sqrt(max_i |x_ic|))
// over the segment for keys (1 for values) and scale_g the stored scale of the row's group of
// y = x / chan, bounded by scale_bound(range of y in the group, bits); plus the fp32 roundings of
// the division, the decode and the product (4 u |x'|-sized terms).
TEST(ZipCacheStore, RoundTripWithinTheDerivedBound) {
  for (RowRole role : {RowRole::key, RowRole::value}) {
    for (size_t high : {4u, 16u}) {
      const size_t hd = 40, group = 16, resid = 48, n = 2 * resid;
      auto s = make_row_store(zip_config(group, resid, 0.3, high), role, hd);
      std::vector<float> x = realistic_rows(n, hd, 8, true);
      for (float& v : x) v = round_fp16(v);
      s->append(x.data(), n);
      std::vector<float> saliency(n);
      for (size_t i = 0; i < n; ++i) saliency[i] = float((i * 37) % n);
      s->settle(saliency);
      const std::vector<float> one = realistic_rows(1, hd, 9, true);
      s->append(one.data(), 1);
      const std::vector<float> y = read_all(*s);
      double err_low = 0, err_high = 0;
      size_t n_low = 0, n_high = 0;
      for (size_t seg = 0; seg < 2; ++seg) {
        std::vector<double> chan(hd, 1.0);
        if (role == RowRole::key) {
          for (size_t c = 0; c < hd; ++c) {
            float m = 0;
            for (size_t i = seg * resid; i < (seg + 1) * resid; ++i)
              m = std::max(m, std::fabs(x[i * hd + c]));
            chan[c] = m > 0 ? round_fp16(std::sqrt(m)) : 1.0;
          }
        }
        // the high rows of this segment: top 30% of the segment's... routing ranks all n rows
        for (size_t i = seg * resid; i < (seg + 1) * resid; ++i) {
          size_t rank = 0;
          for (size_t j = 0; j < n; ++j) rank += saliency[j] > saliency[i];
          const bool is_high = rank < size_t(std::llround(0.3 * n));
          const int bits = is_high ? 4 : 2;
          for (size_t g0 = 0; g0 < hd; g0 += group) {
            const size_t g1 = std::min(hd, g0 + group);
            double lo = 1e300, hi = -1e300;
            for (size_t c = g0; c < g1; ++c) {
              const double v = x[i * hd + c] / chan[c];
              lo = std::min(lo, v);
              hi = std::max(hi, v);
            }
            for (size_t c = g0; c < g1; ++c) {
              const double e = std::fabs(double(x[i * hd + c]) - y[i * hd + c]);
              if (is_high && high == 16) {
                ASSERT_EQ(e, 0.0);
                continue;
              }
              // zero is lo rounded down to fp16: the grid spans up to one fp16 ulp (2^-10 |lo|)
              // more
              const double range = hi - lo + std::fabs(lo) / 1024.0;
              const double bound = chan[c] * (scale_bound(range, bits) / 2 +
                                              8 * kU32 * (std::fabs(hi) + std::fabs(lo))) +
                                   8 * kU32 * std::fabs(x[i * hd + c]);
              ASSERT_LE(e, bound) << "role " << int(role) << " row " << i << " ch " << c;
              (is_high ? err_high : err_low) += e * e;
              (is_high ? n_high : n_low)++;
            }
          }
        }
      }
      if (high == 4) {
        EXPECT_LT(err_high / double(n_high), err_low / double(n_low) / 4);
      }
      EXPECT_EQ(n_low, size_t(n - std::llround(0.3 * n)) * hd);
    }
  }
}

// Bytes: exactly the arrays of the layout.
TEST(ZipCacheStore, BytesAreExact) {
  for (RowRole role : {RowRole::key, RowRole::value}) {
    for (size_t high : {4u, 16u}) {
      const size_t hd = 36, group = 16, resid = 32, n = 100;
      auto s = make_row_store(zip_config(group, resid, 0.2, high), role, hd);
      const std::vector<float> x = realistic_rows(n, hd, 12, true);
      s->append(x.data(), n);
      std::vector<float> sal(n);
      for (size_t i = 0; i < n; ++i) sal[i] = float(i % 7);
      s->settle(sal);
      s->append(x.data(), 1);  // flushes 3 segments of 32 rows; 4 + 1 stay pending
      s->settle({});
      const size_t n_quant = 96, n_pend = 5, n_seg = 3, n_hi = 20 - 0;  // round(0.2*100) = 20
      // high rows among the first 96: rows with sal 6 or 5 (the 20 highest, ties to earlier)
      size_t hi_quant = 0;
      {
        std::vector<size_t> order(n);
        std::iota(order.begin(), order.end(), size_t{0});
        std::stable_sort(order.begin(), order.end(),
                         [&](size_t a, size_t b) { return sal[a] > sal[b]; });
        for (size_t k = 0; k < n_hi; ++k) hi_quant += order[k] < n_quant;
      }
      const size_t words = (hd + 7) / 8, groups = (hd + group - 1) / group;
      const size_t lo_row = words * 2 + groups * sizeof(KiviParams);
      const size_t hi_row = high == 16 ? hd * 2 : words * 4 + groups * sizeof(KiviParams);
      size_t expected = n_seg * sizeof(ZipSegment) + n_quant + (n_quant - hi_quant) * lo_row +
                        hi_quant * hi_row + n_pend * (hd * 2 + 1);
      if (role == RowRole::key) expected += n_seg * hd * 2;
      EXPECT_EQ(s->bytes(), expected) << "role " << int(role) << " high " << high;
    }
  }
}

TEST(ZipCacheStore, FusedAttentionMatchesDequantizeThenAttend) {
  for (RowRole role : {RowRole::key, RowRole::value}) {
    const size_t hd = 24, n = 130;
    auto s = make_row_store(zip_config(8, 16, 0.3, 4), role, hd);
    const std::vector<float> x = realistic_rows(n, hd, 14, true);
    s->append(x.data(), n);
    std::vector<float> sal(n);
    for (size_t i = 0; i < n; ++i) sal[i] = float((i * 13) % 17);
    s->settle(sal);
    s->append(x.data(), 3);
    s->settle({});
    std::vector<uint32_t> keep;
    for (uint32_t i = 0; i < s->rows(); ++i) {
      if (i % 4 != 2) keep.push_back(i);
    }
    s->retain(keep);
    const size_t rows = s->rows(), n_q = 4;
    const std::vector<float> y = read_all(*s);
    const std::vector<float> q = realistic_rows(n_q, hd, 15, false);
    std::vector<float> dots(n_q * rows);
    s->dot_rows(dots.data(), q.data(), n_q);
    for (size_t j = 0; j < n_q; ++j) {
      for (size_t r = 0; r < rows; ++r) {
        double ref = 0, mag = 0;
        for (size_t c = 0; c < hd; ++c) {
          ref += double(q[j * hd + c]) * y[r * hd + c];
          mag += std::fabs(double(q[j * hd + c]) * y[r * hd + c]);
        }
        ASSERT_NEAR(dots[j * rows + r], ref, 2.0 * double(hd + 2) * kU32 * mag);
      }
    }
    std::vector<float> w(n_q * rows), acc(n_q * hd, 0.0f);
    for (size_t i = 0; i < w.size(); ++i) w[i] = float((i * 7) % 11) / float(11 * rows);
    s->accumulate_rows(acc.data(), w.data(), n_q);
    for (size_t j = 0; j < n_q; ++j) {
      for (size_t c = 0; c < hd; ++c) {
        double ref = 0, mag = 0;
        for (size_t r = 0; r < rows; ++r) {
          ref += double(w[j * rows + r]) * y[r * hd + c];
          mag += std::fabs(double(w[j * rows + r]) * y[r * hd + c]);
        }
        ASSERT_NEAR(acc[j * hd + c], ref, 2.0 * double(rows + 2) * kU32 * mag);
      }
    }
  }
}

// zipcache and zipcacher refuse the same bad configurations with the same named errors.
class ZipBadConfig : public ::testing::TestWithParam<CodecKind> {};

TEST_P(ZipBadConfig, BadConfigsAreClearErrors) {
  const CodecKind codec = GetParam();
  const auto config = [&](double salient, size_t high) {
    CacheConfig c = zip_config(8, 16, salient, high);
    c.codec = codec;
    return c;
  };
  auto expect_error = [](const CacheConfig& c, const std::string& part) {
    try {
      make_row_store(c, RowRole::value, 32);
      ADD_FAILURE() << "no error for " << part;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  expect_error(config(1.2, 4), "zip_salient out of range");
  expect_error(config(-0.5, 4), "zip_salient out of range");
  expect_error(config(-0.1, 4), "zip_salient out of range");
  expect_error(config(0.2, 8), "zip_high_bits unsupported");
  for (size_t sinks : {2u, 4u}) {
    CacheConfig with_sinks = config(0.2, 4);
    with_sinks.kivi_fp16_sinks = sinks;
    expect_error(with_sinks, "kivi_fp16_sinks");
  }
  CacheConfig c = config(1.5, 4);
  EXPECT_THROW(c.validate(), std::invalid_argument);
  auto s = make_row_store(config(0.2, 4), RowRole::key, 8);
  const std::vector<float> x = realistic_rows(4, 8, 1, false);
  s->append(x.data(), 4);
  const std::vector<float> wrong(3, 1.0f);
  EXPECT_THROW(s->settle(wrong), std::invalid_argument);
}

INSTANTIATE_TEST_SUITE_P(Codecs, ZipBadConfig,
                         ::testing::Values(CodecKind::zipcache, CodecKind::zipcacher),
                         [](const ::testing::TestParamInfo<CodecKind>& p) {
                           return std::string(to_string(p.param));
                         });

// Under LayerCache: snapkv + zipcache keeps exactly snapkv + fp16's rows (selection runs before
// anything is quantized), and the kept rows the policy scored highest are the fp16 ones.
// With policy full the window's attention routes the rows instead.
TEST(ZipCacheCache, StackingKeepsThePolicysRowsAndRoutesByItsScores) {
  const CacheDims dims{4, 2, 16};
  for (const PolicyKind policy : {PolicyKind::snapkv, PolicyKind::full}) {
    CacheConfig base;
    base.policy = policy;
    base.budget = 80;
    base.window = 8;
    base.n_sink = 4;
    base.kernel = 5;
    base.kivi_group = 16;
    base.kivi_residual = 16;
    CacheConfig zip = base;
    zip.codec = CodecKind::zipcache;
    zip.zip_salient = 0.25;
    zip.zip_high_bits = 16;
    LayerCache fp16(dims, base), cache(dims, zip);
    const size_t s_total = 200;
    const auto k = test::random_normal(dims.n_kv_heads * s_total * dims.head_dim, 1);
    const auto v = test::random_normal(dims.n_kv_heads * s_total * dims.head_dim, 2);
    const auto q = test::random_normal(dims.n_heads * base.window * dims.head_dim, 3);
    const Tensor3 qt{q.data(), dims.n_heads, base.window, dims.head_dim};
    for (LayerCache* c : {&fp16, &cache}) {
      c->update(test::view(k, dims.n_kv_heads, s_total, dims.head_dim),
                test::view(v, dims.n_kv_heads, s_total, dims.head_dim), &qt, UpdateKind::prefill);
      c->end_prompt();
    }
    const auto k1 = test::random_normal(dims.n_kv_heads * dims.head_dim, 4);
    const auto v1 = test::random_normal(dims.n_kv_heads * dims.head_dim, 5);
    for (LayerCache* c : {&fp16, &cache}) {  // the first decode step flushes the routed rows
      c->update(test::view(k1, dims.n_kv_heads, 1, dims.head_dim),
                test::view(v1, dims.n_kv_heads, 1, dims.head_dim));
    }
    for (size_t h = 0; h < dims.n_kv_heads; ++h) {
      const auto pz = cache.positions(h), pf = fp16.positions(h);
      ASSERT_EQ(std::vector<int64_t>(pz.begin(), pz.end()),
                std::vector<int64_t>(pf.begin(), pf.end()));
      const size_t n = cache.size(h) - 1;  // the prompt's kept rows
      std::vector<float> scores(n);
      std::vector<float> fkeys(fp16.size(h) * dims.head_dim), zkeys(fkeys.size());
      fp16.read_keys(h, fkeys.data());
      cache.read_keys(h, zkeys.data());
      if (policy == PolicyKind::snapkv) {
        const auto all = cache.last_scores(h);
        for (size_t i = 0; i < n; ++i) scores[i] = all[size_t(pz[i])];
      } else {
        window_scores(scores.data(), fkeys.data(), n, dims.head_dim,
                      q.data() + h * 2 * base.window * dims.head_dim, 2, base.window, true);
      }
      std::vector<size_t> order(n);
      std::iota(order.begin(), order.end(), size_t{0});
      std::stable_sort(order.begin(), order.end(),
                       [&](size_t a, size_t b) { return scores[a] > scores[b]; });
      const size_t n_high = size_t(std::llround(0.25 * double(n)));
      const size_t flushed = (n / 16) * 16;  // rows past this stay pending fp16
      std::vector<bool> high(n, false);
      for (size_t i = 0; i < n_high; ++i) high[order[i]] = true;
      for (size_t r = 0; r < flushed; ++r) {
        bool same = true;
        for (size_t c = 0; c < dims.head_dim; ++c) {
          same &= zkeys[r * dims.head_dim + c] == fkeys[r * dims.head_dim + c];
        }
        EXPECT_EQ(same, high[r]) << to_string(policy) << " head " << h << " row " << r;
      }
    }
  }
}

}  // namespace
}  // namespace snapkv
