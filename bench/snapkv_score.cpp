// Issue 2 benchmark: SnapKV scoring, and scoring + selection + compaction (a whole compressing
// LayerCache::update), at S in {1K, 4K, 16K, 64K}, head_dim 128, window 32, 8 KV / 32 query heads,
// next to the bare cblas_sgemm of the same logits shape (the ceiling), measured in the same run.
// GFLOP/s counts only the logits product, 2 * n_heads * window * S * head_dim, for all three.
//   SNAPKV_THREADS=1 OPENBLAS_NUM_THREADS=1 build/bench/bench_snapkv_score  (single core)
//   build/bench/bench_snapkv_score                                          (all cores)
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <cstdlib>
#include <random>
#include <vector>

#include "snapkv/kv/layer_cache.h"
#include "snapkv/kv/snapkv_score.h"
#include "snapkv/util/parallel.h"

namespace {

constexpr size_t kHeads = 32, kKvHeads = 8, kDim = 128, kWindow = 32;

std::vector<float> random_normal(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

double logit_flops(size_t s) {
  return 2.0 * kHeads * kWindow * static_cast<double>(s) * kDim;
}

// Scores only: window_scores for every KV head over its group's queries (parallel over heads).
void BM_WindowScores(benchmark::State& state) {
  const size_t s = static_cast<size_t>(state.range(0));
  const auto keys = random_normal(kKvHeads * s * kDim, 1);
  const auto q = random_normal(kHeads * kWindow * kDim, 2);
  std::vector<float> scores(kKvHeads * s);
  const size_t group = kHeads / kKvHeads;
  for (auto _ : state) {
    snapkv::parallel_for(kKvHeads, [&](size_t h) {
      snapkv::window_scores(scores.data() + h * s, keys.data() + h * s * kDim, s, kDim,
                            q.data() + h * group * kWindow * kDim, group, kWindow, true);
    });
    benchmark::DoNotOptimize(scores.data());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(
      logit_flops(s) * 1e-9 * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}

// The whole compressing update: append S rows (fp16), score, pool, select, compact to 512 rows.
void BM_CacheUpdate(benchmark::State& state) {
  const size_t s = static_cast<size_t>(state.range(0));
  const auto k = random_normal(kKvHeads * s * kDim, 3);
  const auto v = random_normal(kKvHeads * s * kDim, 4);
  const auto q = random_normal(kHeads * kWindow * kDim, 5);
  snapkv::CacheConfig config;
  config.budget = 512;
  config.window = kWindow;
  config.pool = snapkv::PoolKind::max;
  config.kernel = 7;
  const snapkv::Tensor3 kt{k.data(), kKvHeads, s, kDim}, vt{v.data(), kKvHeads, s, kDim};
  const snapkv::Tensor3 qt{q.data(), kHeads, kWindow, kDim};
  for (auto _ : state) {
    snapkv::LayerCache cache({kHeads, kKvHeads, kDim}, config);
    cache.update(kt, vt, &qt);
    benchmark::DoNotOptimize(cache.size());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(
      logit_flops(s) * 1e-9 * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}

// Ceiling: the same logits as one sgemm per KV head ([group*window][d] x [S][d]^T), OpenBLAS
// threads, no softmax.
void BM_SgemmCeiling(benchmark::State& state) {
  const size_t s = static_cast<size_t>(state.range(0));
  const size_t m = kHeads / kKvHeads * kWindow;
  const auto keys = random_normal(kKvHeads * s * kDim, 1);
  const auto q = random_normal(kHeads * kWindow * kDim, 2);
  std::vector<float> logits(m * s);
  for (auto _ : state) {
    for (size_t h = 0; h < kKvHeads; ++h) {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(m), static_cast<int>(s),
                  static_cast<int>(kDim), 1.0f, q.data() + h * m * kDim, static_cast<int>(kDim),
                  keys.data() + h * s * kDim, static_cast<int>(kDim), 0.0f, logits.data(),
                  static_cast<int>(s));
    }
    benchmark::DoNotOptimize(logits.data());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(
      logit_flops(s) * 1e-9 * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}

}  // namespace

BENCHMARK(BM_WindowScores)
    ->Arg(1024)
    ->Arg(4096)
    ->Arg(16384)
    ->Arg(65536)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_CacheUpdate)
    ->Arg(1024)
    ->Arg(4096)
    ->Arg(16384)
    ->Arg(65536)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_SgemmCeiling)
    ->Arg(1024)
    ->Arg(4096)
    ->Arg(16384)
    ->Arg(65536)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
// SNAPKV_THREADS=n sets parallel_for's thread count (OPENBLAS_NUM_THREADS sets OpenBLAS's).
int main(int argc, char** argv) {
  if (const char* t = std::getenv("SNAPKV_THREADS")) snapkv::set_num_threads(std::atoi(t));
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
