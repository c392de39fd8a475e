// The ISA levels of the ops/ kernels (snapkv/util/cpu.h): forcing a level runs that level's code
// (the scalar level is the plain loop bit for bit; the SIMD levels follow the documented 2 x 8-lane
// FMA order, emulated here with std::fma), and the avx2 and avx512 levels, which compile the same
// AVX2 source, give bitwise the same gemv for every weight type. The full kernel suites also run at
// every level this CPU supports (ctest -L isa: SNAPKV_ISA=scalar|avx2|avx512).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "snapkv/ops/dot.h"
#include "snapkv/ops/gemm.h"
#include "snapkv/util/cpu.h"
#include "util/isa_levels_test.h"

namespace snapkv {
namespace {

std::vector<float> random_vector(size_t n, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// The AVX2 dot's order (kernels/dot_simd.cpp, kernels/vec.h (hsum)): lane l of accumulator 0 takes
// elements 16k + l and, after the 16-wide loop, one 8-wide step; accumulator 1 takes 16k + 8 + l;
// each product is fused into its lane (FMA); the lanes are summed as
// ((l0 + l4) + (l1 + l5)) + ((l2 + l6) + (l3 + l7)) of acc0 + acc1; the tail is added in order.
float dot_avx2_order(const float* a, const float* b, size_t n) {
  float acc0[8] = {}, acc1[8] = {};
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    for (size_t l = 0; l < 8; ++l) {
      acc0[l] = std::fma(a[i + l], b[i + l], acc0[l]);
      acc1[l] = std::fma(a[i + 8 + l], b[i + 8 + l], acc1[l]);
    }
  }
  for (; i + 8 <= n; i += 8) {
    for (size_t l = 0; l < 8; ++l) acc0[l] = std::fma(a[i + l], b[i + l], acc0[l]);
  }
  float v[8];
  for (size_t l = 0; l < 8; ++l) v[l] = acc0[l] + acc1[l];
  float sum = ((v[0] + v[4]) + (v[1] + v[5])) + ((v[2] + v[6]) + (v[3] + v[7]));
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

TEST(IsaDispatch, EachLevelRunsItsOwnDot) {
  const isa_test::IsaLevelGuard guard;
  std::mt19937 rng(5);
  for (const size_t n : {size_t{1000}, size_t{129}, size_t{24}, size_t{7}}) {
    const auto a = random_vector(n, rng);
    const auto b = random_vector(n, rng);
    const float plain = dot_scalar(a.data(), b.data(), n);
    const float simd = dot_avx2_order(a.data(), b.data(), n);
    if (n == 1000) {
      ASSERT_NE(plain, simd) << "the two orders must differ on this input";
    }
    for (const IsaLevel level : isa_test::runnable_levels()) {
      set_isa_level(level);
      const float want = level == IsaLevel::scalar ? plain : simd;
      EXPECT_EQ(dot(a.data(), b.data(), n), want) << to_string(level) << " n=" << n;
    }
  }
}

TEST(IsaDispatch, SimdLevelsGiveBitwiseTheSameGemv) {
  const isa_test::IsaLevelGuard guard;
  std::vector<IsaLevel> simd_levels;
  for (const IsaLevel level : isa_test::runnable_levels()) {
    if (level != IsaLevel::scalar) simd_levels.push_back(level);
  }
  if (simd_levels.size() < 2) GTEST_SKIP() << "this CPU supports fewer than two SIMD levels";
  std::mt19937 rng(6);
  const size_t rows = 7, cols = 512;
  const auto x = random_vector(cols, rng);
  for (const WeightType type :
       {WeightType::f32, WeightType::f16, WeightType::bf16, WeightType::q8_0, WeightType::q4_0,
        WeightType::q2_K, WeightType::q3_K, WeightType::q4_K, WeightType::q5_K, WeightType::q6_K}) {
    // Random bytes are valid blocks except for NaN / inf scales: keep every fp16 / bf16 exponent
    // field below all-ones by clearing bit 14 of every 16-bit word.
    std::vector<uint8_t> bytes(rows * weight_row_bytes(type, cols));
    for (uint8_t& byte : bytes) byte = static_cast<uint8_t>(rng());
    for (size_t i = 1; i < bytes.size(); i += 2) bytes[i] &= 0xBF;
    if (type == WeightType::f32) {
      const auto values = random_vector(rows * cols, rng);
      std::memcpy(bytes.data(), values.data(), bytes.size());
    }
    const WeightMatrix w{type, bytes.data(), rows, cols};
    std::vector<std::vector<float>> outs;
    for (const IsaLevel level : simd_levels) {
      set_isa_level(level);
      outs.emplace_back(rows);
      gemv(outs.back().data(), x.data(), w);
      std::vector<float> dequant(rows * cols);
      dequantize_rows(dequant.data(), w, 0, rows);
      outs.push_back(dequant);
    }
    for (size_t k = 2; k < outs.size(); ++k) {
      EXPECT_EQ(0, std::memcmp(outs[k].data(), outs[k % 2].data(), outs[k].size() * sizeof(float)))
          << to_string(type) << " level " << to_string(simd_levels[k / 2]);
    }
  }
}

}  // namespace
}  // namespace snapkv
