// The products of one decode step of a batch of streams: the seven weight matrices of one layer of
// the 0.73B shape (width 1536, 4 KV heads of 128, FFN 6144: 1536x1536 for Q and O, 512x1536 for K
// and V, 6144x1536 for gate and up, 1536x6144 for down; 36.8 MB as Q8_0, more than the last-level
// cache) against B activation rows, one row per stream, through matmul under GemmPrecision::q8
// (the integer kernels of kernels/q8_dot.h, the path a batched decode step takes).
// Arguments: weight type (0 Q8_0, 1 Q4_0), rows in the batch B, threads.
// Counters:
//   ms_per_step   time of the seven products
//   rows_per_s    B over that time: the decode tokens per second the products allow
//   us_per_row    the step's time over B: what each stream's row costs in a batched step
//
//   build/bench/bench_q8_batch_decode --benchmark_repetitions=3
//       --benchmark_report_aggregates_only=true   (one command line)
#include <benchmark/benchmark.h>

#include <array>
#include <cstdint>
#include <vector>

#include "bench_data.h"
#include "snapkv/ops/gemm.h"
#include "snapkv/util/parallel.h"

namespace {

using snapkv::GemmPrecision;
using snapkv::WeightMatrix;
using snapkv::WeightType;

struct Shape {
  size_t rows, cols;
};
constexpr std::array<Shape, 7> kLayer = {{{1536, 1536},
                                          {512, 1536},
                                          {512, 1536},
                                          {1536, 1536},
                                          {6144, 1536},
                                          {6144, 1536},
                                          {1536, 6144}}};

void BM_BatchDecodeLayer(benchmark::State& state) {
  const WeightType type = state.range(0) == 0 ? WeightType::q8_0 : WeightType::q4_0;
  const auto batch = static_cast<size_t>(state.range(1));
  const int saved = snapkv::num_threads();
  snapkv::set_num_threads(static_cast<int>(state.range(2)));
  std::vector<std::vector<uint8_t>> bytes;
  std::vector<WeightMatrix> ws;
  std::vector<std::vector<float>> xs, outs;
  for (size_t i = 0; i < kLayer.size(); ++i) {
    const Shape s = kLayer[i];
    bytes.push_back(snapkv_bench::encoded_weights(type, s.rows, s.cols, 10 + i));
    xs.push_back(snapkv_bench::noise(batch * s.cols, 20 + i));
    outs.emplace_back(batch * s.rows);
  }
  for (size_t i = 0; i < kLayer.size(); ++i) {
    ws.push_back(WeightMatrix{type, bytes[i].data(), kLayer[i].rows, kLayer[i].cols});
  }
  for (auto _ : state) {
    for (size_t i = 0; i < ws.size(); ++i) {
      snapkv::matmul(outs[i].data(), xs[i].data(), ws[i], batch, GemmPrecision::q8);
    }
    benchmark::DoNotOptimize(outs.back().data());
    benchmark::ClobberMemory();
  }
  state.counters["rows_per_s"] =
      benchmark::Counter(static_cast<double>(batch) * static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate);
  state.counters["ms_per_step"] =
      benchmark::Counter(static_cast<double>(state.iterations()) / 1e3,
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  state.counters["us_per_row"] =
      benchmark::Counter(static_cast<double>(state.iterations() * batch) / 1e6,
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  snapkv::set_num_threads(saved);
}
BENCHMARK(BM_BatchDecodeLayer)
    ->ArgsProduct({{0, 1}, {1, 2, 4, 8}, {1, 2}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
