// zipcacher: zipcache (include/snapkv/kv/codecs/zipcache.h) whose value rows are turned by the
// rotation of kv/codecs/rotation.h (kv/codecs/rotated_store.cpp); keys are plain zipcache. The
// value store is exactly a zipcache store of the rotated rows read back through R^T, the key store
// a zipcache store; round-trip distortion within the bound derived from the inner store's
// per-element bound plus the two transforms' rounding; lower distortion than zipcache on values
// with outlier channels; fused attention against dequantize-then-attend; LayerCache stacking keeps
// the policy's rows. Bad configurations: zipcache_test.cpp (ZipBadConfig); no drift under repeated
// eviction and .kvc record round trips: codec_contract_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "kv/codecs/stores.h"
#include "kv/kivi_test_util.h"
#include "kv/kv_test_util.h"
#include "snapkv/kv/codecs/rotation.h"
#include "snapkv/kv/core/layer_cache.h"
#include "snapkv/kv/core/row_store.h"
#include "snapkv/util/error.h"

namespace snapkv {
namespace {

using kivi_test::read_all;
using kivi_test::realistic_rows;
using kivi_test::round_fp16;
using kivi_test::scale_bound;

constexpr double kU32 = 1.0 / 16777216.0;
constexpr uint64_t kSeed = 4321;

CacheConfig zipr_config(size_t group, size_t residual, double salient, size_t high,
                        CodecKind codec = CodecKind::zipcacher) {
  CacheConfig c;
  c.codec = codec;
  c.kivi_group = group;
  c.kivi_residual = residual;
  c.zip_salient = salient;
  c.zip_high_bits = high;
  c.rotation_seed = kSeed;
  return c;
}

bool rotates(RowRole role) {
  return role == RowRole::value;
}

double norm(const float* x, size_t d) {
  double s = 0;
  for (size_t c = 0; c < d; ++c) s += double(x[c]) * x[c];
  return std::sqrt(s);
}

// n rows appended, settled with saliency (i * 37) % n, then one more row.
std::unique_ptr<RowStore> filled(const CacheConfig& c, RowRole role, const std::vector<float>& x,
                                 size_t n, size_t hd) {
  auto s = make_row_store(c, role, hd);
  s->append(x.data(), n);
  std::vector<float> sal(n);
  for (size_t i = 0; i < n; ++i) sal[i] = float((i * 37) % n);
  s->settle(sal);
  s->append(x.data() + n * hd, 1);
  s->settle({});
  return s;
}

// The wrapper adds nothing but the rotation: a zipcache store fed R x (the same fast transform)
// decodes to exactly R of what zipcacher's value store decodes, both before and after an
// eviction; bytes differ by the 8-byte seed. The key store is a zipcache store of x.
TEST(ZipCacheR, IsTheZipcacheStoreOfTheRotatedRows) {
  for (RowRole role : {RowRole::key, RowRole::value}) {
    const size_t hd = 40, n = 100;
    const std::vector<float> x = realistic_rows(n + 1, hd, 5, true);
    std::vector<float> y = x;
    const HadamardRotation rot(hd, kSeed);
    if (rotates(role)) rot.rotate(y.data(), n + 1);
    auto r = filled(zipr_config(8, 32, 0.25, 4), role, x, n, hd);
    auto z = filled(zipr_config(8, 32, 0.25, 4, CodecKind::zipcache), role, y, n, hd);
    for (int pass = 0; pass < 2; ++pass) {
      ASSERT_EQ(r->rows(), z->rows());
      std::vector<float> zr = read_all(*z);
      if (rotates(role)) rot.unrotate(zr.data(), z->rows());
      EXPECT_EQ(read_all(*r), zr) << "role " << int(role) << " pass " << pass;
      EXPECT_EQ(r->bytes(), z->bytes() + (rotates(role) ? sizeof(uint64_t) : 0));
      std::vector<uint32_t> keep;
      for (uint32_t i = 0; i < r->rows(); ++i) {
        if (i % 3 != 1) keep.push_back(i);
      }
      r->retain(keep);
      z->retain(keep);
    }
  }
}

// Per row: in the stored coordinates (y = fp16(R x) for values, fp16(x) for keys) each element's
// error is at most
//   e_c = |y_c - fp16(y_c)| + chan_c (s_g / 2 + 8 u (|hi| + |lo|)) + 8 u |y_c|
// (zipcache's bound of zipcache_test.cpp: chan_c = fp16(sqrt(max_i |y_ic|)) over the segment for
// keys, 1 for values; s_g the scale bound of the group's range of y / chan, widened by one fp16
// ulp of lo; zero for fp16 high rows); back in x coordinates the error is at most
// ||e||_2 + (L + 3) u (||x|| + ||x'|| + ||e||_2) for values, ||e||_2 for keys.
TEST(ZipCacheR, RoundTripWithinTheDerivedBound) {
  for (RowRole role : {RowRole::key, RowRole::value}) {
    for (size_t high : {4u, 16u}) {
      const size_t hd = 48, group = 16, resid = 32, n = 2 * resid;
      const double salient = 0.25;
      const std::vector<float> x = realistic_rows(n + 1, hd, 8, true);
      auto s = filled(zipr_config(group, resid, salient, high), role, x, n, hd);
      const std::vector<float> out = read_all(*s);
      const HadamardRotation rot(hd, kSeed);
      std::vector<float> y = x;
      if (rotates(role)) rot.rotate(y.data(), n + 1);
      std::vector<float> yh(y.size());
      for (size_t i = 0; i < y.size(); ++i) yh[i] = round_fp16(y[i]);
      std::vector<float> sal(n);
      for (size_t i = 0; i < n; ++i) sal[i] = float((i * 37) % n);
      size_t checked = 0;
      for (size_t seg = 0; seg < 2; ++seg) {
        std::vector<double> chan(hd, 1.0);
        if (role == RowRole::key) {
          for (size_t c = 0; c < hd; ++c) {
            float m = 0;
            for (size_t i = seg * resid; i < (seg + 1) * resid; ++i)
              m = std::max(m, std::fabs(yh[i * hd + c]));
            chan[c] = m > 0 ? round_fp16(std::sqrt(m)) : 1.0;
          }
        }
        for (size_t i = seg * resid; i < (seg + 1) * resid; ++i) {
          size_t rank = 0;
          for (size_t j = 0; j < n; ++j) rank += sal[j] > sal[i];
          const bool is_high = rank < size_t(std::llround(salient * double(n)));
          std::vector<float> e(hd);
          for (size_t g0 = 0; g0 < hd; g0 += group) {
            const size_t g1 = std::min(hd, g0 + group);
            double lo = 1e300, hi = -1e300;
            for (size_t c = g0; c < g1; ++c) {
              const double v = yh[i * hd + c] / chan[c];
              lo = std::min(lo, v);
              hi = std::max(hi, v);
            }
            for (size_t c = g0; c < g1; ++c) {
              const double q = std::fabs(double(y[i * hd + c]) - yh[i * hd + c]);
              double b = 0;
              if (!(is_high && high == 16)) {
                const double range = hi - lo + std::fabs(lo) / 1024.0;
                b = chan[c] * (scale_bound(range, is_high ? 4 : 2) / 2 +
                               8 * kU32 * (std::fabs(hi) + std::fabs(lo))) +
                    8 * kU32 * std::fabs(yh[i * hd + c]);
              }
              e[c] = float(q + b);
            }
          }
          const double en = norm(e.data(), hd);
          const double turn = rotates(role) ? double(rot.stages() + 3) * kU32 : 0.0;
          const double bound = en + turn * (norm(&x[i * hd], hd) + norm(&out[i * hd], hd) + en);
          double d2 = 0;
          for (size_t c = 0; c < hd; ++c) {
            const double d = double(out[i * hd + c]) - x[i * hd + c];
            d2 += d * d;
          }
          ASSERT_LE(std::sqrt(d2), bound * (1 + 1e-6))
              << "role " << int(role) << " high " << high << " row " << i;
          ++checked;
        }
      }
      EXPECT_EQ(checked, n);
    }
  }
}

// The point of the rotation: values with outlier channels (quantized per token, one min/max per
// group) lose less with the rotation than without it.
TEST(ZipCacheR, RotationLowersValueDistortionWithOutlierChannels) {
  const size_t hd = 32, n = 128;
  const std::vector<float> x = realistic_rows(n + 1, hd, 21, true);
  double err[2] = {0, 0}, sig = 0;
  int k = 0;
  for (CodecKind codec : {CodecKind::zipcache, CodecKind::zipcacher}) {
    auto s = filled(zipr_config(32, 64, 0.2, 4, codec), RowRole::value, x, n, hd);
    const std::vector<float> out = read_all(*s);
    for (size_t i = 0; i < n * hd; ++i) {
      err[k] += (double(out[i]) - x[i]) * (double(out[i]) - x[i]);
      if (k == 0) sig += double(x[i]) * x[i];
    }
    ++k;
  }
  EXPECT_LT(err[1], 0.5 * err[0]) << "nmse zipcache " << err[0] / sig << ", zipcacher "
                                  << err[1] / sig;
}

// dot_rows / accumulate_rows against double attention over read() rows. The inner store decodes
// rows and takes fp32 dots and axpys (2 (hd + 2) u and 2 (rows + 2) u of the magnitudes, as in
// zipcache_test.cpp); the query's rotation and the read's unrotation add 2 (L + 3) u ||q|| ||x'||
// per dot, and the sum's unrotation plus the read's add 2 (L + 3) u sum_r |w_r| ||x'_r|| per
// output vector (keys are not rotated: their bound keeps these terms, a looser check).
TEST(ZipCacheR, FusedAttentionMatchesDequantizeThenAttend) {
  for (RowRole role : {RowRole::key, RowRole::value}) {
    const size_t hd = 24, n = 130;
    const std::vector<float> x = realistic_rows(n + 1, hd, 14, true);
    auto s = filled(zipr_config(8, 16, 0.3, 4), role, x, n, hd);
    std::vector<uint32_t> keep;
    for (uint32_t i = 0; i < s->rows(); ++i) {
      if (i % 4 != 2) keep.push_back(i);
    }
    s->retain(keep);
    const size_t rows = s->rows(), n_q = 4;
    const double stages = double(HadamardRotation(hd, kSeed).stages());
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
        const double rn = norm(&y[r * hd], hd) * (1 + 2 * (stages + 3) * kU32);
        const double bound = 2.0 * double(hd + 2) * kU32 * (mag + norm(&q[j * hd], hd) * rn) +
                             2.0 * (stages + 3) * kU32 * norm(&q[j * hd], hd) * rn;
        ASSERT_NEAR(dots[j * rows + r], ref, bound) << "role " << int(role) << " r " << r;
      }
    }
    std::vector<float> w(n_q * rows), acc(n_q * hd, 0.0f);
    for (size_t i = 0; i < w.size(); ++i) w[i] = float((i * 7) % 11) / float(11 * rows);
    s->accumulate_rows(acc.data(), w.data(), n_q);
    for (size_t j = 0; j < n_q; ++j) {
      double wx = 0;
      for (size_t r = 0; r < rows; ++r) wx += std::fabs(w[j * rows + r]) * norm(&y[r * hd], hd);
      double d2 = 0;
      for (size_t c = 0; c < hd; ++c) {
        double ref = 0;
        for (size_t r = 0; r < rows; ++r) ref += double(w[j * rows + r]) * y[r * hd + c];
        d2 += (acc[j * hd + c] - ref) * (acc[j * hd + c] - ref);
      }
      const double bound = (2.0 * double(rows + 2) + 4.0 * (stages + 3)) * kU32 * wx * 1.01;
      ASSERT_LE(std::sqrt(d2), bound) << "role " << int(role) << " query " << j;
    }
  }
}

