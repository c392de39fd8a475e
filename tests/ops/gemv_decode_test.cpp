// The F16 decode matvec (kernels/ops_kernels.h F16GemvKernel, gemm_simd.cpp): at any thread count,
// the variants per_row / rows / rows_prefetch / by_width give each output the bits of the per-row
// dot_f16 of the active ISA level, and row_acc8 / row_acc8_prefetch the bits of their own
// documented order (emulated here with std::fma), on widths that are and are not multiples of 16 /
// 64 and row counts that are and are not multiples of the rows in flight (the suite runs at every
// level: ctest -L isa). Closeness to the double-precision reference is gemm_test.cpp's
// (GemmTest.MatchesDoubleReferenceAcrossShapes, f16). gemv_multi (several products of one input in
// one parallel region) gives each product gemv's bits, for every weight type, a mix of types, both
// precisions and thread counts.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <stdexcept>
#include <vector>

#include "ops/gemm_internal.h"
#include "snapkv/gguf/quant.h"
#include "snapkv/ops/dot.h"
#include "snapkv/ops/gemm.h"
#include "snapkv/util/cpu.h"
#include "snapkv/util/parallel.h"

namespace snapkv {
namespace {

using ops_internal::F16GemvKernel;

class ThreadsGuard {
 public:
  ThreadsGuard() : saved_(num_threads()) {}
  ~ThreadsGuard() { set_num_threads(saved_); }
  ThreadsGuard(const ThreadsGuard&) = delete;
  ThreadsGuard& operator=(const ThreadsGuard&) = delete;

