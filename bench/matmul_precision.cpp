// Prefill GEMM by weight type and precision (ops/gemm.h GemmPrecision): out [512][rows] = x W^T
// for a weight of a 0.73B model's shapes (2048 x 2048 attention, 5632 x 2048 FFN up), either
//   f32: each task dequantizes a tile of rows and runs a single-threaded sgemm on it, or
//   q8:  the 512 activation rows quantized once, then the integer kernels (q8_dot.h: the
//        register-tiled gemm_* for Q8_0 / Q4_0, per-pair dots for the K-quants).
// This is the measurement behind kDefaultMatmulPrecision's per-type choice. On a shared machine
// interleave the cases and repeat them:
//
//   build/bench/bench_matmul_precision --benchmark_enable_random_interleaving=true
//       --benchmark_repetitions=5 --benchmark_min_time=0.3   (one line)
#include <benchmark/benchmark.h>

#include <cstdint>
#include <vector>

#include "bench_data.h"
#include "snapkv/ops/gemm.h"
#include "snapkv/util/parallel.h"

namespace {

constexpr size_t kTokens = 512, kCols = 2048;

constexpr snapkv::WeightType kTypes[] = {snapkv::WeightType::q8_0, snapkv::WeightType::q4_0,
                                         snapkv::WeightType::q4_K, snapkv::WeightType::q6_K};

void BM_MatmulPrecision(benchmark::State& state) {
  const size_t type = static_cast<size_t>(state.range(0));
  const auto precision =
      state.range(1) == 1 ? snapkv::GemmPrecision::q8 : snapkv::GemmPrecision::f32;
  const size_t rows = static_cast<size_t>(state.range(2));
  snapkv::set_num_threads(static_cast<int>(state.range(3)));
  const std::vector<uint8_t> bytes = snapkv_bench::encoded_weights(kTypes[type], rows, kCols);
  const std::vector<float> x = snapkv_bench::noise(kTokens * kCols, 2, snapkv_bench::kMatrixScale);
  std::vector<float> out(kTokens * rows);
  const snapkv::WeightMatrix w{kTypes[type], bytes.data(), rows, kCols};
  for (auto _ : state) {
    snapkv::matmul(out.data(), x.data(), w, kTokens, precision);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetLabel(std::string(snapkv::to_string(kTypes[type])) + "/" + snapkv::to_string(precision));
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * static_cast<double>(kTokens * rows * kCols),
                                                 benchmark::Counter::kIsIterationInvariantRate,
                                                 benchmark::Counter::kIs1000);
}

// args: type (0 q8_0, 1 q4_0, 2 q4_K, 3 q6_K), precision (0 f32, 1 q8), weight rows, threads
BENCHMARK(BM_MatmulPrecision)
    ->ArgsProduct({{0, 1, 2, 3}, {0, 1}, {2048, 5632}, {1, 2}})
    ->Unit(benchmark::kMillisecond)
    ->MeasureProcessCPUTime()
    ->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
