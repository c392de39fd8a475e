// Tensor types: block layouts, byte sizes, and quantize/dequantize error bounds derived from each
// block's own scale, checked against a double-precision reference.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>

#include "gguf_test_util.h"

namespace snapkv::gguf {
namespace {

using testing::test_values;

static_assert(offsetof(BlockQ8_0, qs) == 2 && offsetof(BlockQ4_0, qs) == 2);

// Values spanning many magnitudes: uniform in [-1, 1] times 2^k for k in [-12, 12] per block.
std::vector<float> multi_scale_values(size_t n_blocks, uint64_t seed) {
  std::vector<float> v = test_values(n_blocks * 32, seed);
  for (size_t b = 0; b < n_blocks; ++b) {
    const float scale = std::ldexp(1.0f, static_cast<int>(b % 25) - 12);
    for (size_t j = 0; j < 32; ++j) v[b * 32 + j] *= scale;
  }
  return v;
}

TEST(GgufQuant, TypeTablesAndByteSizes) {
  EXPECT_EQ(block_size(TensorType::q8_0), 32u);
  EXPECT_EQ(type_size(TensorType::q8_0), 34u);
  EXPECT_EQ(type_size(TensorType::q4_0), 18u);
  EXPECT_EQ(type_size(TensorType::bf16), 2u);
  EXPECT_EQ(tensor_n_bytes(TensorType::f32, std::vector<int64_t>{4096, 32000}), 524288000u);
  EXPECT_EQ(tensor_n_bytes(TensorType::f16, std::vector<int64_t>{4096, 32000}), 262144000u);
  EXPECT_EQ(tensor_n_bytes(TensorType::q8_0, std::vector<int64_t>{4096, 32000}),
            4096u / 32 * 34 * 32000);
  EXPECT_EQ(tensor_n_bytes(TensorType::q4_0, std::vector<int64_t>{64, 3, 2}), 2u * 18 * 6);
  EXPECT_EQ(tensor_n_bytes(TensorType::f32, std::vector<int64_t>{0, 5}), 0u);
  EXPECT_EQ(row_n_bytes(TensorType::q8_0, 96), 102u);
  EXPECT_THROW(row_n_bytes(TensorType::q8_0, 33), std::invalid_argument);
  EXPECT_THROW(tensor_n_bytes(TensorType::q8_0, std::vector<int64_t>{48}), std::invalid_argument);
  EXPECT_THROW(tensor_n_bytes(TensorType::f32, std::vector<int64_t>{int64_t{1} << 62}),
               std::invalid_argument);  // 2^64 bytes
  EXPECT_THROW(element_count(std::vector<int64_t>{int64_t{1} << 32, int64_t{1} << 31}),
               std::invalid_argument);
  EXPECT_THROW(element_count(std::vector<int64_t>{3, -1}), std::invalid_argument);
  EXPECT_EQ(tensor_type_from_name("Q8_0"), TensorType::q8_0);
  EXPECT_EQ(tensor_type_from_name("bf16"), TensorType::bf16);
  EXPECT_FALSE(tensor_type_from_name("q4_1"));
  EXPECT_EQ(tensor_type_from_id(30), TensorType::bf16);
  EXPECT_FALSE(tensor_type_from_id(3));
  EXPECT_EQ(tensor_type_name(TensorType::q4_0), "q4_0");
}

TEST(GgufQuant, BlockLayoutsMatchGgml) {
  BlockQ8_0 q8{};
  q8.d = 0x3800;  // 0.5
  for (int j = 0; j < 32; ++j) q8.qs[j] = static_cast<int8_t>(j - 16);
  float out[32];
  dequantize_row_q8_0(out, &q8, 32);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(out[j], 0.5f * static_cast<float>(j - 16));

  BlockQ4_0 q4{};
  q4.d = 0x4000;  // 2.0
  for (int j = 0; j < 16; ++j) q4.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  dequantize_row_q4_0(out, &q4, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(out[j], 2.0f * static_cast<float>(j - 8)) << j;            // low nibble: j
    EXPECT_EQ(out[j + 16], 2.0f * static_cast<float>(7 - j)) << j + 16;  // high nibble: j + 16
  }
}

TEST(GgufQuant, Q8_0ErrorWithinHalfAStepOfItsBlockScale) {
  constexpr size_t kBlocks = 1000;
  const std::vector<float> x = multi_scale_values(kBlocks, 11);
  std::vector<BlockQ8_0> q(kBlocks);
  std::vector<float> y(x.size());
  quantize_row_q8_0(q.data(), x.data(), x.size());
  dequantize_row_q8_0(y.data(), q.data(), y.size());
  double err2 = 0, ref2 = 0, bound2 = 0;
  size_t sign_flips = 0;
  for (size_t b = 0; b < kBlocks; ++b) {
    double amax = 0;
    for (size_t j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(double(x[b * 32 + j])));
    const double d = amax / 127.0;                    // double reference scale
    const double d16 = double(fp16_to_fp32(q[b].d));  // stored scale
    // fp16 rounding of the scale: half an ulp, or half the subnormal step (2^-25) for tiny d
    EXPECT_LE(std::fabs(d16 - d), std::max(d * kFp16UnitRoundoff, std::ldexp(1.0, -25)));
    // |x - q d16| <= |x - q d| + |q| |d16 - d| <= d/2 + 127 |d16 - d|, plus fp32 rounding of x/d.
    const double bound = 0.5 * d + 127.0 * std::fabs(d16 - d) + 8.0 * 127.0 * FLT_EPSILON * d;
    for (size_t j = 0; j < 32; ++j) {
      const double xi = x[b * 32 + j], yi = y[b * 32 + j];
      EXPECT_LE(std::fabs(xi - yi), bound) << "block " << b << " elem " << j;
      err2 += (xi - yi) * (xi - yi);
      ref2 += xi * xi;
      if (std::fabs(xi) > bound && std::signbit(xi) != std::signbit(yi)) ++sign_flips;
    }
    bound2 += 32 * d * d / 12.0;  // variance of a uniform rounding error of step d
  }
  EXPECT_EQ(sign_flips, 0u);
  // Normalised MSE near what uniform rounding predicts (within 25%), reported for the record.
  const double nmse = err2 / ref2;
  EXPECT_LE(nmse, 1.25 * bound2 / ref2);
  EXPECT_GE(nmse, 0.75 * bound2 / ref2);
  RecordProperty("q8_0_nmse", std::to_string(nmse));
}

TEST(GgufQuant, Q4_0ErrorWithinItsBlockScale) {
  constexpr size_t kBlocks = 1000;
  const std::vector<float> x = multi_scale_values(kBlocks, 12);
  std::vector<BlockQ4_0> q(kBlocks);
  std::vector<float> y(x.size());
  quantize_row_q4_0(q.data(), x.data(), x.size());
  dequantize_row_q4_0(y.data(), q.data(), y.size());
  for (size_t b = 0; b < kBlocks; ++b) {
    double amax = 0, extreme = 0;
    for (size_t j = 0; j < 32; ++j) {
      const double v = x[b * 32 + j];
      if (std::fabs(v) > amax) amax = std::fabs(v), extreme = v;
    }
    const double d = extreme / -8.0;  // the extreme maps to nibble 0 (-8 d)
    const double d16 = double(fp16_to_fp32(q[b].d));
    const double dd = 8.0 * std::fabs(d16 - d) + 8.0 * 8.0 * FLT_EPSILON * std::fabs(d);
    for (size_t j = 0; j < 32; ++j) {
      const double xi = x[b * 32 + j], yi = y[b * 32 + j];
      // x/d > 7.5 cannot be represented (nibble 15 is +7 d): those are clamped, within |d|.
      const bool clamped = xi / d > 7.5;
      const double bound = (clamped ? 1.0 : 0.5) * std::fabs(d) + dd;
      EXPECT_LE(std::fabs(xi - yi), bound) << "block " << b << " elem " << j;
    }
    // the stored scale reproduces the extreme up to the fp16 rounding of d
    EXPECT_NEAR(d16 * -8.0, extreme,
                8.0 * std::max(std::fabs(d) * kFp16UnitRoundoff, std::ldexp(1.0, -25)));
  }
}

TEST(GgufQuant, ZeroBlocksStoreZeroScale) {
  const std::vector<float> zeros(64, 0.0f);
  std::vector<BlockQ8_0> q8(2);
  std::vector<BlockQ4_0> q4(2);
  std::vector<float> out(64, 1.0f);
  quantize_row_q8_0(q8.data(), zeros.data(), 64);
  dequantize_row_q8_0(out.data(), q8.data(), 64);
  EXPECT_EQ(q8[0].d, 0);
  for (const float v : out) EXPECT_EQ(v, 0.0f);
  quantize_row_q4_0(q4.data(), zeros.data(), 64);
  dequantize_row_q4_0(out.data(), q4.data(), 64);
  for (const float v : out) EXPECT_EQ(v, 0.0f);
}

TEST(GgufQuant, F16AndBf16RoundToNearest) {
  const std::vector<float> x = multi_scale_values(200, 13);
  std::vector<float> y(x.size());
  std::vector<uint8_t> buf(x.size() * 2);
  quantize_row(buf.data(), x.data(), TensorType::f16, x.size());
  dequantize_row(y.data(), buf.data(), TensorType::f16, x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    // relative half-ulp for normals, absolute half of the subnormal step (2^-25) below 2^-14
    const double bound =
        std::max(std::fabs(double(x[i])) * kFp16UnitRoundoff, std::ldexp(1.0, -25));
    EXPECT_LE(std::fabs(double(x[i]) - y[i]), bound) << i;
  }
  quantize_row(buf.data(), x.data(), TensorType::bf16, x.size());
  dequantize_row(y.data(), buf.data(), TensorType::bf16, x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_LE(std::fabs(double(x[i]) - y[i]), std::fabs(double(x[i])) * std::ldexp(1.0, -8)) << i;
  }
  const auto bf = [](uint32_t bits) {
    float f;
    std::memcpy(&f, &bits, 4);
    return fp32_to_bf16(f);
  };
  EXPECT_EQ(bf(0x3F808000u), 0x3F80);  // tie, rounds to even
  EXPECT_EQ(bf(0x3F818000u), 0x3F82);  // tie, rounds to even (up)
  EXPECT_EQ(bf(0x3F808001u), 0x3F81);
  EXPECT_EQ(bf(0x7F7FFFFFu), 0x7F80);                      // overflow to inf
  EXPECT_EQ(bf(0xFF800000u), 0xFF80);                      // -inf stays
  EXPECT_TRUE(std::isnan(bf16_to_fp32(bf(0x7F800001u))));  // NaN stays NaN
}

TEST(GgufQuant, GenericRowsEqualTypedRowsAndHandleUnalignedInput) {
  const std::vector<float> x = test_values(128, 21, 3.0f);
  std::vector<BlockQ8_0> q8(4);
  quantize_row_q8_0(q8.data(), x.data(), 128);
  std::vector<uint8_t> buf(1 + 4 * sizeof(BlockQ8_0));
  quantize_row(buf.data() + 1, x.data(), TensorType::q8_0, 128);  // odd address
  EXPECT_EQ(std::memcmp(buf.data() + 1, q8.data(), 4 * sizeof(BlockQ8_0)), 0);
  std::vector<float> a(128), b(128);
  dequantize_row_q8_0(a.data(), q8.data(), 128);
  dequantize_row(b.data(), buf.data() + 1, TensorType::q8_0, 128);
  EXPECT_EQ(a, b);
  std::vector<BlockQ4_0> q4(4);
  quantize_row_q4_0(q4.data(), x.data(), 128);
  quantize_row(buf.data() + 1, x.data(), TensorType::q4_0, 128);
  EXPECT_EQ(std::memcmp(buf.data() + 1, q4.data(), 4 * sizeof(BlockQ4_0)), 0);
  // NaN and inf inputs never reach a float -> int conversion out of range (UBSan would report)
  std::vector<float> bad(32, 1.0f);
  bad[3] = std::numeric_limits<float>::quiet_NaN();
  bad[5] = std::numeric_limits<float>::infinity();
  quantize_row(buf.data(), bad.data(), TensorType::q8_0, 32);
  quantize_row(buf.data(), bad.data(), TensorType::q4_0, 32);
  EXPECT_THROW(quantize_row(buf.data(), x.data(), TensorType::q8_0, 31), std::invalid_argument);
  EXPECT_THROW(dequantize_row(a.data(), buf.data(), TensorType::q4_0, 40), std::invalid_argument);
}

}  // namespace
}  // namespace snapkv::gguf
