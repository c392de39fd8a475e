// parallel_for on OpenMP. Exceptions are captured per call and rethrown on the caller's thread.
#include "snapkv/util/parallel.h"

#include <omp.h>

#include <atomic>
#include <exception>
#include <mutex>
#include <thread>

namespace snapkv {
namespace {
std::atomic<int> g_threads{0};  // 0 = not set: use hardware concurrency
}

void set_num_threads(int n) {
  g_threads.store(n > 0 ? n : 0);
}

int num_threads() {
  const int n = g_threads.load();
  if (n > 0) return n;
  const unsigned hw = std::thread::hardware_concurrency();
  return hw > 0 ? static_cast<int>(hw) : 1;
}

void parallel_for(size_t n, const std::function<void(size_t)>& fn) {
  const int threads = num_threads();
  if (n <= 1 || threads <= 1) {
    for (size_t i = 0; i < n; ++i) fn(i);
    return;
  }
  std::exception_ptr first_error;
  std::mutex error_mutex;
  const long long count = static_cast<long long>(n);
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
  for (long long i = 0; i < count; ++i) {
    try {
      fn(static_cast<size_t>(i));
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mutex);
      if (!first_error) first_error = std::current_exception();
    }
  }
  if (first_error) std::rethrow_exception(first_error);
}

}  // namespace snapkv
