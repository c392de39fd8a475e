// GEMV / GEMM over every weight type (F32, F16, BF16, Q8_0, Q4_0, Q2_K..Q6_K) against the
// double-accumulating reference, and the fast dequantizers against the scalar ones and against
// the GGUF layer's reference conversions.
#include "snapkv/ops/gemm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <vector>

#include "snapkv/gguf/quant.h"
#include "snapkv/util/parallel.h"

namespace snapkv {
namespace {

constexpr float kEps = std::numeric_limits<float>::epsilon();

// Encoded bytes of a [rows][cols] fp32 matrix in `type`.
std::vector<uint8_t> encode(WeightType type, const std::vector<float>& m, size_t rows,
                            size_t cols) {
  std::vector<uint8_t> bytes(rows * weight_row_bytes(type, cols));
  for (size_t r = 0; r < rows; ++r) {
    uint8_t* dst = bytes.data() + r * weight_row_bytes(type, cols);
    const float* src = m.data() + r * cols;
    if (type == WeightType::f32) {
      std::memcpy(dst, src, cols * sizeof(float));
    } else if (type == WeightType::f16) {
      std::vector<fp16_t> h(cols);
      for (size_t c = 0; c < cols; ++c) h[c] = fp32_to_fp16(src[c]);
      std::memcpy(dst, h.data(), cols * sizeof(fp16_t));
    } else if (type == WeightType::q8_0) {
      std::vector<BlockQ8_0> blocks(cols / kQ8BlockSize);
      gguf::quantize_row_q8_0(blocks.data(), src, cols);
      std::memcpy(dst, blocks.data(), blocks.size() * sizeof(BlockQ8_0));
    } else {  // the other types through the GGUF layer's encoders (same ggml type names)
      const auto gt = gguf::tensor_type_from_name(to_string(type));
      if (!gt) throw std::logic_error("no gguf encoder for this weight type");
      gguf::quantize_row(dst, src, *gt, cols);
    }
  }
  return bytes;
}

std::vector<float> random_vec(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// |fast - ref| <= k * cols * eps * sum_c |w_rc x_tc|  (k = 2: fp32 accumulation of cols terms,
// the standard a-priori bound n*eps*sum|a_i b_i| for a recursive or blocked sum, times a margin
// for the final rounding of the reference).
void expect_matmul_close(const std::vector<float>& fast, const std::vector<float>& x,
                         const std::vector<float>& deq, size_t n_tokens, size_t rows, size_t cols) {
  for (size_t t = 0; t < n_tokens; ++t) {
    for (size_t r = 0; r < rows; ++r) {
      double abs_sum = 0.0, exact = 0.0;
      for (size_t c = 0; c < cols; ++c) {
        const double p = static_cast<double>(deq[r * cols + c]) * x[t * cols + c];
        abs_sum += std::fabs(p);
        exact += p;
      }
      const double bound = 2.0 * static_cast<double>(cols) * kEps * abs_sum + 1e-30;
      ASSERT_LE(std::fabs(fast[t * rows + r] - exact), bound) << "t=" << t << " r=" << r;
    }
  }
}

struct Shape {
  size_t n_tokens, rows, cols;
};

class GemmTest : public ::testing::TestWithParam<WeightType> {};

TEST_P(GemmTest, MatchesDoubleReferenceAcrossShapes) {
  const WeightType type = GetParam();
  // Token counts on both sides of kGemmMinTokens; cols multiple of 32 (Q8_0) with odd row counts
  // and a row count above the dequantization tile; cols rounded up to 256 for the K-quants.
  const Shape shapes[] = {{1, 37, 64}, {3, 5, 96}, {4, 64, 32}, {9, 131, 160}, {5, 600, 2048}};
  const size_t bs = weight_block_size(type);
  for (Shape s : shapes) {
    s.cols = (s.cols + bs - 1) / bs * bs;
    const auto m = random_vec(s.rows * s.cols, 7);
    const auto x = random_vec(s.n_tokens * s.cols, 11);
    const auto bytes = encode(type, m, s.rows, s.cols);
    const WeightMatrix w{type, bytes.data(), s.rows, s.cols};
    std::vector<float> deq(s.rows * s.cols), deq_fast(s.rows * s.cols);
    dequantize_rows_ref(deq.data(), w, 0, s.rows);
    dequantize_rows(deq_fast.data(), w, 0, s.rows);
    ASSERT_EQ(0, std::memcmp(deq.data(), deq_fast.data(), deq.size() * sizeof(float)))
        << "fast dequantizer differs from the scalar one";
    std::vector<float> fast(s.n_tokens * s.rows), ref(s.n_tokens * s.rows);
    matmul(fast.data(), x.data(), w, s.n_tokens, GemmPrecision::f32);  // q8: q8_dot_test.cpp
    matmul_ref(ref.data(), x.data(), w, s.n_tokens);
    expect_matmul_close(fast, x, deq, s.n_tokens, s.rows, s.cols);
    expect_matmul_close(ref, x, deq, s.n_tokens, s.rows, s.cols);
  }
}

TEST_P(GemmTest, GemvIsThreadCountIndependent) {
  const WeightType type = GetParam();
  const size_t rows = 300, cols = 256;
  const auto m = random_vec(rows * cols, 3);
  const auto x = random_vec(cols, 4);
  const auto bytes = encode(type, m, rows, cols);
  const WeightMatrix w{type, bytes.data(), rows, cols};
  const int saved = num_threads();
  std::vector<float> one(rows), many(rows);
  for (GemmPrecision precision : {GemmPrecision::f32, GemmPrecision::q8}) {
    set_num_threads(1);
    gemv(one.data(), x.data(), w, precision);
    set_num_threads(4);
    gemv(many.data(), x.data(), w, precision);
    // Each row is computed by exactly one thread with the same code: bitwise equal.
    EXPECT_EQ(0, std::memcmp(one.data(), many.data(), rows * sizeof(float)))
        << to_string(precision);
  }
  set_num_threads(saved);
}

INSTANTIATE_TEST_SUITE_P(Types, GemmTest,
                         ::testing::Values(WeightType::f32, WeightType::f16, WeightType::q8_0,
                                           WeightType::bf16, WeightType::q4_0, WeightType::q2_K,
                                           WeightType::q3_K, WeightType::q4_K, WeightType::q5_K,
                                           WeightType::q6_K),
                         [](const auto& param_info) {
                           return std::string(to_string(param_info.param));
                         });

TEST(Gemm, DequantizersAgreeWithGgufReference) {
  const size_t n = 256;
  const auto v = random_vec(n, 5, 3.0f);
  std::vector<BlockQ8_0> q(n / kQ8BlockSize);
  gguf::quantize_row_q8_0(q.data(), v.data(), n);
  std::vector<float> theirs(n), ours(n);
  gguf::dequantize_row_q8_0(theirs.data(), q.data(), n);
  const WeightMatrix w{WeightType::q8_0, q.data(), 1, n};
  dequantize_rows(ours.data(), w, 0, 1);
  EXPECT_EQ(0, std::memcmp(theirs.data(), ours.data(), n * sizeof(float)));

  std::vector<fp16_t> h(n);
  gguf::quantize_row(h.data(), v.data(), gguf::TensorType::f16, n);
  gguf::dequantize_row(theirs.data(), h.data(), gguf::TensorType::f16, n);
  const WeightMatrix wh{WeightType::f16, h.data(), 1, n};
  dequantize_rows(ours.data(), wh, 0, 1);
  EXPECT_EQ(0, std::memcmp(theirs.data(), ours.data(), n * sizeof(float)));
}

TEST(Gemm, Q8QuantizationErrorWithinHalfStep) {
  const size_t n = 4096;
  const auto v = random_vec(n, 9, 2.0f);
  std::vector<BlockQ8_0> q(n / kQ8BlockSize);
  gguf::quantize_row_q8_0(q.data(), v.data(), n);
  std::vector<float> back(n);
  dequantize_rows_ref(back.data(), WeightMatrix{WeightType::q8_0, q.data(), 1, n}, 0, 1);
  for (size_t b = 0; b < q.size(); ++b) {
    float amax = 0.0f;
    for (size_t j = 0; j < kQ8BlockSize; ++j) amax = std::max(amax, std::fabs(v[b * 32 + j]));
    // q = round(x / d) with d = amax/127 before fp16 rounding of the stored d: error
    // <= d/2 + |q| * |d - fp16(d)| <= amax/254 + 127 * amax/127 * 2^-11.
    const double bound = amax / 254.0 + amax * kFp16UnitRoundoff;
    for (size_t j = 0; j < kQ8BlockSize; ++j) {
      ASSERT_LE(std::fabs(back[b * 32 + j] - v[b * 32 + j]), bound * (1 + 4 * kEps));
    }
  }
  // An all-zero block has scale 0 and decodes to zeros (no division by zero).
  std::vector<float> zeros(32, 0.0f), out(32, 1.0f);
  BlockQ8_0 zb;
  gguf::quantize_row_q8_0(&zb, zeros.data(), 32);
  dequantize_rows(out.data(), WeightMatrix{WeightType::q8_0, &zb, 1, 32}, 0, 1);
  for (float o : out) EXPECT_EQ(o, 0.0f);
}

TEST(Gemm, RejectsBadArguments) {
  float data[64] = {};
  EXPECT_THROW(weight_row_bytes(WeightType::q8_0, 33), std::invalid_argument);
  EXPECT_THROW(weight_row_bytes(WeightType::q4_K, 128), std::invalid_argument);
  EXPECT_THROW(validate_weight(WeightMatrix{WeightType::f32, nullptr, 2, 2}, "w"),
               std::invalid_argument);
  EXPECT_THROW(validate_weight(WeightMatrix{WeightType::f32, data, 0, 2}, "w"),
               std::invalid_argument);
  float out[64];
  EXPECT_THROW(dequantize_rows(out, WeightMatrix{WeightType::f32, data, 2, 2}, 1, 3),
               std::invalid_argument);
}

}  // namespace
}  // namespace snapkv
