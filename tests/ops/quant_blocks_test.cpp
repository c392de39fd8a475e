// Q4_0 and K-quant blocks: the fast decoder against the element-at-a-time reference on random
// bytes (every bit pattern of scales and quants), a hand-built block per type whose values are
// worked out from the layout description, gemv over random-byte rows against the double
// reference, and the encoders' error against a bound derived from each block's data.
#include "snapkv/ops/quant_blocks.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "snapkv/ops/gemm.h"

namespace snapkv {
namespace {

constexpr double kEps = std::numeric_limits<float>::epsilon();

// A block of random bytes whose fp16 super-scales are replaced by finite values in +-[2^-12, 2^-4]
// (random bytes would give NaN / inf scales 1 time in 32).
template <class Block>
Block random_block(std::mt19937& rng) {
  Block b;
  auto* p = reinterpret_cast<uint8_t*>(&b);
  std::uniform_int_distribution<int> byte(0, 255);
  for (size_t i = 0; i < sizeof b; ++i) p[i] = static_cast<uint8_t>(byte(rng));
  std::uniform_real_distribution<float> mag(-12.0f, -4.0f);
  const auto scale = [&] {
    const float v = std::exp2(mag(rng));
    return fp32_to_fp16(byte(rng) & 1 ? v : -v);
  };
  if constexpr (requires { b.dmin; }) b.dmin = scale();
  b.d = scale();
  return b;
}

template <class Block>
void expect_decoders_agree(float (*value)(const Block&, size_t), size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<float> fast(n);
  for (int trial = 0; trial < 200; ++trial) {
    const Block b = random_block<Block>(rng);
    decode_block(fast.data(), b);
    for (size_t i = 0; i < n; ++i) {
      const float ref = value(b, i);
      ASSERT_EQ(std::memcmp(&fast[i], &ref, sizeof ref), 0)
          << "trial " << trial << " element " << i << ": fast " << fast[i] << " ref " << ref;
    }
  }
}

TEST(QuantBlocks, FastDecoderMatchesReferenceBitwise) {
  expect_decoders_agree<BlockQ4_0>(q4_0_value, kQ4_0BlockSize, 1);
  expect_decoders_agree<BlockQ2_K>(q2_K_value, kQK_K, 2);
  expect_decoders_agree<BlockQ3_K>(q3_K_value, kQK_K, 3);
  expect_decoders_agree<BlockQ4_K>(q4_K_value, kQK_K, 4);
  expect_decoders_agree<BlockQ5_K>(q5_K_value, kQK_K, 5);
  expect_decoders_agree<BlockQ6_K>(q6_K_value, kQK_K, 6);
}

// Hand-built blocks: the values follow from the layout text in quant_blocks.h, computed here
// independently of both decoders.
TEST(QuantBlocks, HandBuiltBlocksDecodeAsDocumented) {
  float out[kQK_K];
  {  // Q2_K: weight 128*1 + 32*2 + 20 = 212 is bits 4..5 of qs[32 + 20], sub-block 8 + 4 + 1 = 13
    BlockQ2_K b{};
    b.d = fp32_to_fp16(0.5f);
    b.dmin = fp32_to_fp16(0.25f);
    b.scales[13] = 0x3 << 4 | 0x6;  // sc 6, m 3
    b.qs[52] = 0x2 << 4;            // q 2
    decode_block(out, b);
    EXPECT_EQ(out[212], 0.5f * 6 * 2 - 0.25f * 3);
    EXPECT_EQ(out[211], 0.0f * 6 - 0.25f * 3);  // same sub-block, q 0: only the offset
  }
  {  // Q3_K: weight 128 + 32*3 + 5 = 229 -> sub-block 8 + 6 + 0 = 14: low 4 bits in scales[6]
     // high nibble, high 2 bits at scales[8 + 2] bits 6..7; hmask bit 4 + 3 = 7 of hmask[5].
    BlockQ3_K b{};
    b.d = fp32_to_fp16(0.125f);
    const int stored = 32 + 21;  // sc = 21 = 0b010101: low 0101, high 01
    b.scales[6] = static_cast<uint8_t>((stored & 0x0F) << 4);
    b.scales[10] = static_cast<uint8_t>((stored >> 4) << 6);
    b.qs[32 + 5] = 0x1 << 6;  // low2 = 1
    decode_block(out, b);
    EXPECT_EQ(out[229], 0.125f * 21 * (1 - 4));  // high bit clear: q = low2 - 4
    b.hmask[5] = 1 << 7;
    decode_block(out, b);
    EXPECT_EQ(out[229], 0.125f * 21 * 1);
  }
  {  // Q4_K: weight 64*2 + 32 + 7 = 167 -> high nibble of qs[64 + 7], sub-block 5:
     // sc = (scales[9] & 15) | (scales[1] >> 6) << 4, m = (scales[9] >> 4) | (scales[5] >> 6) << 4
    BlockQ4_K b{};
    b.d = fp32_to_fp16(2.0f);
    b.dmin = fp32_to_fp16(0.5f);
    b.scales[9] = 0x7 << 4 | 0x3;
    b.scales[1] = 0x2 << 6;  // sc = 3 + 32 = 35
    b.scales[5] = 0x1 << 6;  // m = 7 + 16 = 23
    b.qs[71] = 0xB << 4;
    decode_block(out, b);
    EXPECT_EQ(out[167], 2.0f * 35 * 11 - 0.5f * 23);
  }
  {  // Q5_K: the same weight with its fifth bit: bit 2*2 + 1 = 5 of qh[7]
    BlockQ5_K b{};
    b.d = fp32_to_fp16(2.0f);
    b.dmin = fp32_to_fp16(0.5f);
    b.scales[0] = 1;  // sub-block 0: sc 1, m 0
    b.scales[9] = 0x7 << 4 | 0x3;
    b.scales[1] = 0x2 << 6;
    b.scales[5] = 0x1 << 6;
    b.qs[71] = 0xB << 4;
    b.qh[7] = 1 << 5;
    decode_block(out, b);
    EXPECT_EQ(out[167], 2.0f * 35 * (11 + 16) - 0.5f * 23);
    EXPECT_EQ(out[7], 0.0f);
  }
  {  // Q6_K: weight 128 + 32*3 + 17 = 241 -> high nibble of ql[64 + 32 + 17], bits 6..7 of
     // qh[32 + 17], sub-block 8 + 6 + 1 = 15
    BlockQ6_K b{};
    b.d = fp32_to_fp16(0.25f);
    b.scales[15] = -3;
    b.ql[113] = 0x9 << 4;
    b.qh[49] = 0x2 << 6;
    decode_block(out, b);
    EXPECT_EQ(out[241], 0.25f * -3 * ((0x9 | 0x2 << 4) - 32));
  }
}

template <class Block>
void expect_gemv_close(WeightType type, uint32_t seed) {
  constexpr size_t kN = std::is_same_v<Block, BlockQ4_0> ? kQ4_0BlockSize : kQK_K;
  const size_t rows = 19, cols = 4 * kQK_K;
  std::mt19937 rng(seed);
  std::vector<Block> blocks(rows * cols / kN);
  for (Block& b : blocks) b = random_block<Block>(rng);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(cols);
  for (float& v : x) v = dist(rng);
  const WeightMatrix w{type, blocks.data(), rows, cols};
  std::vector<float> out(rows), deq(rows * cols);
  gemv(out.data(), x.data(), w, GemmPrecision::f32);  // q8: q8_dot_test.cpp
  dequantize_rows_ref(deq.data(), w, 0, rows);
  for (size_t r = 0; r < rows; ++r) {
    double exact = 0.0, abs_sum = 0.0;
    for (size_t c = 0; c < cols; ++c) {
      const double p = static_cast<double>(deq[r * cols + c]) * x[c];
      exact += p;
      abs_sum += std::fabs(p);
    }
    // fp32 accumulation of cols products: |err| <= cols * eps * sum|w x| (a-priori bound).
    EXPECT_LE(std::fabs(out[r] - exact), static_cast<double>(cols) * kEps * abs_sum + 1e-30)
        << to_string(type) << " row " << r;
  }
}

TEST(QuantBlocks, GemvOnRandomBlocksMatchesDoubleReference) {
  expect_gemv_close<BlockQ4_0>(WeightType::q4_0, 11);
  expect_gemv_close<BlockQ2_K>(WeightType::q2_K, 12);
  expect_gemv_close<BlockQ3_K>(WeightType::q3_K, 13);
  expect_gemv_close<BlockQ4_K>(WeightType::q4_K, 14);
  expect_gemv_close<BlockQ5_K>(WeightType::q5_K, 15);
  expect_gemv_close<BlockQ6_K>(WeightType::q6_K, 16);
}

// Encoder error bound, derived from the block's data alone. With qmax levels per sub-block and
// integer scales 0..sc_max of an fp16 super-scale:
//   asymmetric (Q2_K, Q4_K, Q5_K): the stored offset dmin*m is the sub-block's -min rounded up by
//     at most one dmin = max(-min) / sc_max; the step d*sc is (max + offset) / qmax rounded up by
//     at most one d = max(step) / sc_max;
//   symmetric (Q3_K, Q6_K): the step is max|x| / qmax rounded up by at most d.
// Every weight is then within half a step; the fp16 rounding of d and dmin (relative 2^-11) and
// fp32 arithmetic add the small slack below.
struct EncoderSpec {
  size_t n_sub, sub_len;
  int qmax, sc_max;
  bool asymmetric;
};

template <class Block>
void expect_encoder_within_bound(const EncoderSpec& spec, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::uniform_real_distribution<float> shift(-2.0f, 2.0f);
  double worst_ratio = 0.0;
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<float> x(kQK_K);
    const float offset = trial % 3 == 0 ? shift(rng) : 0.0f;  // also all-positive / negative
    for (float& v : x) v = dist(rng) * 0.05f + offset * 0.05f;
    Block b;
    quantize_block(&b, x.data());
    float back[kQK_K];
    decode_block(back, b);
    double lo[16], hi[16], amax[16], max_min = 0.0, max_step = 0.0;
    for (size_t s = 0; s < spec.n_sub; ++s) {
      lo[s] = 0.0, hi[s] = 0.0, amax[s] = 0.0;
      for (size_t l = 0; l < spec.sub_len; ++l) {
        const double v = x[s * spec.sub_len + l];
        lo[s] = std::min(lo[s], v);
        hi[s] = std::max(hi[s], v);
        amax[s] = std::max(amax[s], std::fabs(v));
      }
      max_min = std::max(max_min, -lo[s]);
    }
    const double fp16_slack = 1.0 + std::ldexp(1.0, -10);
    const double dmin = max_min / spec.sc_max * fp16_slack;
    double step[16];
    for (size_t s = 0; s < spec.n_sub; ++s) {
      step[s] = spec.asymmetric ? (hi[s] - lo[s] + dmin) / spec.qmax : amax[s] / spec.qmax;
      max_step = std::max(max_step, step[s]);
    }
    const double d = max_step / spec.sc_max * fp16_slack;
    for (size_t s = 0; s < spec.n_sub; ++s) {
      const double half_step = 0.5 * (step[s] + d) * fp16_slack;
      const double range = std::max(std::fabs(lo[s]), std::fabs(hi[s])) + dmin + step[s] + d;
      const double bound = half_step + 8.0 * kEps * range;
      for (size_t l = 0; l < spec.sub_len; ++l) {
        const size_t i = s * spec.sub_len + l;
        const double err = std::fabs(static_cast<double>(back[i]) - x[i]);
        ASSERT_LE(err, bound) << "trial " << trial << " element " << i;
        worst_ratio = std::max(worst_ratio, err / bound);
      }
    }
  }
  // Round to nearest uses the bound: the worst error is a sizeable part of it (a broken encoder
  // that clamps or drops bits would exceed it; a decoder that returned x itself would sit at 0).
  EXPECT_GT(worst_ratio, 0.3);
  // An all-zero block encodes to zero scales and decodes to zeros.
  std::vector<float> zeros(kQK_K, 0.0f);
  Block z;
  quantize_block(&z, zeros.data());
  float back[kQK_K];
  decode_block(back, z);
  for (float v : back) ASSERT_EQ(v, 0.0f);
}

TEST(QuantBlocks, EncodersWithinDerivedBound) {
  expect_encoder_within_bound<BlockQ2_K>({16, 16, 3, 15, true}, 21);
  expect_encoder_within_bound<BlockQ3_K>({16, 16, 3, 31, false}, 22);
  expect_encoder_within_bound<BlockQ4_K>({8, 32, 15, 63, true}, 23);
  expect_encoder_within_bound<BlockQ5_K>({8, 32, 31, 63, true}, 24);
  expect_encoder_within_bound<BlockQ6_K>({16, 16, 31, 127, false}, 25);
}

// NaN / inf input: no trap (UBSan checks the float->int conversions) and never a non-finite
// value in the encoded block (a non-finite super-scale is stored as 0).
TEST(QuantBlocks, EncodersKeepNonFiniteInputOutOfTheBlock) {
  std::vector<float> x(kQK_K, 1.0f);
  x[3] = std::numeric_limits<float>::quiet_NaN();
  x[100] = std::numeric_limits<float>::infinity();
  float back[kQK_K];
  BlockQ4_K b4;
  quantize_block(&b4, x.data());
  decode_block(back, b4);
  for (float v : back) ASSERT_TRUE(std::isfinite(v));
  BlockQ6_K b6;
  quantize_block(&b6, x.data());
  decode_block(back, b6);
  for (float v : back) ASSERT_TRUE(std::isfinite(v));
}

}  // namespace
}  // namespace snapkv
