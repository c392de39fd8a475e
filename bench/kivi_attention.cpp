// Decode attention per step over the cache codecs (fp16, kivi4, kivi2, and at 16K / 64K rows also
// kivi4r, kivi2r, kitty, kivi42, kivi32, kivimix; zipcache and gear at 16K, and at 64K with
// SNAPKV_BENCH_SLOW_64K=1), against fp16 and the machine's memory copy bandwidth measured in the
// same run. The figures of record:
//   --benchmark_filter='BM_MemcpyBandwidth|BM_DecodeAttend/codec:([0-5]|9|12|13)/'
// (codec numbers as CodecKind: 0 fp16, 1 kivi2, 2 kivi4, 3 kivi2r, 4 kivi4r, 5 kitty, 9 kivi42,
// 12 kivi32, 13 kivimix);
// BM_DecodeAttendOne is BM_DecodeAttend on one thread in CPU time (kernel comparisons on a shared
// machine);
// BM_DecodeHalf splits BM_DecodeStores into its key and value halves on one thread (CPU time).
//
// Shape: 8 KV heads, 32 query heads (GQA groups of 4), head_dim 128, one query per head (a decode
// step), 4K / 16K / 64K retained rows. Two paths:
//   BM_DecodeStores: per KV head, one dot_rows + softmax + accumulate_rows for the 4 query heads
//                    of its group (the whole-store, two-pass RowStore interface); threads:1 runs
//                    the heads on the calling thread, threads:0 spreads them over parallel_for;
//   BM_DecodeAttend: LayerCache::attend with the step's own k, v (what the engine calls: the
//                    fused one-pass span attention where the codec has span kernels).
// Counters: bytes_per_step = key + value bytes of the stores (all read once per step; KV bytes),
// GB/s = bytes_per_step / time per step, copy_ratio = GB/s over the copy bandwidth,
// vs_fp16 = the fp16 cache's time per step on the same path, rows and threads (median of its
// repetitions, measured earlier in this run) over this codec's: above 1 the codec is faster
// than fp16, below 1 slower, and slower_than_fp16 is then 1. The copy bandwidth
// (BM_MemcpyBandwidth, and the copy_GBps counter) is memcpy of a 256 MiB buffer on one thread
// counted as bytes read + bytes written per second (the STREAM convention), median of 3 timed
// copies at start-up. On a shared, loaded machine wall time includes waiting for a core, so the
// single-thread runs also time the calling thread's CPU time (cpu_ms_per_step, cpu_GBps,
// cpu_copy_ratio against the copy's own CPU-time rate); quote those when the load is high.
//
// Run: build/bench/bench_kivi_attention --benchmark_repetitions=3
//        --benchmark_report_aggregates_only=true   (medians are the figures to quote)
// The decode benchmarks set their own minimum times (0.3 s; BM_DecodeHalf 0.2 s), which the
// library lets take precedence over --benchmark_min_time: that flag changes only
// BM_MemcpyBandwidth. Repeat with --benchmark_repetitions instead.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <map>
#include <memory>
#include <tuple>
#include <utility>
#include <vector>

#include "snapkv/kv/core/layer_cache.h"
#include "snapkv/util/parallel.h"

