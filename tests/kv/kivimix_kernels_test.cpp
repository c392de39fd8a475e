// kivimix's wide-channel pass (kernels/kivi/kivimix_kernels.h): the scalar reference equals a
// plain per-row loop over the same products in the same order, and the fast kernel equals the
// reference bit for bit at every ISA level this CPU runs, over full and partial low words (bytes
// the rows end inside, codes past `wide` that must be ignored), row tails (n not a multiple of 8 or
// 16) and query counts that are not a multiple of 4, with out's entries past n left alone. End to
// end (the store's decode, the evals' predictions: compare `snapkv eval --methods kivimix` before
// and after). The per-block weights q[channel] * (S / 4) likewise, at every level.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/kivi/kivimix_kernels.h"
#include "snapkv/kv/codecs/kivi.h"
#include "snapkv/util/cpu.h"
#include "util/isa_levels_test.h"

namespace snapkv {
namespace {

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(KivimixWideDot, ReferenceIsThePlainPerRowSum) {
  std::mt19937 rng(41);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> byte(0, 255);
  const size_t wide = 13, row_bytes = 4, n = 11, n_q = 3, stride = 12;
  std::vector<float> qk(n_q * wide), out(n_q * stride);
  for (float& x : qk) x = normal(rng);
  for (float& x : out) x = normal(rng);
  std::vector<uint8_t> low(n * row_bytes);
  for (uint8_t& b : low) b = static_cast<uint8_t>(byte(rng));
  std::vector<float> want = out;
  for (size_t j = 0; j < n_q; ++j) {
    for (size_t r = 0; r < n; ++r) {
      float sum = 0.0f;
      for (size_t k = 0; k < wide; ++k) {
        const float code = static_cast<float>((low[r * row_bytes + k / 4] >> (2 * (k % 4))) & 3);
        const float term = qk[j * wide + k] * code;
        sum += term;
      }
      want[j * stride + r] += sum;
    }
  }
  kivimix_wide_dot_scalar(out.data(), stride, qk.data(), n_q, wide, low.data(), row_bytes, n);
  EXPECT_TRUE(same_bits(out, want));
}

TEST(KivimixWideDot, EveryLevelEqualsTheReferenceBitForBit) {
  const isa_test::IsaLevelGuard guard;
  std::mt19937 rng(42);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> byte(0, 255);
  size_t cases = 0;
  for (const size_t wide : {size_t{1}, size_t{3}, size_t{4}, size_t{10}, size_t{16}, size_t{17},
                            size_t{32}, size_t{33}, size_t{63}, size_t{64}}) {
    // the store's layout (2-byte words: a partial last word when wide % 8 != 0; 4, 8 and 16 bytes,
    // head_dim 32, 64 and 128, take the SIMD levels' load-and-permute paths), an odd byte count,
    // and wider rows than the codes need
    const size_t words = 2 * ((wide + 7) / 8);
    for (const size_t row_bytes : {words, (wide + 3) / 4, words + 3}) {
      for (const size_t n :
           {size_t{1}, size_t{7}, size_t{8}, size_t{15}, size_t{16}, size_t{17}, size_t{32}}) {
        for (const size_t n_q : {size_t{1}, size_t{3}, size_t{4}, size_t{5}, size_t{8}}) {
          const size_t stride = n + 5;
          std::vector<float> qk(n_q * wide), out0(n_q * stride);
          for (float& x : qk) x = normal(rng) * 8.0f;
          for (float& x : out0) x = normal(rng);
          // exactly n rows (nothing past the last row to read), random codes everywhere, also past
          // `wide`, which both sides must ignore
          std::vector<uint8_t> low(n * row_bytes);
          for (uint8_t& b : low) b = static_cast<uint8_t>(byte(rng));
          low[0] |= 1;  // row 0's code 0 is not 0: the pass changes out[0]
          std::vector<float> want = out0;
          kivimix_wide_dot_scalar(want.data(), stride, qk.data(), n_q, wide, low.data(), row_bytes,
                                  n);
          ASSERT_FALSE(same_bits(want, out0));
          for (const IsaLevel level : isa_test::runnable_levels()) {
            set_isa_level(level);
            std::vector<float> got = out0;
            kivimix_wide_dot(got.data(), stride, qk.data(), n_q, wide, low.data(), row_bytes, n);
            ASSERT_TRUE(same_bits(got, want))
                << to_string(level) << " wide=" << wide << " row_bytes=" << row_bytes << " n=" << n
                << " n_q=" << n_q;
          }
          ++cases;
        }
      }
    }
  }
  EXPECT_EQ(cases, 10u * 3u * 7u * 5u);
}

TEST(KivimixWideWeights, EveryLevelEqualsTheReferenceBitForBit) {
  const isa_test::IsaLevelGuard guard;
  std::mt19937 rng(43);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  // head_dim 3 .. 129 (avx512: a compress per 16 channels) and 281 (past 256: gathers)
  for (const size_t wide : {size_t{1}, size_t{3}, size_t{8}, size_t{10}, size_t{16}, size_t{17},
                            size_t{33}, size_t{64}, size_t{140}}) {
    const size_t head_dim = 2 * wide + 1;
    // every other channel from a random start: increasing, < head_dim, as the store keeps them
    std::vector<KittyChannel> channels(wide);
    const size_t start = std::uniform_int_distribution<size_t>(0, 1)(rng);
    for (size_t k = 0; k < wide; ++k) channels[k] = static_cast<KittyChannel>(start + 2 * k);
    std::vector<float> scales(head_dim);
    for (float& x : scales) x = std::fabs(normal(rng)) * 3.0f;
    for (const size_t n_q : {size_t{1}, size_t{4}, size_t{5}}) {
      std::vector<float> q(n_q * head_dim);
      for (float& x : q) x = normal(rng);
      std::vector<float> want(n_q * wide);
      kivimix_wide_weights_scalar(want.data(), q.data(), n_q, head_dim, scales.data(),
                                  channels.data(), wide);
      for (size_t k = 0; k < wide; ++k) {
        ASSERT_EQ(want[k], q[channels[k]] * (0.25f * scales[channels[k]])) << k;
      }
      for (const IsaLevel level : isa_test::runnable_levels()) {
        set_isa_level(level);
        std::vector<float> got(n_q * wide, -1.0f);
        kivimix_wide_weights(got.data(), q.data(), n_q, head_dim, scales.data(), channels.data(),
                             wide);
        ASSERT_TRUE(same_bits(got, want)) << to_string(level) << " wide=" << wide << " n_q=" << n_q;
      }
    }
  }
}

}  // namespace
}  // namespace snapkv
