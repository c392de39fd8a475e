// Decode-step GEMV throughput per weight type: out [rows] = W [rows][cols] x [cols] with W a
// 4096 x 4096 matrix (a 7B model's attention projection) stored as F32, F16, BF16, Q8_0, Q4_0,
// Q2_K, Q3_K, Q4_K, Q5_K or Q6_K, single thread, with both GemmPrecision paths (f32: weights
// decoded to fp32; q8: activations quantized to 8 bits, integer dots; types without an integer
// kernel run the f32 path under either). Counters: weight bytes read per second (GB/s) and
// weights per second. BM_Matmul: the same matrix against 64 tokens (a prefill chunk), Q8_0 / Q4_0 /
// Q4_K / Q6_K, both precisions.
//
//   build/bench/bench_gemv_types --benchmark_min_time=0.5 --benchmark_repetitions=5
//       --benchmark_report_aggregates_only=true   (one command line)
//   build/bench/bench_gemv_types --benchmark_filter='BM_Gemv/2/'   # Q8_0 (WeightType 2)
#include <benchmark/benchmark.h>

#include <cstdint>
#include <string>
#include <vector>

#include "bench_data.h"
#include "snapkv/ops/gemm.h"
#include "snapkv/util/parallel.h"

namespace {

constexpr size_t kRows = 4096, kCols = 4096;

// range(0): WeightType, range(1): GemmPrecision
void BM_Gemv(benchmark::State& state) {
  const auto type = static_cast<snapkv::WeightType>(state.range(0));
  const auto precision = static_cast<snapkv::GemmPrecision>(state.range(1));
  const std::vector<uint8_t> bytes = snapkv_bench::encoded_weights(type, kRows, kCols);
  const std::vector<float> x = snapkv_bench::noise(kCols, 2, snapkv_bench::kMatrixScale);
  std::vector<float> out(kRows);
  const snapkv::WeightMatrix w{type, bytes.data(), kRows, kCols};
  snapkv::set_num_threads(1);
  for (auto _ : state) {
    snapkv::gemv(out.data(), x.data(), w, precision);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetLabel(std::string(snapkv::to_string(type)) + " " + snapkv::to_string(precision));
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(bytes.size()),
                                              benchmark::Counter::kIsIterationInvariantRate,
                                              benchmark::Counter::kIs1000);
  state.counters["weights/s"] = benchmark::Counter(static_cast<double>(kRows * kCols),
                                                   benchmark::Counter::kIsIterationInvariantRate);
}

BENCHMARK(BM_Gemv)
    ->ArgsProduct({benchmark::CreateDenseRange(0, 9, 1), {0, 1}})
    ->Unit(benchmark::kMillisecond);

// range(0): WeightType, range(1): GemmPrecision; 64 tokens, one thread (OpenBLAS too).
void BM_Matmul(benchmark::State& state) {
  constexpr size_t kTokens = 64;
  const auto type = static_cast<snapkv::WeightType>(state.range(0));
  const auto precision = static_cast<snapkv::GemmPrecision>(state.range(1));
  const std::vector<uint8_t> bytes = snapkv_bench::encoded_weights(type, kRows, kCols);
  const std::vector<float> x = snapkv_bench::noise(kTokens * kCols, 3, snapkv_bench::kMatrixScale);
  std::vector<float> out(kTokens * kRows);
  const snapkv::WeightMatrix w{type, bytes.data(), kRows, kCols};
  snapkv::set_num_threads(1);
  snapkv::set_blas_threads(1);
  for (auto _ : state) {
    snapkv::matmul(out.data(), x.data(), w, kTokens, precision);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetLabel(std::string(snapkv::to_string(type)) + " " + snapkv::to_string(precision));
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * kTokens * kRows * kCols,
                                                 benchmark::Counter::kIsIterationInvariantRate,
                                                 benchmark::Counter::kIs1000);
}

BENCHMARK(BM_Matmul)
    ->ArgsProduct({{static_cast<int64_t>(snapkv::WeightType::q8_0),
                    static_cast<int64_t>(snapkv::WeightType::q4_0),
                    static_cast<int64_t>(snapkv::WeightType::q4_K),
                    static_cast<int64_t>(snapkv::WeightType::q6_K)},
                   {0, 1}})
    ->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