namespace {

using namespace snapkv;

constexpr size_t kKvHeads = 8, kHeads = 32, kHeadDim = 128, kGroup = kHeads / kKvHeads;
constexpr size_t kCopyBytes = size_t{256} << 20;

// Cheap deterministic N(0,1)-ish values (sum of 4 uniforms, rescaled) with a few outlier
// channels in the keys, as real keys have; generation speed matters at 64K rows.
struct Noise {
  uint64_t s;
  float next() {
    float sum = 0;
    for (int i = 0; i < 4; ++i) {
      s ^= s << 13;
      s ^= s >> 7;
      s ^= s << 17;
      sum += static_cast<float>(s >> 40) * (1.0f / 16777216.0f);
    }
    return (sum - 2.0f) * 1.7320508f;  // variance of a sum of 4 U(0,1) is 1/3
  }
};

// Seconds of CPU time used by the calling thread.
double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

struct CopyRates {
  double wall_gbps, cpu_gbps;
};

const CopyRates& copy_bandwidth() {
  static const CopyRates rates = [] {
    std::vector<char> src(kCopyBytes, 1), dst(kCopyBytes, 0);
    std::memcpy(dst.data(), src.data(), kCopyBytes);  // fault the pages in
    std::vector<double> wall, cpu;
    for (int rep = 0; rep < 3; ++rep) {
      const auto t0 = std::chrono::steady_clock::now();
      const double c0 = thread_cpu_seconds();
      std::memcpy(dst.data(), src.data(), kCopyBytes);
      benchmark::DoNotOptimize(dst.data());
      const double c = thread_cpu_seconds() - c0;
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      wall.push_back(2.0 * double(kCopyBytes) / s / 1e9);
      cpu.push_back(2.0 * double(kCopyBytes) / c / 1e9);
    }
    std::sort(wall.begin(), wall.end());
    std::sort(cpu.begin(), cpu.end());
    return CopyRates{wall[1], cpu[1]};
  }();
  return rates;
}

// memcpy of 256 MiB on one thread; bytes_per_second counts read + written bytes.
void BM_MemcpyBandwidth(benchmark::State& state) {
  std::vector<char> src(kCopyBytes, 1), dst(kCopyBytes, 0);
  std::memcpy(dst.data(), src.data(), kCopyBytes);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), kCopyBytes);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(2 * kCopyBytes));
}

// One cache per (codec, rows), built once and shared by both benchmarks.
const LayerCache& cache_for(CodecKind codec, size_t rows) {
  static std::map<std::pair<int, size_t>, std::unique_ptr<LayerCache>> caches;
  auto& slot = caches[{static_cast<int>(codec), rows}];
  if (!slot) {
    CacheConfig cfg;
    cfg.policy = PolicyKind::full;
    cfg.codec = codec;
    slot = std::make_unique<LayerCache>(CacheDims{kHeads, kKvHeads, kHeadDim}, cfg);
    Noise noise{0x9E3779B97F4A7C15ull + rows};
    const size_t chunk = 4096;
    std::vector<float> k(kKvHeads * chunk * kHeadDim), v(k.size());
    // rows - 1 prompt rows in chunks, then one decode row: the stores quantize the rows of an
    // append when the next append arrives, so the decode row leaves < R rows in fp16 (as in a
    // real decode step)
    for (size_t done = 0; done < rows; done += chunk) {
      const size_t s = done + chunk >= rows ? rows - done - 1 : chunk;
      for (size_t i = 0; i < kKvHeads * s * kHeadDim; ++i) {
        const float x = noise.next();
        k[i] = i % 16 == 3 ? 12.0f + 5.0f * x : x;
        v[i] = noise.next();
      }
      slot->update({k.data(), kKvHeads, s, kHeadDim}, {v.data(), kKvHeads, s, kHeadDim}, nullptr,
                   UpdateKind::prefill);
    }
    slot->update({k.data(), kKvHeads, 1, kHeadDim}, {v.data(), kKvHeads, 1, kHeadDim}, nullptr,
                 UpdateKind::decode);
  }
  return *slot;
}

// The fp16 cache's runs per (path, rows, threads) as (iterations, seconds per step), filled as
// they finish (they are registered before the other codecs of the same rows). The library calls
// a benchmark with growing iteration counts until it runs long enough; only those last runs are
// reported, one per repetition, so a codec is compared with the median over the fp16 runs of at
// least half the largest iteration count (the reported ones), not with the last run alone.
using Fp16Runs = std::vector<std::pair<int64_t, double>>;
std::map<std::tuple<int, size_t, int>, Fp16Runs>& fp16_runs() {
  static std::map<std::tuple<int, size_t, int>, Fp16Runs> runs;
  return runs;
}

