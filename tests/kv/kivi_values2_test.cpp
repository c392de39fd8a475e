// The 2-bit integer value kernel (kernels/kivi/kivi_q8_values_simd.cpp) over many tiles and whole
// GQA groups: a group of 4 queries shares the masked code vectors of each step (dot_quad) and
// builds the next tile's vectors inside its sums, single queries take the per-query path; each
// query's arithmetic is its own, so a query's result must not depend on the queries beside it (bit
// for bit), and every result stays within the rounding bound of the scalar twin
// (kivi_value_rows_accumulate_q8_scalar).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/kivi/kivi_kernels.h"
#include "kv/kivi_test_util.h"
#include "snapkv/kv/codecs/kivi.h"
#include "snapkv/util/fp16.h"

namespace snapkv {
namespace {

constexpr double kU32 = 1.0 / 16777216.0;  // fp32 unit roundoff

struct Values2 {
  size_t hd, group, n_rows, n_q;
  std::vector<uint8_t> codes;      // [n_rows][hd / 4]
  std::vector<KiviParams> params;  // [n_rows][n_groups]
  std::vector<float> w;            // [n_q][n_rows]
  size_t n_groups() const { return (hd + group - 1) / group; }
};

// Random codes and params (some groups constant: scale 0), softmax-like weights with zeros, a
// run of weights below the smallest step kept (2^-100) in one query, one dominant row in another.
Values2 random_values(size_t hd, size_t group, size_t n_rows, size_t n_q, uint32_t seed) {
  Values2 v{hd, group, n_rows, n_q, {}, {}, {}};
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  v.codes.resize(n_rows * hd / 4);
  for (auto& b : v.codes) b = static_cast<uint8_t>(rng());
  v.params.resize(n_rows * v.n_groups());
  for (auto& p : v.params) {
    p.scale = fp32_to_fp16(std::fabs(u(rng)) * (rng() % 7 == 0 ? 0.0f : 1.0f));
    p.zero = fp32_to_fp16(u(rng));
  }
  v.w.resize(n_q * n_rows);
  for (size_t j = 0; j < n_q; ++j) {
    for (size_t r = 0; r < n_rows; ++r) {
      float& x = v.w[j * n_rows + r];
      x = std::exp(-std::fabs(u(rng)) * 12.0f);
      if (rng() % 11 == 0) x = 0.0f;
      if (j == 1 && r < 100) x *= 0x1p-110f;
      if (j == 2 && r == n_rows / 3) x = 1.0f;
    }
  }
  return v;
}

TEST(KiviValues2, QueriesInGroupsOfFourMatchSingleQueries) {
  if (!kivi_value_accumulate_uses_q8(128, 32, 2)) {
    GTEST_SKIP() << "no 2-bit integer value kernel at this ISA level";
  }
  struct Shape {
    size_t hd, group;
  };
  size_t checked = 0;
  for (const Shape& sh :
       {Shape{128, 32}, Shape{128, 64}, Shape{128, 128}, Shape{256, 64}, Shape{256, 128}}) {
    ASSERT_TRUE(kivi_value_accumulate_uses_q8(sh.hd, sh.group, 2)) << sh.hd << " " << sh.group;
    // one tile, whole tiles, a partial last tile (of a partial last step), many tiles
    for (size_t n_rows : {size_t{64}, size_t{192}, size_t{333}, size_t{1031}}) {
      for (size_t n_q : {size_t{4}, size_t{8}, size_t{9}}) {
        const Values2 v = random_values(sh.hd, sh.group, n_rows, n_q,
                                        static_cast<uint32_t>(n_rows * 31 + n_q + sh.group));
        std::vector<float> all(n_q * sh.hd, 0.25f), one(n_q * sh.hd, 0.25f),
            twin(n_q * sh.hd, 0.25f);
        kivi_value_rows_accumulate(all.data(), v.w.data(), n_rows, n_q, v.codes.data(),
                                   v.params.data(), n_rows, sh.hd, sh.group, 2);
        for (size_t j = 0; j < n_q; ++j) {
          kivi_value_rows_accumulate(one.data() + j * sh.hd, v.w.data() + j * n_rows, n_rows, 1,
                                     v.codes.data(), v.params.data(), n_rows, sh.hd, sh.group, 2);
        }
        kivi_value_rows_accumulate_q8_scalar(twin.data(), v.w.data(), n_rows, n_q, v.codes.data(),
                                             v.params.data(), n_rows, sh.hd, sh.group, 2);
        for (size_t j = 0; j < n_q; ++j) {
          EXPECT_EQ(std::memcmp(all.data() + j * sh.hd, one.data() + j * sh.hd, sh.hd * 4), 0)
              << "hd " << sh.hd << " group " << sh.group << " rows " << n_rows << " n_q " << n_q
              << " query " << j;
          // the twin: same integer weights and sums; the fp32 sums of the tiles and the zero
          // terms round in another order, each within 4 (n_rows + 4) u * magnitude
          for (size_t c = 0; c < sh.hd; ++c) {
            const double mag =
                kivi_test::value_sum_magnitude(v.w.data() + j * n_rows, v.params.data(), n_rows,
                                               v.n_groups(), c / sh.group, 3.0 * 1.01, 0.25);
            ASSERT_NEAR(all[j * sh.hd + c], twin[j * sh.hd + c],
                        4.0 * double(n_rows + 4) * kU32 * mag)
                << "hd " << sh.hd << " group " << sh.group << " rows " << n_rows << " query " << j
                << " channel " << c;
            ++checked;
          }
        }
      }
    }
  }
  EXPECT_GT(checked, size_t{0});
}

// The integer kernel checks the weights' range as it loads them, after the sums of every tile
// have been taken: a weight outside [0, 2^64] (or NaN) in the last rows of the last query must
// still leave the output to the float kernel alone (not added twice, not the integer form's), and
// -0 stays in range (bit for bit the result of +0).
TEST(KiviValues2, WeightsOutOfRangeInTheLastTileFallBackToTheFloatKernel) {
  if (!kivi_value_accumulate_uses_q8(128, 32, 2)) {
    GTEST_SKIP() << "no 2-bit integer value kernel at this ISA level";
  }
  const size_t hd = 128, group = 32, n_rows = 1031, n_q = 8;
  size_t checked = 0;
  for (const float bad : {-0.25f, 0x1p65f, std::nanf(""), -0.0f}) {
    Values2 v = random_values(hd, group, n_rows, n_q, 77);
    float& x = v.w[(n_q - 1) * n_rows + n_rows - 2];
    x = 0.0f;
    std::vector<float> plus_zero(n_q * hd, 0.25f);
    kivi_value_rows_accumulate(plus_zero.data(), v.w.data(), n_rows, n_q, v.codes.data(),
                               v.params.data(), n_rows, hd, group, 2);
    x = bad;
    std::vector<float> fast(n_q * hd, 0.25f), slow(n_q * hd, 0.25f);
    kivi_value_rows_accumulate(fast.data(), v.w.data(), n_rows, n_q, v.codes.data(),
                               v.params.data(), n_rows, hd, group, 2);
    if (bad == 0.0f) {  // -0
      EXPECT_EQ(std::memcmp(fast.data(), plus_zero.data(), fast.size() * 4), 0);
      ++checked;
      continue;
    }
    kivi_value_rows_accumulate_scalar(slow.data(), v.w.data(), n_rows, n_q, v.codes.data(),
                                      v.params.data(), n_rows, hd, group, 2);
    // the float forms: every product and sum rounds once, <= 4 (n_rows + 4) u * magnitude
    EXPECT_EQ(kivi_test::value_sums_disagree(fast, slow, v.w, v.params, n_rows, n_q, hd, group,
                                             3.0 * 1.01, 0.25),
              "")
        << "weight " << bad;
    ++checked;
  }
  EXPECT_GT(checked, size_t{0});
}

}  // namespace
}  // namespace snapkv
