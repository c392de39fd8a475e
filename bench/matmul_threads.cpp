// Prefill GEMM thread scaling, two ways of threading the same work: out [512][rows] = x W^T for a
// Q8_0 weight of a 0.73B model's shapes (2048 x 2048 attention, 5632 x 2048 FFN up).
//   two_pools: 512-row tiles dequantized over snapkv's parallel_for (OpenMP), then one
//              cblas_sgemm per tile on OpenBLAS's own pthreads (set to the same count); the two
//              pools' idle workers spin beside each other.
//   one_pool:  snapkv::matmul's scheme: tiles spread over parallel_for, each dequantized and
//              multiplied by a single-threaded sgemm in its task (OpenBLAS pinned to one thread).
// Real time and process CPU time are both reported: with one thread the two agree; with two, a
// scheme that scales has real time near half its one-thread time. Run on a quiet machine:
//
//   build/bench/bench_matmul_threads --benchmark_min_time=1
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "bench_data.h"
#include "snapkv/ops/gemm.h"
#include "snapkv/util/parallel.h"

namespace {

constexpr size_t kTokens = 512, kCols = 2048;

// The two-pool matmul body (dequantize a tile over parallel_for, then a multi-threaded sgemm).
void matmul_two_pools(float* out, const float* x, const snapkv::WeightMatrix& w, size_t n_tokens) {
  const size_t tile = std::clamp<size_t>((size_t{4} << 20) / (w.cols * sizeof(float)), 16, w.rows);
  thread_local std::vector<float> scratch;
  scratch.resize(tile * w.cols);
  const size_t threads = static_cast<size_t>(std::max(1, snapkv::num_threads()));
  for (size_t r0 = 0; r0 < w.rows; r0 += tile) {
    const size_t n_rows = std::min(tile, w.rows - r0);
    const size_t per_task = std::max<size_t>(8, (n_rows + threads * 4 - 1) / (threads * 4));
    const size_t n_tasks = (n_rows + per_task - 1) / per_task;
    float* dst = scratch.data();
    snapkv::parallel_for(n_tasks, [&](size_t task) {
      const size_t a = task * per_task, b = std::min(n_rows, a + per_task);
      snapkv::dequantize_rows(dst + a * w.cols, w, r0 + a, r0 + b);
    });
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(n_tokens),
                static_cast<int>(n_rows), static_cast<int>(w.cols), 1.0f, x,
                static_cast<int>(w.cols), dst, static_cast<int>(w.cols), 0.0f, out + r0,
                static_cast<int>(w.rows));
  }
}

void BM_Matmul(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  const bool one_pool = state.range(1) == 1;
  const size_t rows = static_cast<size_t>(state.range(2));
  const std::vector<uint8_t> bytes =
      snapkv_bench::encoded_weights(snapkv::WeightType::q8_0, rows, kCols);
  const std::vector<float> x = snapkv_bench::noise(kTokens * kCols, 2, snapkv_bench::kMatrixScale);
  std::vector<float> out(kTokens * rows);
  const snapkv::WeightMatrix w{snapkv::WeightType::q8_0, bytes.data(), rows, kCols};
  snapkv::set_num_threads(threads);
  snapkv::matmul(out.data(), x.data(), w, kTokens);  // pins OpenBLAS to one thread once
  snapkv::set_blas_threads(one_pool ? 1 : threads);
  for (auto _ : state) {
    if (one_pool) {
      snapkv::matmul(out.data(), x.data(), w, kTokens);
    } else {
      matmul_two_pools(out.data(), x.data(), w, kTokens);
    }
    benchmark::DoNotOptimize(out.data());
  }
  snapkv::set_blas_threads(1);
  state.SetLabel(one_pool ? "one_pool" : "two_pools");
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * static_cast<double>(kTokens * rows * kCols),
                                                 benchmark::Counter::kIsIterationInvariantRate,
                                                 benchmark::Counter::kIs1000);
}

// args: threads, scheme (0 two_pools, 1 one_pool), weight rows
BENCHMARK(BM_Matmul)
    ->ArgsProduct({{1, 2}, {0, 1}, {2048, 5632}})
    ->Unit(benchmark::kMillisecond)
    ->MeasureProcessCPUTime()
    ->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