double fp16_step_seconds(const Fp16Runs& runs) {
  int64_t most = 0;
  for (const auto& r : runs) most = std::max(most, r.first);
  std::vector<double> s;
  for (const auto& r : runs) {
    if (2 * r.first >= most) s.push_back(r.second);
  }
  std::sort(s.begin(), s.end());
  const size_t n = s.size();
  return n % 2 == 1 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
}

// vs_fp16 / slower_than_fp16 of one run; path: 0 stores, 1 attend.
void compare_with_fp16(benchmark::State& state, int path, double step_seconds) {
  const auto codec = static_cast<CodecKind>(state.range(0));
  const std::tuple<int, size_t, int> key{path, static_cast<size_t>(state.range(1)),
                                         static_cast<int>(state.range(2))};
  if (codec == CodecKind::fp16) {
    fp16_runs()[key].emplace_back(static_cast<int64_t>(state.iterations()), step_seconds);
    return;
  }
  const auto it = fp16_runs().find(key);
  if (it == fp16_runs().end()) return;  // fp16 filtered out of this run
  const double fp16 = fp16_step_seconds(it->second);
  state.counters["vs_fp16"] = fp16 / step_seconds;
  state.counters["slower_than_fp16"] = step_seconds > fp16 ? 1.0 : 0.0;
}

size_t store_bytes(const LayerCache& c) {
  return c.stats().bytes_stored;
}

void set_counters(benchmark::State& state, size_t bytes, double seconds, double cpu_seconds) {
  const double iters = double(state.iterations());
  const double gbps = double(bytes) / (seconds / iters) / 1e9;
  const CopyRates& copy = copy_bandwidth();
  state.counters["bytes_per_step"] = double(bytes);
  state.counters["ms_per_step"] = seconds / iters * 1e3;
  state.counters["GB/s"] = gbps;
  state.counters["copy_GBps"] = copy.wall_gbps;
  state.counters["copy_ratio"] = gbps / copy.wall_gbps;
  if (cpu_seconds > 0) {
    const double cpu_gbps = double(bytes) / (cpu_seconds / iters) / 1e9;
    state.counters["cpu_ms_per_step"] = cpu_seconds / iters * 1e3;
    state.counters["cpu_GBps"] = cpu_gbps;
    state.counters["cpu_copy_GBps"] = copy.cpu_gbps;
    state.counters["cpu_copy_ratio"] = cpu_gbps / copy.cpu_gbps;
  }
}

// One decode step of KV head h: scores [kGroup][rows] scratch, out [kGroup][head_dim].
void decode_head(const LayerCache& cache, size_t h, const float* q, float* scores, float* out) {
  const size_t rows = cache.size();
  const float scale = 1.0f / std::sqrt(float(kHeadDim));
  cache.keys(h).dot_rows(scores, q, kGroup);
  for (size_t j = 0; j < kGroup; ++j) {
    float* l = scores + j * rows;
    float mx = -INFINITY, total = 0;
    for (size_t i = 0; i < rows; ++i) mx = std::max(mx, l[i] *= scale);
    for (size_t i = 0; i < rows; ++i) total += (l[i] = std::exp(l[i] - mx));
    for (size_t i = 0; i < rows; ++i) l[i] /= total;
  }
  std::fill(out, out + kGroup * kHeadDim, 0.0f);
  cache.values(h).accumulate_rows(out, scores, kGroup);
}

