// The F16 decode matvec (ops/kernels.h F16GemvKernel, gemm_simd.cpp): every variant (one row at a
// time, several rows in flight, with and without the software prefetch), at any thread count,
// gives each output the bits of the per-row dot_f16 of the active ISA level (the suite runs at
// every level: ctest -L isa), on widths that are and are not multiples of 16 and row counts that
// are and are not multiples of the rows in flight. Closeness to the double-precision reference is
// gemm_test.cpp's (GemmTest.MatchesDoubleReferenceAcrossShapes, f16).
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <stdexcept>
#include <vector>

#include "ops/kernels.h"
#include "snapkv/ops/dot.h"
#include "snapkv/ops/gemm.h"
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

TEST(GemvDecode, F16VariantsEqualThePerRowDot) {
  const ThreadsGuard guard;
  std::mt19937 rng(21);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  struct Shape {
    size_t rows, cols;
  };
  const Shape shapes[] = {{1, 16}, {3, 48}, {4, 64}, {7, 40}, {37, 512}, {261, 2048}, {64, 5632}};
  for (const Shape s : shapes) {
    std::vector<fp16_t> m(s.rows * s.cols);
    for (fp16_t& h : m) h = fp32_to_fp16(dist(rng));
    std::vector<float> x(s.cols);
    for (float& v : x) v = dist(rng);
    std::vector<float> want(s.rows);
    for (size_t r = 0; r < s.rows; ++r) want[r] = dot_f16(x.data(), m.data() + r * s.cols, s.cols);
    const WeightMatrix w{WeightType::f16, m.data(), s.rows, s.cols};
    for (const int threads : {1, 2, 3}) {
      set_num_threads(threads);
      for (const F16GemvKernel kernel :
           {F16GemvKernel::per_row, F16GemvKernel::rows, F16GemvKernel::rows_prefetch}) {
        std::vector<float> got(s.rows, -1.0f);
        ops_internal::gemv_f16(got.data(), x.data(), w, kernel);
        EXPECT_EQ(0, std::memcmp(got.data(), want.data(), s.rows * sizeof(float)))
            << s.rows << "x" << s.cols << " threads " << threads << " kernel "
            << static_cast<int>(kernel);
      }
      std::vector<float> got(s.rows, -1.0f);
      gemv(got.data(), x.data(), w);  // the default variant
      EXPECT_EQ(0, std::memcmp(got.data(), want.data(), s.rows * sizeof(float)))
          << s.rows << "x" << s.cols << " threads " << threads << " gemv";
    }
  }
}

TEST(GemvDecode, F16EntryRejectsOtherTypes) {
  std::vector<float> m(4 * 16, 1.0f), x(16, 1.0f), out(4);
  const WeightMatrix w{WeightType::f32, m.data(), 4, 16};
  EXPECT_THROW(ops_internal::gemv_f16(out.data(), x.data(), w, F16GemvKernel::rows),
               std::invalid_argument);
}

}  // namespace
}  // namespace snapkv
