// LayerCache::attend against a double-precision reference that decodes every retained row
// (kv_test_util.h), with a per-row bound derived there from the data: logit error
// (d + 2) u |q||k| / sqrt(d), softmax rounding, and the weighted sum of n rows.
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <vector>

#include "kv/kv_test_util.h"
#include "plain_config.h"
#include "snapkv/kv/core/layer_cache.h"

namespace snapkv {
using snapkv::test::plain_config;
namespace {

using test::random_normal;
using test::slice_tokens;
using test::view;

void expect_matches_reference(const LayerCache& cache, size_t n_new, uint64_t seed,
                              float scale = 1.0f) {
  const CacheDims dims = cache.dims();
  const size_t d = dims.head_dim;
  const auto q = random_normal(dims.n_heads * n_new * d, seed, scale);
  const auto k = random_normal(dims.n_kv_heads * n_new * d, seed + 1, scale);
  const auto v = random_normal(dims.n_kv_heads * n_new * d, seed + 2);
  std::vector<float> out(dims.n_heads * n_new * d, -1.0f);
  cache.attend(out.data(), view(q, dims.n_heads, n_new, d), view(k, dims.n_kv_heads, n_new, d),
               view(v, dims.n_kv_heads, n_new, d));
  std::vector<double> ref, bound;
  test::reference_attention(ref, bound, cache, q, k, v, n_new);
  double worst_ratio = 0.0;
  for (size_t row = 0; row < dims.n_heads * n_new; ++row) {
    for (size_t c = 0; c < d; ++c) {
      const double err = std::fabs(out[row * d + c] - ref[row * d + c]);
      ASSERT_LE(err, bound[row]) << "row " << row << " c " << c << " n_new " << n_new;
      worst_ratio = std::max(worst_ratio, err / bound[row]);
    }
  }
  // How much of the derived bound the observed error used (in the test XML; about 1e-3 to 1e-2).
  ::testing::Test::RecordProperty("worst_error_over_bound_x1e6",
                                  static_cast<int>(worst_ratio * 1e6));
}

TEST(Attend, DecodeAndPrefillOverRetainedRowsMatchReference) {
  const size_t n_heads = 8, n_kv = 2, d = 32, s = 120;
  CacheConfig config = plain_config();
  config.budget = 40;
  config.window = 8;
  LayerCache cache({n_heads, n_kv, d}, config);
  // Empty cache: attention over the chunk only (causal).
  expect_matches_reference(cache, 37, 1);
  const auto k = random_normal(n_kv * s * d, 2), v = random_normal(n_kv * s * d, 3);
  cache.update(view(k, n_kv, s, d), view(v, n_kv, s, d));
  ASSERT_EQ(cache.size(), 40u);
  expect_matches_reference(cache, 1, 10);        // decode step
  expect_matches_reference(cache, 70, 20);       // prefill chunk: several row blocks
  expect_matches_reference(cache, 5, 30, 4.0f);  // sharper attention
}

TEST(Attend, DecodeEqualsAttendThenUpdateSequence) {
  // attend() before update() with the same row must equal attending over the stored row after it,
  // up to the fp16 rounding of that row: compare both to their own references instead.
  const size_t d = 16;
  LayerCache cache({2, 1, d}, CacheConfig{});
  const auto k = random_normal(30 * d, 4), v = random_normal(30 * d, 5);
  cache.update(view(k, 1, 30, d), view(v, 1, 30, d));
  for (size_t step = 0; step < 3; ++step) {
    expect_matches_reference(cache, 1, 40 + step);
    const auto k1 = random_normal(d, 50 + step), v1 = random_normal(d, 60 + step);
    cache.update(view(k1, 1, 1, d), view(v1, 1, 1, d));
  }
  EXPECT_EQ(cache.size(), 33u);
}

TEST(Attend, RejectsMismatchedShapes) {
  const size_t d = 8;
  LayerCache cache({4, 2, d}, CacheConfig{});
  const auto q = random_normal(4 * 3 * d, 6), k = random_normal(2 * 3 * d, 7);
  std::vector<float> out(4 * 3 * d);
  EXPECT_THROW(cache.attend(out.data(), view(q, 2, 6, d), view(k, 2, 3, d), view(k, 2, 3, d)),
               std::invalid_argument);
  EXPECT_THROW(cache.attend(out.data(), view(q, 4, 3, d), view(k, 2, 2, d), view(k, 2, 3, d)),
               std::invalid_argument);
  EXPECT_THROW(cache.attend(out.data(), view(q, 4, 3, d), view(k, 1, 6, d), view(k, 1, 6, d)),
               std::invalid_argument);
  EXPECT_THROW(cache.attend(nullptr, view(q, 4, 3, d), view(k, 2, 3, d), view(k, 2, 3, d)),
               std::invalid_argument);
}

}  // namespace
}  // namespace snapkv
