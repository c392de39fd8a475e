// The one threading seam: parallel_for over an index range. Backed by OpenMP inside
// src/util/parallel.cpp; no other file uses pragmas or threads directly.
#pragma once

#include <cstddef>
#include <functional>

namespace snapkv {

// Calls fn(i) for every i in [0, n), spread over the worker threads. fn must be safe to call
// concurrently for distinct i. Exceptions thrown by fn are rethrown (the first one) after all
// workers finish. Runs inline when n <= 1 or only one thread is configured.
void parallel_for(size_t n, const std::function<void(size_t)>& fn);

// Number of worker threads used by parallel_for (default: hardware concurrency).
void set_num_threads(int n);
int num_threads();

}  // namespace snapkv