 private:
  int saved_;
};

// row_acc8's order (kernels/gemm_simd.cpp dot_f16_row_acc8), emulated with std::fma: lane l of
// accumulator k takes columns 64m + 8k + l; lo = (acc0 + acc4) + (acc2 + acc6), hi = (acc1 +
// acc5) + (acc3 + acc7); the lanes of lo + hi summed as kernels/vec.h (hsum) does. n % 64 == 0.
float dot_acc8_order(const float* x, const fp16_t* w, size_t n) {
  float acc[8][8] = {};
  for (size_t i = 0; i < n; i += 64) {
    for (size_t k = 0; k < 8; ++k) {
      for (size_t l = 0; l < 8; ++l) {
        const size_t c = i + 8 * k + l;
        acc[k][l] = std::fma(x[c], fp16_to_fp32(w[c]), acc[k][l]);
      }
    }
  }
  float v[8];
  for (size_t l = 0; l < 8; ++l) {
    const float lo = (acc[0][l] + acc[4][l]) + (acc[2][l] + acc[6][l]);
    const float hi = (acc[1][l] + acc[5][l]) + (acc[3][l] + acc[7][l]);
    v[l] = lo + hi;
  }
  return ((v[0] + v[4]) + (v[1] + v[5])) + ((v[2] + v[6]) + (v[3] + v[7]));
}

TEST(GemvDecode, F16VariantsFollowTheirOrder) {
  const ThreadsGuard guard;
  std::mt19937 rng(21);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  struct Shape {
    size_t rows, cols;
  };
  // 9x4112 and 64x5632: by_width's long rows (rows_prefetch, a last partial group of rows).
  const Shape shapes[] = {{1, 16},   {3, 48},     {4, 64},   {7, 40},
                          {37, 512}, {261, 2048}, {9, 4112}, {64, 5632}};
  for (const Shape s : shapes) {
    std::vector<fp16_t> m(s.rows * s.cols);
    for (fp16_t& h : m) h = fp32_to_fp16(dist(rng));
    std::vector<float> x(s.cols);
    for (float& v : x) v = dist(rng);
    // per_row, rows, rows_prefetch: the per-row dot_f16 of this level; row_acc8*: their own
    // order at an x86 SIMD level on whole steps of 64 columns, else the per-row dot as well.
    std::vector<float> per_row(s.rows), acc8(s.rows);
    // (row_acc8 is an AVX2 / AVX-512 schedule; the scalar and NEON levels run per_row for it)
    const bool acc8_order =
        (isa_level() == IsaLevel::avx2 || isa_level() == IsaLevel::avx512) && s.cols % 64 == 0;
    for (size_t r = 0; r < s.rows; ++r) {
      const fp16_t* row = m.data() + r * s.cols;
      per_row[r] = dot_f16(x.data(), row, s.cols);
      acc8[r] = acc8_order ? dot_acc8_order(x.data(), row, s.cols) : per_row[r];
    }
    const WeightMatrix w{WeightType::f16, m.data(), s.rows, s.cols};
    for (const int threads : {1, 2, 3}) {
      set_num_threads(threads);
      for (const F16GemvKernel kernel :
           {F16GemvKernel::per_row, F16GemvKernel::rows, F16GemvKernel::rows_prefetch,
            F16GemvKernel::row_acc8, F16GemvKernel::row_acc8_prefetch, F16GemvKernel::by_width}) {
        const bool is_acc8 =
            kernel == F16GemvKernel::row_acc8 || kernel == F16GemvKernel::row_acc8_prefetch;
        const std::vector<float>& want = is_acc8 ? acc8 : per_row;
        std::vector<float> got(s.rows, -1.0f);
        ops_internal::gemv_f16(got.data(), x.data(), w, kernel);
        EXPECT_EQ(0, std::memcmp(got.data(), want.data(), s.rows * sizeof(float)))
            << s.rows << "x" << s.cols << " threads " << threads << " kernel "
            << static_cast<int>(kernel);
        if (kernel == ops_internal::f16_gemv_kernel()) {
          gemv(got.data(), x.data(), w);  // gemv takes this variant
          EXPECT_EQ(0, std::memcmp(got.data(), want.data(), s.rows * sizeof(float)))
              << s.rows << "x" << s.cols << " threads " << threads << " gemv";
        }
      }
    }
    if (acc8_order && s.cols == 5632) {  // the orders really differ on this input
      EXPECT_NE(0, std::memcmp(acc8.data(), per_row.data(), s.rows * sizeof(float)));
    }
  }
}

TEST(GemvDecode, F16EntryRejectsOtherTypes) {
  std::vector<float> m(4 * 16, 1.0f), x(16, 1.0f), out(4);
  const WeightMatrix w{WeightType::f32, m.data(), 4, 16};
  EXPECT_THROW(ops_internal::gemv_f16(out.data(), x.data(), w, F16GemvKernel::rows),
               std::invalid_argument);
}

// Bytes of a [rows][cols] matrix in `type` whose values are random normals.
std::vector<uint8_t> random_matrix(WeightType type, size_t rows, size_t cols, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> values(rows * cols);
  for (float& v : values) v = dist(rng);
  std::vector<uint8_t> bytes(rows * weight_row_bytes(type, cols));
  if (type == WeightType::f32) {
    std::memcpy(bytes.data(), values.data(), bytes.size());
  } else if (type == WeightType::f16) {
    auto* h = reinterpret_cast<fp16_t*>(bytes.data());
    for (size_t i = 0; i < values.size(); ++i) h[i] = fp32_to_fp16(values[i]);
  } else {
    const auto gt = gguf::tensor_type_from_name(to_string(type));
    if (!gt) throw std::logic_error("no gguf encoder for this weight type");
    const size_t row_bytes = weight_row_bytes(type, cols);
    for (size_t r = 0; r < rows; ++r) {
      gguf::quantize_row(bytes.data() + r * row_bytes, values.data() + r * cols, *gt, cols);
    }
  }
  return bytes;
}

TEST(GemvDecode, MultiEqualsSeparateGemvs) {
  const ThreadsGuard guard;
  const GemmPrecision saved_gemv = gemv_precision(), saved_matmul = matmul_precision();
  std::mt19937 rng(22);
  const size_t cols = 512;
  std::vector<float> x(cols);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (float& v : x) v = dist(rng);
  // Q/K/V-like row counts, one group per weight-type mix (Q4_K_M files mix Q4_K and Q6_K).
  const std::vector<std::vector<WeightType>> mixes = {
      {WeightType::f16, WeightType::f16, WeightType::f16},
      {WeightType::q8_0, WeightType::q8_0, WeightType::q8_0},
      {WeightType::q4_K, WeightType::q4_K, WeightType::q6_K},
      {WeightType::f32, WeightType::q4_0, WeightType::bf16, WeightType::q2_K, WeightType::q5_K}};
  const size_t rows[] = {64, 16, 16, 37, 9};
  for (const auto& mix : mixes) {
    std::vector<std::vector<uint8_t>> bytes;
    std::vector<WeightMatrix> ws;
    for (size_t i = 0; i < mix.size(); ++i) {
      bytes.push_back(random_matrix(mix[i], rows[i], cols, rng));
      ws.push_back(WeightMatrix{mix[i], bytes.back().data(), rows[i], cols});
    }
    for (const GemmPrecision precision : {GemmPrecision::f32, GemmPrecision::q8}) {
      set_gemm_precision(precision, saved_matmul);
      for (const int threads : {1, 2}) {
        set_num_threads(threads);
        std::vector<std::vector<float>> got(mix.size()), want(mix.size());
        std::vector<float*> outs;
        for (size_t i = 0; i < mix.size(); ++i) {
          got[i].assign(rows[i], -1.0f);
          want[i].assign(rows[i], -2.0f);
          outs.push_back(got[i].data());
          gemv(want[i].data(), x.data(), ws[i]);
        }
        gemv_multi(outs.data(), x.data(), ws.data(), ws.size());
        for (size_t i = 0; i < mix.size(); ++i) {
          EXPECT_EQ(0, std::memcmp(got[i].data(), want[i].data(), rows[i] * sizeof(float)))
              << to_string(mix[i]) << " product " << i << " precision " << to_string(precision)
              << " threads " << threads;
        }
      }
    }
  }
  set_gemm_precision(saved_gemv, saved_matmul);
}

TEST(GemvDecode, MultiRejectsBadInput) {
  std::vector<fp16_t> a(4 * 32), b(4 * 64);
  std::vector<float> x(64), o1(4), o2(4);
  float* outs[] = {o1.data(), o2.data()};
  const WeightMatrix ws[] = {{WeightType::f16, a.data(), 4, 32},
                             {WeightType::f16, b.data(), 4, 64}};
  EXPECT_THROW(gemv_multi(outs, x.data(), ws, 2), std::invalid_argument);  // widths differ
  std::vector<WeightMatrix> many(9, ws[0]);
  std::vector<float*> many_outs(9, o1.data());
  EXPECT_THROW(gemv_multi(many_outs.data(), x.data(), many.data(), 9), std::invalid_argument);
  gemv_multi(outs, x.data(), ws, 0);  // nothing to do
}

}  // namespace
}  // namespace snapkv
