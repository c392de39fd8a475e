// The decode matvec against the memory it has to stream: out [rows] = W [rows][cols] x [cols] at
// the 0.73B model's shapes (width 2048, 8 KV heads of 64, FFN 5632: 2048x2048 for Q and O,
// 512x2048 for K and V, 5632x2048 for gate and up, 2048x5632 for down), 1 and 2 threads. Each
// iteration reads another copy of the matrix from a pool of at least kPoolBytes (8x a 32 MiB last
// level cache), as a decode step reads every weight once, so the figures are DRAM streaming, not
// cache hits. Counters:
//   GB/s        weight bytes read per second
//   of_read_bw  that over the read bandwidth measured in the same process with the same thread
//               count (read_bandwidth() below: bench_read_bandwidth's loop, median of 5 passes
//               over 1 GiB); the decode kernels aim at 0.9
// Kernels (first argument):
//   0 f16 per_row            one row at a time, 2 FMA chains (dot_f16)
//   1 f16 rows               4 rows in flight, per_row's bits (kernels/ops_kernels.h F16GemvKernel)
//   2 f16 rows_prefetch      the same plus a prefetch of the next 4 rows
//   3 f16 row_acc8           one row at a time, 8 FMA chains (its own summation order)
//   4 f16 row_acc8_prefetch  the same plus a prefetch 2 KiB ahead
//   5 q8_0 q8                Q8_0 weights, 8-bit activations, the integer kernels (gemv's default)
//   6 q8_0 f32               Q8_0 weights decoded to fp32
//   7 q4_K q8                Q4_K weights, Q8_K activations (gemv's default)
//   8 q4_K f32               Q4_K blocks decoded to fp32
//   9 f16 by_width           per_row up to 4096 columns, rows_prefetch beyond (gemv's default)
// The pools and the read-bandwidth buffer sit on 2 MiB huge pages (util/huge_pages.h), as the
// model's weights do when the page cache holds the file in 2 MiB folios or with
// SNAPKV_WEIGHTS=huge (LlamaModel::weight_storage); SNAPKV_HUGEPAGES=0 puts both on ordinary
// 4 KiB pages (a file map's pages otherwise) to compare.
// (of_read_bw is a ratio; Google Benchmark prints it with a "/s" suffix because it is computed
// as a rate.)
// BM_LayerDecode: the seven products of one layer in the model's order and grouping (q/k/v and
// gate/up each through one gemv_multi: 4 parallel regions), a pool of layers as large as above;
// BM_ParallelForEmpty: the cost of one parallel_for with nothing to do (the decode step opens about
// 7 per layer, 112 per token).
//
//   build/bench/bench_gemv_decode --benchmark_filter='BM_GemvDecode/[0-49]/'
//       --benchmark_repetitions=3 --benchmark_report_aggregates_only=true   (one command line)
//   build/bench/bench_gemv_decode --benchmark_filter='BM_LayerDecode|BM_ParallelFor'
#include <benchmark/benchmark.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "bench_data.h"
#include "ops/gemm_internal.h"
#include "read_words.h"
#include "snapkv/ops/gemm.h"
#include "snapkv/util/parallel.h"
#include "snapkv/util/timer.h"
#include "util/huge_pages.h"

