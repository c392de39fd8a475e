// The one threading seam: parallel_for over an index range. Backed by the project's own worker
// pool inside src/util/parallel.cpp (workers spin briefly between calls, then sleep, so the
// back-to-back calls of a decode step need no wake-up; bench_gemv_decode BM_ParallelForEmpty
// times one call), or by OpenMP when SNAPKV_PARALLEL=omp (to compare); no other file uses pragmas
// or threads directly.
#pragma once

#include <cstddef>
#include <functional>

namespace snapkv {

// Calls fn(i) for every i in [0, n), spread over the worker threads (dynamic: each thread takes
// the next unclaimed index). fn must be safe to call concurrently for distinct i. Exceptions
// thrown by fn are rethrown (the first one) after all workers finish. Runs inline when n <= 1,
// only one thread is configured, it is called from inside fn (nested), or the pool is running
// another thread's call.
void parallel_for(size_t n, const std::function<void(size_t)>& fn);

// Number of worker threads used by parallel_for (default: hardware concurrency).
void set_num_threads(int n);
int num_threads();

}  // namespace snapkv