// The name and the traits; its bad configurations are zipcache's (zipcache_test.cpp, ZipBadConfig).
TEST(ZipCacheR, NameAndTraits) {
  EXPECT_EQ(parse_codec("zipcacher"), CodecKind::zipcacher);
  EXPECT_EQ(to_string(CodecKind::zipcacher), "zipcacher");
  EXPECT_TRUE(codec_is_rotated(CodecKind::zipcacher));
  EXPECT_TRUE(codec_routes_rows(CodecKind::zipcacher));
  EXPECT_FALSE(codec_routes_rows(CodecKind::kivi2r));
  EXPECT_FALSE(codec_is_rotated(CodecKind::zipcache));
}

// Under LayerCache: snapkv + zipcacher keeps exactly snapkv + fp16's rows, and once the prompt
// ends every row but the last n % kivi_residual is quantized: its relative error exceeds what
// fp16 storage and the two rotations can explain (2^-11 + 2 (L + 3) u), which bounds the others.
TEST(ZipCacheRCache, StackingKeepsThePolicysRowsAndQuantizesThePrompt) {
  const CacheDims dims{4, 2, 16};
  CacheConfig base;
  base.policy = PolicyKind::snapkv;
  base.budget = 84;
  base.window = 8;
  base.n_sink = 4;
  base.kernel = 5;
  base.kivi_group = 16;
  base.kivi_residual = 16;
  CacheConfig zip = base;
  zip.codec = CodecKind::zipcacher;
  zip.zip_salient = 0.25;
  zip.rotation_seed = kSeed;
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
  const double fp16_only =
      std::ldexp(1.0, -11) + 2.0 * double(HadamardRotation(16, kSeed).stages() + 3) * kU32;
  for (size_t h = 0; h < dims.n_kv_heads; ++h) {
    const auto pz = cache.positions(h), pf = fp16.positions(h);
    ASSERT_EQ(std::vector<int64_t>(pz.begin(), pz.end()),
              std::vector<int64_t>(pf.begin(), pf.end()));
    std::vector<float> fkeys(fp16.size(h) * dims.head_dim), zkeys(fkeys.size());
    fp16.read_keys(h, fkeys.data());
    cache.read_keys(h, zkeys.data());
    const size_t n = cache.size(h), quantized = n / 16 * 16;
    ASSERT_EQ(n, 84u);
    for (size_t r = 0; r < n; ++r) {
      double d2 = 0;
      for (size_t c = 0; c < dims.head_dim; ++c) {
        const double d = double(zkeys[r * dims.head_dim + c]) - fkeys[r * dims.head_dim + c];
        d2 += d * d;
      }
      const double rel = std::sqrt(d2) / norm(&fkeys[r * dims.head_dim], dims.head_dim);
      if (r < quantized) {
        EXPECT_GT(rel, fp16_only) << "head " << h << " row " << r << " not quantized";
      } else {
        EXPECT_LE(rel, fp16_only) << "head " << h << " pending row " << r;
      }
    }
  }
}

}  // namespace
}  // namespace snapkv
