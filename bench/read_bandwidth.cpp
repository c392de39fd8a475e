// Read bandwidth of main memory: a 1 GiB buffer (far beyond any last-level cache) summed by T
// threads over snapkv's parallel_for seam, each thread one contiguous slice, as decode reads its
// weights and KV rows. bytes_per_second counts bytes read (nothing is written). This is the
// denominator of a decode's memory-traffic bound (scripts/bench_longctx.sh): a decode step cannot
// be faster than (weight bytes + KV bytes it reads) / this bandwidth.
//
// BM_ReadBandwidthHugePages reads the same amount from a region on 2 MiB huge pages
// (util/huge_pages.h), as the model's weights are when the page cache holds the file in 2 MiB
// folios or with SNAPKV_WEIGHTS=huge (LlamaModel::weight_storage):
// on 4 KiB pages a stream pays a TLB walk every 4 KiB, so this is the higher of the two rates on
// most machines, and the one a bound on a huge-page decode should use (scripts/bench_longctx.sh
// takes the larger).
//
//   build/bench/bench_read_bandwidth --benchmark_filter='BM_ReadBandwidth(HugePages)?/2/'
//
// Arguments: threads 1, 2, 4, 8 (those up to the hardware's concurrency).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <thread>
#include <vector>

#include "read_words.h"
#include "snapkv/util/parallel.h"
#include "util/huge_pages.h"

namespace {

constexpr size_t kReadBytes = size_t{1} << 30;

// Sums `words` [n_words] (every word 1) with `threads` threads, timed per pass.
void read_words(benchmark::State& state, const uint64_t* words, size_t n_words) {
  const int threads = static_cast<int>(state.range(0));
  const int saved = snapkv::num_threads();
  snapkv::set_num_threads(threads);
  const size_t n_slices = static_cast<size_t>(threads);
  std::vector<uint64_t> partial;
  auto read_all = [&] { return snapkv_bench::sum_slices(words, n_words, n_slices, partial); };
  if (read_all() != n_words) state.SkipWithError("read_bandwidth: wrong sum");
  for (auto _ : state) {
    uint64_t total = read_all();
    benchmark::DoNotOptimize(total);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) *
                          static_cast<int64_t>(kReadBytes));
  state.counters["threads"] = threads;
  snapkv::set_num_threads(saved);
}

void BM_ReadBandwidth(benchmark::State& state) {
  const size_t n_words = kReadBytes / sizeof(uint64_t);
  std::vector<uint64_t> buffer(n_words, 1);  // written once: every page is resident
  read_words(state, buffer.data(), n_words);
}

void BM_ReadBandwidthHugePages(benchmark::State& state) {
  const size_t n_words = kReadBytes / sizeof(uint64_t);
  snapkv::HugePageRegion region = snapkv::HugePageRegion::allocate(kReadBytes);
  auto* words = reinterpret_cast<uint64_t*>(region.data());
  std::fill(words, words + n_words, uint64_t{1});  // every page resident
  state.counters["anon_huge_MiB"] =
      static_cast<double>(snapkv::anon_huge_page_bytes()) / (1 << 20);  // granted, process-wide
  read_words(state, words, n_words);
}

void thread_args(benchmark::internal::Benchmark* b) {
  const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  for (int t : {1, 2, 4, 8}) {
    if (static_cast<unsigned>(t) <= hw) b->Arg(t);
  }
}

BENCHMARK(BM_ReadBandwidth)->Apply(thread_args)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_ReadBandwidthHugePages)
    ->Apply(thread_args)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
