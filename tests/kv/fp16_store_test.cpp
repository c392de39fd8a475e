// The fp16 RowStore: storage is exactly the binary16 rounding of the input, retain keeps the
// listed rows in order, dot_rows / accumulate_rows match double references on the decoded rows.
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <vector>

#include "kv/codecs/stores.h"
#include "kv/kv_test_util.h"
#include "snapkv/kv/core/row_store.h"

namespace snapkv {
namespace {

using test::random_normal;
using test::round_fp16;

constexpr double kU = 1.0 / 16777216.0;

TEST(Fp16Store, StoresTheBinary16RoundingAndCountsBytes) {
  for (const size_t d : {1u, 13u, 64u}) {
    auto store = make_fp16_row_store(d);
    const auto rows = random_normal(10 * d, 1, 4.0f);
    store->append(rows.data(), 4);
    store->append(rows.data() + 4 * d, 6);
    ASSERT_EQ(store->rows(), 10u);
    EXPECT_EQ(store->head_dim(), d);
    EXPECT_EQ(store->bytes(), 10 * d * 2);
    std::vector<float> out(10 * d);
    store->read(out.data(), 0, 10);
    for (size_t i = 0; i < out.size(); ++i) ASSERT_EQ(out[i], round_fp16(rows[i]));
    store->read(out.data(), 3, 5);
    for (size_t i = 0; i < 2 * d; ++i) ASSERT_EQ(out[i], round_fp16(rows[3 * d + i]));
  }
}

TEST(Fp16Store, RetainKeepsListedRowsInOrder) {
  const size_t d = 9;
  auto store = make_fp16_row_store(d);
  const auto rows = random_normal(8 * d, 2);
  store->append(rows.data(), 8);
  const std::vector<uint32_t> keep = {0, 2, 3, 7};
  store->retain(keep);
  ASSERT_EQ(store->rows(), 4u);
  EXPECT_EQ(store->bytes(), 4 * d * 2);
  std::vector<float> out(4 * d);
  store->read(out.data(), 0, 4);
  for (size_t i = 0; i < 4; ++i) {
    for (size_t c = 0; c < d; ++c) ASSERT_EQ(out[i * d + c], round_fp16(rows[keep[i] * d + c]));
  }
  store->retain(std::vector<uint32_t>{});
  EXPECT_EQ(store->rows(), 0u);
  EXPECT_EQ(store->bytes(), 0u);
}

TEST(Fp16Store, RejectsBadRetainAndReadRanges) {
  auto store = make_fp16_row_store(4);
  const auto rows = random_normal(5 * 4, 3);
  store->append(rows.data(), 5);
  EXPECT_THROW(store->retain(std::vector<uint32_t>{1, 1}), std::invalid_argument);
  EXPECT_THROW(store->retain(std::vector<uint32_t>{3, 2}), std::invalid_argument);
  EXPECT_THROW(store->retain(std::vector<uint32_t>{0, 5}), std::invalid_argument);
  EXPECT_EQ(store->rows(), 5u);  // unchanged by the rejected calls
  std::vector<float> out(24);
  EXPECT_THROW(store->read(out.data(), 2, 6), std::invalid_argument);
  EXPECT_THROW(store->read(out.data(), 3, 2), std::invalid_argument);
  EXPECT_THROW(make_fp16_row_store(0), std::invalid_argument);
}

TEST(Fp16Store, DotAndAccumulateMatchDoubleReferences) {
  const size_t d = 40, n = 37, n_q = 3;
  auto store = make_fp16_row_store(d);
  const auto rows = random_normal(n * d, 4);
  store->append(rows.data(), n);
  std::vector<float> decoded(n * d);
  store->read(decoded.data(), 0, n);
  const auto q = random_normal(n_q * d, 5);
  std::vector<float> dots(n_q * n);
  store->dot_rows(dots.data(), q.data(), n_q);
  for (size_t j = 0; j < n_q; ++j) {
    for (size_t i = 0; i < n; ++i) {
      double ref = 0.0, abs_sum = 0.0;
      for (size_t c = 0; c < d; ++c) {
        ref += static_cast<double>(q[j * d + c]) * decoded[i * d + c];
        abs_sum += std::fabs(static_cast<double>(q[j * d + c]) * decoded[i * d + c]);
      }
      EXPECT_LE(std::fabs(dots[j * n + i] - ref), (d + 1) * kU * abs_sum);
    }
  }
  const auto w = random_normal(n_q * n, 6);
  std::vector<float> acc(n_q * d, 0.5f);
  store->accumulate_rows(acc.data(), w.data(), n_q);
  for (size_t j = 0; j < n_q; ++j) {
    for (size_t c = 0; c < d; ++c) {
      double ref = 0.5, abs_sum = 0.5;
      for (size_t i = 0; i < n; ++i) {
        ref += static_cast<double>(w[j * n + i]) * decoded[i * d + c];
        abs_sum += std::fabs(static_cast<double>(w[j * n + i]) * decoded[i * d + c]);
      }
      EXPECT_LE(std::fabs(acc[j * d + c] - ref), (n + 2) * kU * abs_sum);
    }
  }
}

TEST(Fp16Store, CloneIsIndependentAndRegistryMakesFp16) {
  CacheConfig config;
  auto store = make_row_store(config, RowRole::key, 8);
  const auto rows = random_normal(3 * 8, 7);
  store->append(rows.data(), 3);
  auto copy = store->clone();
  store->retain(std::vector<uint32_t>{1});
  EXPECT_EQ(copy->rows(), 3u);
  EXPECT_EQ(store->rows(), 1u);
  std::vector<float> out(8);
  copy->read(out.data(), 2, 3);
  EXPECT_EQ(out[0], round_fp16(rows[16]));
}

}  // namespace
}  // namespace snapkv