void BM_DecodeStores(benchmark::State& state) {
  const auto codec = static_cast<CodecKind>(state.range(0));
  const auto rows = static_cast<size_t>(state.range(1));
  const bool one_thread = state.range(2) == 1;
  const LayerCache& cache = cache_for(codec, rows);
  copy_bandwidth();
  Noise noise{7};
  std::vector<float> q(kHeads * kHeadDim), out(kHeads * kHeadDim);
  for (float& x : q) x = noise.next() * 0.5f;
  std::vector<std::vector<float>> scores(kKvHeads, std::vector<float>(kGroup * rows));
  double seconds = 0, cpu_seconds = 0;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    const double c0 = thread_cpu_seconds();
    auto head = [&](size_t h) {
      decode_head(cache, h, q.data() + h * kGroup * kHeadDim, scores[h].data(),
                  out.data() + h * kGroup * kHeadDim);
    };
    if (one_thread) {
      for (size_t h = 0; h < kKvHeads; ++h) head(h);
    } else {
      parallel_for(kKvHeads, head);
    }
    benchmark::DoNotOptimize(out.data());
    cpu_seconds += thread_cpu_seconds() - c0;
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  set_counters(state, store_bytes(cache), seconds, one_thread ? cpu_seconds : 0.0);
  compare_with_fp16(state, 0, seconds / double(state.iterations()));
}

void BM_DecodeAttend(benchmark::State& state) {
  const auto codec = static_cast<CodecKind>(state.range(0));
  const auto rows = static_cast<size_t>(state.range(1));
  const LayerCache& cache = cache_for(codec, rows);
  copy_bandwidth();
  Noise noise{8};
  std::vector<float> q(kHeads * kHeadDim), k(kKvHeads * kHeadDim), v(kKvHeads * kHeadDim);
  for (float& x : q) x = noise.next() * 0.5f;
  for (float& x : k) x = noise.next();
  for (float& x : v) x = noise.next();
  std::vector<float> out(kHeads * kHeadDim);
  double seconds = 0;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    cache.attend(out.data(), {q.data(), kHeads, 1, kHeadDim}, {k.data(), kKvHeads, 1, kHeadDim},
                 {v.data(), kKvHeads, 1, kHeadDim});
    benchmark::DoNotOptimize(out.data());
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  set_counters(state, store_bytes(cache), seconds, 0.0);
  compare_with_fp16(state, 1, seconds / double(state.iterations()));
}

// BM_DecodeAttend on one thread (parallel_for inline), timed in the calling thread's CPU time
// (cpu_ms_per_step): the figure for kernel comparisons on a loaded machine.
void BM_DecodeAttendOne(benchmark::State& state) {
  const auto codec = static_cast<CodecKind>(state.range(0));
  const auto rows = static_cast<size_t>(state.range(1));
  const LayerCache& cache = cache_for(codec, rows);
  Noise noise{8};
  std::vector<float> q(kHeads * kHeadDim), k(kKvHeads * kHeadDim), v(kKvHeads * kHeadDim);
  for (float& x : q) x = noise.next() * 0.5f;
  for (float& x : k) x = noise.next();
  for (float& x : v) x = noise.next();
  std::vector<float> out(kHeads * kHeadDim);
  const int threads = num_threads();
  set_num_threads(1);
  double cpu_seconds = 0;
  for (auto _ : state) {
    const double c0 = thread_cpu_seconds();
    cache.attend(out.data(), {q.data(), kHeads, 1, kHeadDim}, {k.data(), kKvHeads, 1, kHeadDim},
                 {v.data(), kKvHeads, 1, kHeadDim});
    benchmark::DoNotOptimize(out.data());
    cpu_seconds += thread_cpu_seconds() - c0;
  }
  set_num_threads(threads);
  state.counters["cpu_ms_per_step"] = cpu_seconds / double(state.iterations()) * 1e3;
  state.counters["cpu_ns_per_row"] =
      cpu_seconds / double(state.iterations()) / double(rows * kKvHeads) * 1e9;
}

