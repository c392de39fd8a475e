// Decode-step GEMV throughput per weight type: out [rows] = W [rows][cols] x [cols] with W a
// 4096 x 4096 matrix (a 7B model's attention projection) stored as F32, F16, BF16, Q8_0, Q4_0,
// Q2_K, Q3_K, Q4_K, Q5_K or Q6_K, single thread. Counters: weight bytes read per second (GB/s)
// and weights per second.
//
//   build/bench/bench_gemv_types --benchmark_min_time=0.5
#include <benchmark/benchmark.h>

#include <cstdint>
#include <vector>

#include "snapkv/gguf/quant.h"
#include "snapkv/ops/gemm.h"
#include "snapkv/util/parallel.h"

namespace {

constexpr size_t kRows = 4096, kCols = 4096;

std::vector<float> noise(size_t n, uint64_t seed) {
  std::vector<float> out(n);
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 7;
  for (float& x : out) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x = static_cast<float>(static_cast<double>(s >> 11) * 0x1.0p-52 - 1.0) * 0.05f;
  }
  return out;
}

void BM_Gemv(benchmark::State& state) {
  const auto type = static_cast<snapkv::WeightType>(state.range(0));
  const auto gtype = snapkv::gguf::tensor_type_from_name(snapkv::to_string(type));
  const size_t row_bytes = snapkv::weight_row_bytes(type, kCols);
  std::vector<uint8_t> bytes(kRows * row_bytes);
  const std::vector<float> m = noise(kRows * kCols, 1);
  for (size_t r = 0; r < kRows; ++r) {
    snapkv::gguf::quantize_row(bytes.data() + r * row_bytes, m.data() + r * kCols, *gtype, kCols);
  }
  const std::vector<float> x = noise(kCols, 2);
  std::vector<float> out(kRows);
  const snapkv::WeightMatrix w{type, bytes.data(), kRows, kCols};
  snapkv::set_num_threads(1);
  for (auto _ : state) {
    snapkv::gemv(out.data(), x.data(), w);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetLabel(snapkv::to_string(type));
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(bytes.size()),
                                              benchmark::Counter::kIsIterationInvariantRate,
                                              benchmark::Counter::kIs1000);
  state.counters["weights/s"] = benchmark::Counter(static_cast<double>(kRows * kCols),
                                                   benchmark::Counter::kIsIterationInvariantRate);
}

BENCHMARK(BM_Gemv)->DenseRange(0, 9)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
