// SnapKV prefill compression throughput: scoring + selection + compaction, i.e. one LayerCache
// prefill update (snapkv policy, true window queries) of S tokens, for S in {1K, 4K, 16K, 64K},
// head_dim 128, window 32, 8 KV heads, 32 query heads (GQA group 4), budget min(1024, S/8).
// In the same program, the ceiling: OpenBLAS cblas_sgemm of the window-logit shape
// ([n_group*w] x head_dim times head_dim x S, once per KV head), the KV heads spread over the
// same parallel_for as the library's work, each sgemm single-threaded (the library pins OpenBLAS
// to one thread inside its tasks, ops/gemm.h), so both sides use every worker thread.
//
// Counters: FLOP/s counts the window-score work only: 2*n_heads*w*S*head_dim for the logits plus
// 5*n_heads*w*S for the softmax (max, subtract, exp, sum, scale: one each per element); the sgemm
// ceiling counts its 2*n_heads*w*S*head_dim. tokens/s is S per iteration.
//
//   build/bench/bench_snapkv_select --benchmark_repetitions=3
//   --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "bench_data.h"
#include "snapkv/kv/core/config.h"
#include "snapkv/kv/core/layer_cache.h"
#include "snapkv/kv/core/snapkv_score.h"
#include "snapkv/util/parallel.h"

namespace {

constexpr size_t kHeads = 32, kKvHeads = 8, kHeadDim = 128, kWindow = 32;
constexpr size_t kGroup = kHeads / kKvHeads;

using snapkv_bench::noise;  // values in [-1, 1)

double score_flops(size_t S) {
  const double rows = static_cast<double>(kHeads * kWindow), s = static_cast<double>(S);
  return 2.0 * rows * s * static_cast<double>(kHeadDim) + 5.0 * rows * s;
}

size_t budget_for(size_t S) {
  return std::min<size_t>(1024, S / 8);
}

// One full prefill update: validation, fp16 append of K and V, scoring (sgemm + softmax + GQA
// mean), top-k selection, compaction of both stores.
void BM_SnapKVPrefillUpdate(benchmark::State& state) {
  const size_t S = static_cast<size_t>(state.range(0));
  const std::vector<float> k = noise(kKvHeads * S * kHeadDim, 1);      // [n_kv][S][d]
  const std::vector<float> v = noise(kKvHeads * S * kHeadDim, 2);      // [n_kv][S][d]
  const std::vector<float> q = noise(kHeads * kWindow * kHeadDim, 3);  // [n_heads][w][d]
  snapkv::CacheConfig config;
  config.policy = snapkv::PolicyKind::snapkv;
  config.query_source = snapkv::QuerySource::queries;
  config.budget = budget_for(S);
  config.window = kWindow;
  // The settings this benchmark has always measured (one compressing update, no pooling), not
  // the library defaults (which compress at end_prompt()).
  config.pool = snapkv::PoolKind::none;
  config.kernel = 1;
  config.keep_window = false;
  config.chunk_mode = snapkv::ChunkMode::every_chunk;
  const snapkv::CacheDims dims{kHeads, kKvHeads, kHeadDim};
  const snapkv::Tensor3 kt{k.data(), kKvHeads, S, kHeadDim}, vt{v.data(), kKvHeads, S, kHeadDim};
  const snapkv::Tensor3 qt{q.data(), kHeads, kWindow, kHeadDim};
  for (auto _ : state) {
    snapkv::LayerCache cache(dims, config);
    cache.update(kt, vt, &qt, snapkv::UpdateKind::prefill);
    benchmark::DoNotOptimize(cache.positions(0).data());
    if (cache.size() != config.budget) state.SkipWithError("cache did not compress");
  }
  state.counters["FLOP/s"] =
      benchmark::Counter(score_flops(S), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["tokens/s"] =
      benchmark::Counter(static_cast<double>(S), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["budget"] = static_cast<double>(config.budget);
}

// The scoring step alone (window_scores over fp32 keys, all KV heads), to split the update's time.
void BM_SnapKVScoresOnly(benchmark::State& state) {
  const size_t S = static_cast<size_t>(state.range(0));
  const std::vector<float> k = noise(kKvHeads * S * kHeadDim, 1);
  const std::vector<float> q = noise(kHeads * kWindow * kHeadDim, 3);
  std::vector<float> scores(S);
  for (auto _ : state) {
    for (size_t h = 0; h < kKvHeads; ++h) {
      snapkv::window_scores(scores.data(), k.data() + h * S * kHeadDim, S, kHeadDim,
                            q.data() + h * kGroup * kWindow * kHeadDim, kGroup, kWindow, true);
      benchmark::DoNotOptimize(scores.data());
    }
  }
  state.counters["FLOP/s"] =
      benchmark::Counter(score_flops(S), benchmark::Counter::kIsIterationInvariantRate);
}

// Ceiling: the logits as one sgemm per KV head, C[n_group*w][S] = Q[n_group*w][d] * K[S][d]^T.
void BM_SgemmCeiling(benchmark::State& state) {
  const size_t S = static_cast<size_t>(state.range(0));
  const std::vector<float> k = noise(kKvHeads * S * kHeadDim, 1);
  const std::vector<float> q = noise(kHeads * kWindow * kHeadDim, 3);
  const size_t m = kGroup * kWindow;
  std::vector<float> c(kKvHeads * m * S);  // [kv head][n_group*w][S]
  openblas_set_num_threads(1);
  for (auto _ : state) {
    snapkv::parallel_for(kKvHeads, [&](size_t h) {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(m), static_cast<int>(S),
                  static_cast<int>(kHeadDim), 1.0f, q.data() + h * m * kHeadDim,
                  static_cast<int>(kHeadDim), k.data() + h * S * kHeadDim,
                  static_cast<int>(kHeadDim), 0.0f, c.data() + h * m * S, static_cast<int>(S));
    });
    benchmark::DoNotOptimize(c.data());
  }
  const double flops = 2.0 * static_cast<double>(kHeads * kWindow) * static_cast<double>(S) *
                       static_cast<double>(kHeadDim);
  state.counters["FLOP/s"] =
      benchmark::Counter(flops, benchmark::Counter::kIsIterationInvariantRate);
}

#define SNAPKV_SIZES ->Arg(1024)->Arg(4096)->Arg(16384)->Arg(65536)->Unit(benchmark::kMillisecond)
// CPU time is the whole process's (every worker thread), so the update and the ceiling can be
// compared by CPU seconds too when the machine is shared.
BENCHMARK(BM_SnapKVPrefillUpdate) SNAPKV_SIZES->UseRealTime()->MeasureProcessCPUTime();
BENCHMARK(BM_SnapKVScoresOnly) SNAPKV_SIZES->UseRealTime()->MeasureProcessCPUTime();
BENCHMARK(BM_SgemmCeiling) SNAPKV_SIZES->UseRealTime()->MeasureProcessCPUTime();

}  // namespace

BENCHMARK_MAIN();
