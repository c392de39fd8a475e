// GEAR codec (include/snapkv/kv/codecs/gear.h): the low-rank routine against a planted spectrum in
// double, the KIVI part left untouched (rank 0, sparse 0 decodes like KIVI bit for bit), the
// error bound the corrections promise, fused attention against dequantize-then-attend, exact
// bytes and bad configurations. No drift under repeated eviction (coefficients and sparse entries
// move with their rows) and .kvc record round trips: codec_contract_test.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "kv/codecs/stores.h"
#include "kv/kivi_test_util.h"
#include "snapkv/kv/codecs/gear.h"
#include "snapkv/kv/core/row_store.h"

namespace snapkv {
namespace {

using kivi_test::read_all;
using kivi_test::realistic_rows;
using kivi_test::round_fp16;

constexpr double kU32 = 1.0 / 16777216.0;  // fp32 unit roundoff 2^-24
constexpr double kU16 = 1.0 / 2048.0;      // fp16 unit roundoff 2^-11

CacheConfig gear_config(size_t group, size_t residual, size_t rank, double sparse, size_t bits) {
  CacheConfig c;
  c.codec = CodecKind::gear;
  c.kivi_group = group;
  c.kivi_residual = residual;
  c.gear_rank = rank;
  c.gear_sparse = sparse;
  c.gear_bits = bits;
  return c;
}

// Columns of an n x k matrix with orthonormal columns (Gram-Schmidt in double).
std::vector<double> orthonormal(size_t n, size_t k, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> normal;
  std::vector<double> m(n * k);
  for (double& x : m) x = normal(rng);
  for (size_t j = 0; j < k; ++j) {
    for (int pass = 0; pass < 2; ++pass) {
      for (size_t p = 0; p < j; ++p) {
        double dot = 0;
        for (size_t i = 0; i < n; ++i) dot += m[i * k + j] * m[i * k + p];
        for (size_t i = 0; i < n; ++i) m[i * k + j] -= dot * m[i * k + p];
      }
    }
    double norm = 0;
    for (size_t i = 0; i < n; ++i) norm += m[i * k + j] * m[i * k + j];
    for (size_t i = 0; i < n; ++i) m[i * k + j] /= std::sqrt(norm);
  }
  return m;
}

// e = U diag(s) V^T with known singular values: by Eckart-Young the best rank-r error is
// sum_{k >= r} s_k^2. The routine's factors must reach it up to fp32 rounding of e, a and b:
// each entry of e - a b carries <= (d + r + 2) u |.|-weighted error, so the squared error may
// exceed the optimum by 2 sqrt(opt) * delta + delta^2 with delta = (d + r + 2) u sqrt(n d) s_0.
TEST(GearLowRank, ReachesTheEckartYoungOptimumOfAPlantedSpectrum) {
  for (const auto& [n, d, r] :
       {std::tuple<size_t, size_t, size_t>{50, 24, 3}, {128, 32, 2}, {9, 16, 4}, {200, 64, 8}}) {
    const size_t k = std::min(n, d);
    const std::vector<double> u = orthonormal(n, k, 11), v = orthonormal(d, k, 12);
    std::vector<double> s(k);
    for (size_t i = 0; i < k; ++i) s[i] = 10.0 / double(1 + i * i);
    std::vector<float> e(n * d);
    for (size_t i = 0; i < n; ++i) {
      for (size_t c = 0; c < d; ++c) {
        double acc = 0;
        for (size_t j = 0; j < k; ++j) acc += u[i * k + j] * s[j] * v[c * k + j];
        e[i * d + c] = float(acc);
      }
    }
    std::vector<float> a(n * r), b(r * d);
    low_rank_factor(a.data(), b.data(), e.data(), n, d, r);
    double err = 0, opt = 0;
    for (size_t j = r; j < k; ++j) opt += s[j] * s[j];
    for (size_t i = 0; i < n; ++i) {
      for (size_t c = 0; c < d; ++c) {
        double l = 0;
        for (size_t j = 0; j < r; ++j) l += double(a[i * r + j]) * b[j * d + c];
        err += (e[i * d + c] - l) * (e[i * d + c] - l);
      }
    }
    const double delta = double(d + r + 2) * kU32 * std::sqrt(double(n * d)) * s[0] * 4;
    EXPECT_LE(err, opt + 2 * std::sqrt(opt) * delta + delta * delta)
        << "n " << n << " d " << d << " r " << r;
    EXPECT_GE(err, opt - 2 * std::sqrt(opt) * delta - delta * delta);
    // b's rows are orthonormal (fp32 rounding of double vectors).
    for (size_t p = 0; p < r; ++p) {
      for (size_t q = 0; q < r; ++q) {
        double dot = 0;
        for (size_t c = 0; c < d; ++c) dot += double(b[p * d + c]) * b[q * d + c];
        EXPECT_NEAR(dot, p == q ? 1.0 : 0.0, 4.0 * double(d) * kU32);
      }
    }
  }
}

TEST(GearLowRank, ZeroAndBadShapes) {
  std::vector<float> e(20 * 8, 0.0f), a(20 * 2, 1.0f), b(2 * 8, 1.0f);
  low_rank_factor(a.data(), b.data(), e.data(), 20, 8, 2);
  for (float x : a) EXPECT_EQ(x, 0.0f);
  for (float x : b) EXPECT_EQ(x, 0.0f);
  EXPECT_THROW(low_rank_factor(a.data(), b.data(), e.data(), 20, 8, 8), std::invalid_argument);
  EXPECT_THROW(low_rank_factor(a.data(), b.data(), e.data(), 20, 8, 0), std::invalid_argument);
  EXPECT_THROW(low_rank_factor(a.data(), b.data(), e.data(), 0, 8, 2), std::invalid_argument);
}

// Rank 0 and no sparse entries: GEAR is its KIVI backbone, bit for bit, with the same bytes plus
// one GearSegment and one uint16 count per row.
TEST(GearStore, WithoutCorrectionsItIsKivi) {
  for (RowRole role : {RowRole::key, RowRole::value}) {
    for (size_t bits : {2u, 4u}) {
      const size_t hd = 40, group = 8, resid = 16, n = 100;
      CacheConfig c = gear_config(group, resid, 0, 0.0, bits);
      auto gear = make_row_store(c, role, hd);
      auto kivi = make_kivi_row_store(role, int(bits), hd, group, resid, 0);
      const std::vector<float> x = realistic_rows(n, hd, 5, true);
      for (auto* s : {gear.get(), kivi.get()}) {
        s->append(x.data(), 70);
        s->append(x.data() + 70 * hd, 30);
      }
      EXPECT_EQ(read_all(*gear), read_all(*kivi));
      const size_t quantized = 64;  // 70 rows waited, then 4 flushes of 16 at the second append
      EXPECT_EQ(gear->bytes(), kivi->bytes() + (quantized / resid) * sizeof(GearSegment) +
                                   quantized * sizeof(uint16_t));
    }
  }
}

// The corrections' promise on the quantized rows, against the same rows through plain KIVI (the
// backbone decode D is identical): with E = X - D, N entries and k = round(s N) sparse entries,
//   ||X - X'||_F <= sqrt(1 - k/N) (||E - L|| + ||L - L16||) + fp32/fp16 rounding of the sum,
// with ||E - L|| <= ||E|| and ||L - L16|| <= 3 sqrt(r) 2^-11 ||E|| (the fp16 factors), and at
// every sparse entry the decode is x up to the rounding of s to fp16 and of the fp32 sum.
TEST(GearStore, CorrectionsShrinkTheKiviErrorAsBounded) {
  for (RowRole role : {RowRole::key, RowRole::value}) {
    for (const auto& [rank, sparse] :
         {std::pair<size_t, double>{2, 0.02}, {4, 0.05}, {0, 0.1}, {6, 0.0}}) {
      const size_t hd = 32, group = 32, resid = 64, n = 4 * resid + 1;
      CacheConfig c = gear_config(group, resid, rank, sparse, 2);
      auto gear = make_row_store(c, role, hd);
      auto kivi = make_kivi_row_store(role, 2, hd, group, resid, 0);
      const std::vector<float> x = realistic_rows(n, hd, 77, true);
      gear->append(x.data(), n - 1);
      gear->append(x.data() + (n - 1) * hd, 1);
      kivi->append(x.data(), n - 1);
      kivi->append(x.data() + (n - 1) * hd, 1);
      const std::vector<float> yg = read_all(*gear), yk = read_all(*kivi);
      const size_t nq = 4 * resid;  // the quantized rows
      double err_k = 0, err_g = 0, max_x = 0;
      size_t exact = 0;
      for (size_t i = 0; i < nq * hd; ++i) {
        const double xi = round_fp16(x[i]);
        err_k += (xi - yk[i]) * (xi - yk[i]);
        err_g += (xi - yg[i]) * (xi - yg[i]);
        max_x = std::max(max_x, std::fabs(xi));
        // rank 0: s = E, so a sparse entry decodes to x up to fp16(s) and one fp32 sum
        exact += std::fabs(xi - yg[i]) <=
                 std::fabs(xi - yk[i]) * kU16 + 2 * kU32 * (std::fabs(xi) + std::fabs(yk[i]));
      }
      const double frac = 1.0 - std::round(sparse * resid * hd) / double(resid * hd);
      const double slack = 3.0 * std::sqrt(double(rank)) * kU16 * std::sqrt(err_k) +
                           std::sqrt(double(nq * hd)) * max_x * double(rank + 4) * kU32;
      EXPECT_LE(std::sqrt(err_g), std::sqrt(frac) * (std::sqrt(err_k) + slack) + slack)
          << "role " << int(role) << " rank " << rank << " sparse " << sparse;
      if (rank > 0 || sparse > 0) {
        EXPECT_LT(err_g, 0.97 * err_k) << "rank " << rank;
      }
      // rank 0: the sparse entries come back exact up to rounding, k per segment at least
      if (rank == 0) {
        EXPECT_GE(exact, size_t(std::round(sparse * double(resid * hd))) * 4);
      }
      // the residual rows are untouched fp16
      for (size_t i = nq * hd; i < n * hd; ++i) EXPECT_EQ(yg[i], round_fp16(x[i]));
      std::printf("[gear] role %d rank %zu sparse %.2f: rel err %.4f vs kivi2 %.4f\n", int(role),
                  rank, sparse, std::sqrt(err_g / err_k), 1.0);
    }
  }
}

// Fused dot_rows / accumulate_rows (KIVI kernels + (B q).a + sparse) against read() rows in
// double. Both sides round each of the ~head_dim + rank + sparse terms once in fp32:
// |fused - exact| <= 2 (head_dim + rank + 8) u * sum_c |q_c| (|x'_c| + 2 colmax_c + |L_c| + |s_c|),
// bounded here with |L_c| + |s_c| <= |x'_c - D_c| <= |x'_c| + colmax_c.
TEST(GearStore, FusedAttentionMatchesDequantizeThenAttend) {
  for (RowRole role : {RowRole::key, RowRole::value}) {
    const size_t hd = 24, group = 8, resid = 16, rank = 3;
    CacheConfig c = gear_config(group, resid, rank, 0.05, 2);
    auto s = make_row_store(c, role, hd);
    const std::vector<float> x = realistic_rows(150, hd, 9, true);
    s->append(x.data(), 149);
    s->append(x.data() + 149 * hd, 1);
    std::vector<uint32_t> keep;
    for (uint32_t i = 0; i < 150; ++i) {
      if (i % 3 != 1) keep.push_back(i);
    }
    s->retain(keep);
    const size_t n = s->rows();
    const std::vector<float> y = read_all(*s);
    std::vector<double> col_max(hd, 0.0), row_max(n, 0.0);
    for (size_t i = 0; i < n * hd; ++i) {
      col_max[i % hd] = std::max(col_max[i % hd], double(std::fabs(y[i])));
      row_max[i / hd] = std::max(row_max[i / hd], double(std::fabs(y[i])));
    }
    const size_t n_q = 3;
    const std::vector<float> q = realistic_rows(n_q, hd, 10, false);
    std::vector<float> dots(n_q * n);
    s->dot_rows(dots.data(), q.data(), n_q);
    for (size_t j = 0; j < n_q; ++j) {
      for (size_t r = 0; r < n; ++r) {
        double ref = 0, mag = 0;
        for (size_t ch = 0; ch < hd; ++ch) {
          ref += double(q[j * hd + ch]) * y[r * hd + ch];
          mag += std::fabs(q[j * hd + ch]) *
                 (2 * std::fabs(y[r * hd + ch]) + 3 * col_max[ch] + row_max[r]);
        }
        ASSERT_NEAR(dots[j * n + r], ref, 2.0 * double(hd + rank + 8) * kU32 * mag)
            << "role " << int(role) << " row " << r;
      }
    }
    std::vector<float> w(n_q * n);
    std::mt19937 rng(3);
    for (float& v : w) v = float(rng() % 1000) / 1000.0f / float(n);
    std::vector<float> acc(n_q * hd, 0.0f);
    s->accumulate_rows(acc.data(), w.data(), n_q);
    for (size_t j = 0; j < n_q; ++j) {
      for (size_t ch = 0; ch < hd; ++ch) {
        double ref = 0, mag = 0;
        for (size_t r = 0; r < n; ++r) {
          ref += double(w[j * n + r]) * y[r * hd + ch];
          mag += std::fabs(w[j * n + r]) *
                 (2 * std::fabs(y[r * hd + ch]) + 3 * row_max[r] + col_max[ch]);
        }
        ASSERT_NEAR(acc[j * hd + ch], ref, 2.0 * double(n + hd + rank + 8) * kU32 * mag)
            << "role " << int(role) << " channel " << ch;
      }
    }
  }
}

TEST(GearStore, BadConfigsAreClearErrors) {
  auto expect_error = [](const CacheConfig& c, size_t hd, const std::string& part) {
    try {
      make_row_store(c, RowRole::key, hd);
      ADD_FAILURE() << "no error for " << part;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  expect_error(gear_config(8, 16, 32, 0.01, 2), 32, "gear_rank must be below head_dim");
  expect_error(gear_config(8, 16, 2, 1.5, 2), 32, "gear_sparse out of range");
  expect_error(gear_config(8, 16, 2, -0.1, 2), 32, "gear_sparse out of range");
  expect_error(gear_config(8, 16, 2, 0.01, 3), 32, "gear_bits unsupported");
  CacheConfig c = gear_config(8, 16, 2, 2.0, 2);
  EXPECT_THROW(c.validate(), std::invalid_argument);
  c.gear_sparse = 0.01;
  c.gear_rank = 100;
  EXPECT_THROW(c.validate(), std::invalid_argument);
}

}  // namespace
}  // namespace snapkv