namespace {

using snapkv::GemmPrecision;
using snapkv::WeightMatrix;
using snapkv::WeightType;
using snapkv::ops_internal::F16GemvKernel;

constexpr size_t kPoolBytes = size_t{256} << 20;

struct Shape {
  size_t rows, cols;
};
constexpr Shape kShapes[] = {{2048, 2048}, {512, 2048}, {5632, 2048}, {2048, 5632}};

struct Kernel {
  WeightType type;
  GemmPrecision precision;  // for the non-F16 kernels
  F16GemvKernel f16;        // for the F16 ones
  const char* name;
};
const Kernel kKernels[] = {
    {WeightType::f16, GemmPrecision::f32, F16GemvKernel::per_row, "f16 per_row (old)"},
    {WeightType::f16, GemmPrecision::f32, F16GemvKernel::rows, "f16 rows"},
    {WeightType::f16, GemmPrecision::f32, F16GemvKernel::rows_prefetch, "f16 rows_prefetch"},
    {WeightType::f16, GemmPrecision::f32, F16GemvKernel::row_acc8, "f16 row_acc8"},
    {WeightType::f16, GemmPrecision::f32, F16GemvKernel::row_acc8_prefetch,
     "f16 row_acc8_prefetch"},
    {WeightType::q8_0, GemmPrecision::q8, F16GemvKernel::per_row, "q8_0 q8"},
    {WeightType::q8_0, GemmPrecision::f32, F16GemvKernel::per_row, "q8_0 f32"},
    {WeightType::q4_K, GemmPrecision::q8, F16GemvKernel::per_row, "q4_K q8"},
    {WeightType::q4_K, GemmPrecision::f32, F16GemvKernel::per_row, "q4_K f32"},
    {WeightType::f16, GemmPrecision::f32, F16GemvKernel::by_width, "f16 by_width"},
};

// `n` bytes on huge pages, or from operator new under SNAPKV_HUGEPAGES=0.
struct Buffer {
  snapkv::HugePageRegion huge;
  std::vector<uint8_t> plain;
  explicit Buffer(size_t n) {
    if (snapkv::huge_pages_enabled()) {
      huge = snapkv::HugePageRegion::allocate(n);
    } else {
      plain.resize(n);
    }
  }
  uint8_t* data() { return huge.data() != nullptr ? huge.data() : plain.data(); }
  const uint8_t* data() const { return huge.data() != nullptr ? huge.data() : plain.data(); }
};

// Copies of one encoded matrix, back to back, at least kPoolBytes in all.
struct Pool {
  Buffer bytes;
  size_t matrix_bytes, count;
  const void* at(size_t i) const { return bytes.data() + (i % count) * matrix_bytes; }
};

size_t pool_count(size_t matrix_bytes) {
  return std::max<size_t>(2, (kPoolBytes + matrix_bytes - 1) / matrix_bytes);
}

Pool make_pool(const std::vector<uint8_t>& one) {
  Pool p{Buffer(pool_count(one.size()) * one.size()), one.size(), pool_count(one.size())};
  for (size_t i = 0; i < p.count; ++i)
    std::memcpy(p.bytes.data() + i * one.size(), one.data(), one.size());
  return p;
}

// Read bandwidth (bytes/s) with the current thread count: bench_read_bandwidth's loop (each
// thread one contiguous slice of a 1 GiB buffer, on the pools' kind of pages), the median of 5
// passes; measured once per thread count per process.
double read_bandwidth() {
  static std::map<int, double> measured;
  const int threads = snapkv::num_threads();
  if (auto it = measured.find(threads); it != measured.end()) return it->second;
  const size_t n_words = (size_t{1} << 30) / sizeof(uint64_t);
  Buffer bytes(n_words * sizeof(uint64_t));
  auto* words = reinterpret_cast<uint64_t*>(bytes.data());
  std::fill(words, words + n_words, uint64_t{1});
  const auto n_slices = static_cast<size_t>(threads);
  std::vector<uint64_t> partial;
  std::vector<double> rates;
  for (int pass = 0; pass < 6; ++pass) {
    const snapkv::Timer timer;
    uint64_t total = snapkv_bench::sum_slices(words, n_words, n_slices, partial);
    const double seconds = timer.seconds();
    benchmark::DoNotOptimize(total);
    if (pass > 0) rates.push_back(static_cast<double>(n_words * sizeof(uint64_t)) / seconds);
  }
  std::sort(rates.begin(), rates.end());
  return measured[threads] = rates[rates.size() / 2];
}

void set_counters(benchmark::State& state, double bytes_per_iteration) {
  state.counters["GB/s"] =
      benchmark::Counter(bytes_per_iteration, benchmark::Counter::kIsIterationInvariantRate,
                         benchmark::Counter::kIs1000);
  state.counters["read_bw_GB/s"] = read_bandwidth() * 1e-9;
  state.counters["of_read_bw"] = benchmark::Counter(bytes_per_iteration / read_bandwidth(),
                                                    benchmark::Counter::kIsIterationInvariantRate);
}

void run_product(float* out, const float* x, const WeightMatrix& w, const Kernel& k) {
  if (k.type == WeightType::f16) {
    snapkv::ops_internal::gemv_f16(out, x, w, k.f16);
  } else {
    snapkv::gemv(out, x, w, k.precision);
  }
}

// range(0): kernel (kKernels), range(1): shape (kShapes), range(2): threads
void BM_GemvDecode(benchmark::State& state) {
  const Kernel& k = kKernels[state.range(0)];
  const Shape s = kShapes[state.range(1)];
  const int saved = snapkv::num_threads();
  snapkv::set_num_threads(static_cast<int>(state.range(2)));
  const Pool pool = make_pool(snapkv_bench::encoded_weights(k.type, s.rows, s.cols));
  const std::vector<float> x = snapkv_bench::noise(s.cols, 2, snapkv_bench::kMatrixScale);
  std::vector<float> out(s.rows);
  read_bandwidth();  // measured before the timed loop
  size_t i = 0;
  for (auto _ : state) {
    const WeightMatrix w{k.type, pool.at(i++), s.rows, s.cols};
    run_product(out.data(), x.data(), w, k);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetLabel(std::string(k.name) + " " + std::to_string(s.rows) + "x" + std::to_string(s.cols));
  set_counters(state, static_cast<double>(pool.matrix_bytes));
  snapkv::set_num_threads(saved);
}

void gemv_args(benchmark::internal::Benchmark* b) {
  for (int64_t k = 0; k < static_cast<int64_t>(std::size(kKernels)); ++k) {
    for (int64_t s = 0; s < static_cast<int64_t>(std::size(kShapes)); ++s) {
      for (int64_t t : {1, 2}) b->Args({k, s, t});
    }
  }
}
BENCHMARK(BM_GemvDecode)->Apply(gemv_args)->Unit(benchmark::kMicrosecond)->UseRealTime();

// range(0): weight type (0 f16, 1 q8_0, 2 q4_K, each through gemv's default), range(1): threads.
void BM_LayerDecode(benchmark::State& state) {
  const WeightType type = std::array{WeightType::f16, WeightType::q8_0,
                                     WeightType::q4_K}[static_cast<size_t>(state.range(0))];
  const int saved = snapkv::num_threads();
  snapkv::set_num_threads(static_cast<int>(state.range(1)));
  // q, k, v, o, gate, up, down
  const Shape shapes[] = {kShapes[0], kShapes[1], kShapes[1], kShapes[0],
                          kShapes[2], kShapes[2], kShapes[3]};
  std::vector<Pool> pools;
  double layer_bytes = 0;
  for (const Shape s : shapes) {
    pools.push_back(make_pool(snapkv_bench::encoded_weights(type, s.rows, s.cols)));
    layer_bytes += static_cast<double>(pools.back().matrix_bytes);
  }
  const std::vector<float> x = snapkv_bench::noise(5632, 2, snapkv_bench::kMatrixScale);
  std::vector<float> out(5632);
  read_bandwidth();
  size_t i = 0;
  std::vector<float> out2(5632), out3(5632);
  for (auto _ : state) {
    WeightMatrix w[std::size(shapes)];
    for (size_t m = 0; m < std::size(shapes); ++m) {
      w[m] = WeightMatrix{type, pools[m].at(i), shapes[m].rows, shapes[m].cols};
    }
    float* const qkv[] = {out.data(), out2.data(), out3.data()};
    snapkv::gemv_multi(qkv, x.data(), w, 3);  // as the decode step: q, k, v in one region
    snapkv::gemv(out.data(), x.data(), w[3]);
    float* const gate_up[] = {out.data(), out2.data()};
    snapkv::gemv_multi(gate_up, x.data(), w + 4, 2);
    snapkv::gemv(out.data(), x.data(), w[6]);
    ++i;
    benchmark::DoNotOptimize(out.data());
  }
  state.SetLabel(std::string(snapkv::to_string(type)) + " layer (7 products, 4 regions)");
  set_counters(state, layer_bytes);
  snapkv::set_num_threads(saved);
}
BENCHMARK(BM_LayerDecode)
    ->ArgsProduct({{0, 1, 2}, {1, 2}})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

// range(0): threads. One parallel_for over `threads` indices that do nothing.
void BM_ParallelForEmpty(benchmark::State& state) {
  const int saved = snapkv::num_threads();
  const int threads = static_cast<int>(state.range(0));
  snapkv::set_num_threads(threads);
  std::vector<int> touched(static_cast<size_t>(threads) * 16);
  for (auto _ : state) {
    snapkv::parallel_for(static_cast<size_t>(threads), [&](size_t i) { touched[i * 16] += 1; });
    benchmark::DoNotOptimize(touched.data());
  }
  snapkv::set_num_threads(saved);
}
BENCHMARK(BM_ParallelForEmpty)->Arg(2)->Unit(benchmark::kMicrosecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