// The two halves of BM_DecodeStores on one thread, CPU time: keys (dot_rows of every head's
// group) or values (accumulate_rows with uniform weights), to see where a codec's time goes.
// half: 0 keys, 1 values.
void BM_DecodeHalf(benchmark::State& state) {
  const auto codec = static_cast<CodecKind>(state.range(0));
  const auto rows = static_cast<size_t>(state.range(1));
  const bool keys = state.range(2) == 0;
  const LayerCache& cache = cache_for(codec, rows);
  Noise noise{7};
  std::vector<float> q(kHeads * kHeadDim), out(kHeads * kHeadDim);
  for (float& x : q) x = noise.next() * 0.5f;
  std::vector<float> scores(kGroup * rows, 1.0f / float(rows));
  double cpu_seconds = 0;
  for (auto _ : state) {
    const double c0 = thread_cpu_seconds();
    for (size_t h = 0; h < kKvHeads; ++h) {
      if (keys) {
        cache.keys(h).dot_rows(scores.data(), q.data() + h * kGroup * kHeadDim, kGroup);
      } else {
        cache.values(h).accumulate_rows(out.data() + h * kGroup * kHeadDim, scores.data(), kGroup);
      }
    }
    benchmark::DoNotOptimize(out.data());
    benchmark::DoNotOptimize(scores.data());
    cpu_seconds += thread_cpu_seconds() - c0;
  }
  state.counters["cpu_ms_per_step"] = cpu_seconds / double(state.iterations()) * 1e3;
  state.counters["cpu_ns_per_row"] =
      cpu_seconds / double(state.iterations()) / double(rows * kKvHeads) * 1e9;
}

bool slow_codecs_at_64k() {
  const char* v = std::getenv("SNAPKV_BENCH_SLOW_64K");
  return v != nullptr && std::strcmp(v, "1") == 0;
}

void decode_args(benchmark::internal::Benchmark* b, bool with_threads) {
  b->ArgNames({"codec", "rows", "threads"});
  for (size_t rows : {size_t{4096}, size_t{16384}, size_t{65536}}) {
    for (CodecKind c : {CodecKind::fp16, CodecKind::kivi4, CodecKind::kivi2, CodecKind::kivi4r,
                        CodecKind::kivi2r, CodecKind::kitty, CodecKind::kivi42, CodecKind::kivi32,
                        CodecKind::kivimix, CodecKind::zipcache, CodecKind::gear}) {
      const bool newer = c != CodecKind::fp16 && c != CodecKind::kivi4 && c != CodecKind::kivi2;
      if (newer && rows < 16384) continue;  // the newer codecs at 16K and 64K rows
      // zipcache and gear at 16K only: building their 16K caches alone takes minutes (gear
      // computes its low-rank and sparse corrections at every residual flush, about 3.5 min for
      // 8 heads x 16K rows on a loaded 2-core machine; zipcache routes every row by saliency),
      // and their steps run 10-100x fp16's (whole-store decoding, no span kernels);
      // SNAPKV_BENCH_SLOW_64K=1 adds them at 64K rows too (expect tens of minutes)
      const bool slow_build = c == CodecKind::zipcache || c == CodecKind::gear;
      if (slow_build && rows > 16384 && !slow_codecs_at_64k()) continue;
      for (int64_t threads : {int64_t{1}, int64_t{0}}) {
        if (!with_threads && threads == 1) continue;
        b->Args({static_cast<int64_t>(c), static_cast<int64_t>(rows), threads});
      }
    }
  }
  b->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(0.3);
}

BENCHMARK(BM_MemcpyBandwidth)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_DecodeStores)->Apply([](auto* b) { decode_args(b, true); });
BENCHMARK(BM_DecodeAttend)->Apply([](auto* b) { decode_args(b, false); });
BENCHMARK(BM_DecodeAttendOne)
    ->ArgNames({"codec", "rows"})
    ->ArgsProduct({{int64_t(CodecKind::fp16), int64_t(CodecKind::kivi4), int64_t(CodecKind::kivi2)},
                   {16384, 65536}})
    ->Unit(benchmark::kMillisecond)
    ->MinTime(0.3);
BENCHMARK(BM_DecodeHalf)
    ->ArgNames({"codec", "rows", "half"})
    ->ArgsProduct({{int64_t(CodecKind::fp16), int64_t(CodecKind::kivi4), int64_t(CodecKind::kivi2),
                    int64_t(CodecKind::kitty)},
                   {16384},
                   {0, 1}})
    ->Unit(benchmark::kMillisecond)
    ->MinTime(0.2);

}  // namespace

BENCHMARK_MAIN();
