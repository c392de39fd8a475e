// The read loop of the bandwidth measurements (bench_read_bandwidth, bench_gemv_decode): a buffer
// of words summed by one parallel_for slice per thread, each slice contiguous, as a decode reads
// its weights. Nothing is written but one partial sum per slice.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "snapkv/util/parallel.h"

namespace snapkv_bench {

// Sum of `n` words with four independent accumulators (the loads, not the adds, are the limit).
inline uint64_t sum_words(const uint64_t* p, size_t n) {
  uint64_t a = 0, b = 0, c = 0, d = 0;
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    a += p[i];
    b += p[i + 1];
    c += p[i + 2];
    d += p[i + 3];
  }
  for (; i < n; ++i) a += p[i];
  return a + b + c + d;
}

// Sums `words` [n_words] in `n_slices` contiguous slices over parallel_for; `partial` is scratch
// (resized to one cache line per slice, so the slices' sums never share a line).
inline uint64_t sum_slices(const uint64_t* words, size_t n_words, size_t n_slices,
                           std::vector<uint64_t>& partial) {
  partial.assign(n_slices * 8, 0);
  snapkv::parallel_for(n_slices, [&](size_t s) {
    const size_t begin = n_words * s / n_slices, end = n_words * (s + 1) / n_slices;
    partial[s * 8] = sum_words(words + begin, end - begin);
  });
  uint64_t total = 0;
  for (size_t s = 0; s < n_slices; ++s) total += partial[s * 8];
  return total;
}

}  // namespace snapkv_bench
