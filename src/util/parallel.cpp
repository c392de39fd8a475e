// parallel_for on the project's own worker pool (default), or on OpenMP when the environment
// variable SNAPKV_PARALLEL=omp (read once; to compare against the pool).
//
// The pool: num_threads() - 1 worker threads, started on first use and kept for the process; the
// calling thread works too. A call publishes a job (fn, n, an atomic next index: dynamic
// scheduling, one index at a time), bumps an epoch and returns once every index has run. Idle
// workers spin on the epoch for kSpinMicros before sleeping on it (a futex), so the back-to-back
// parallel regions of a decode step (about 7 products per layer) find them awake; a sleeping
// worker is woken only when one is known to sleep. The caller also spins, then sleeps, while the
// last indices finish. A job lives on the caller's stack: workers announce themselves in
// `active_` before they look at it, and the caller withdraws the job and waits for `active_` to
// drain before it returns.
// One job at a time: a parallel_for called from inside fn, or from a second thread while the pool
// runs another caller's job, runs inline on its thread (OpenMP's default for nested regions).
// Exceptions thrown by fn are rethrown (the first one) on the caller after every index has run.
#include "snapkv/util/parallel.h"

#include <omp.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#endif

namespace snapkv {
namespace {

std::atomic<int> g_threads{0};  // 0 = not set: use hardware concurrency

constexpr int64_t kSpinMicros = 100;  // how long an idle worker / a waiting caller spins

void cpu_relax() {
#if defined(__x86_64__) || defined(_M_X64)
  _mm_pause();
#else
  std::this_thread::yield();
#endif
}

int64_t now_micros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

bool use_openmp() {
  static const bool omp = [] {
    const char* env = std::getenv("SNAPKV_PARALLEL");
    return env != nullptr && std::strcmp(env, "omp") == 0;
  }();
  return omp;
}

thread_local bool t_in_parallel = false;  // a pool worker, or a caller inside its job

struct Job {
  const std::function<void(size_t)>* fn = nullptr;
  size_t n = 0;
  int max_workers = 0;  // workers with an id below this take part
  std::atomic<size_t> next{0};
  std::atomic<size_t> done{0};
  std::atomic<bool> caller_sleeping{false};
  std::mutex error_mutex;
  std::exception_ptr first_error;

  // Claims and runs indices until none is left.
  void work() {
    for (size_t i = next.fetch_add(1); i < n; i = next.fetch_add(1)) {
      try {
        (*fn)(i);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (!first_error) first_error = std::current_exception();
      }
      if (done.fetch_add(1) + 1 == n && caller_sleeping.load()) done.notify_all();
    }
  }
};

class Pool {
 public:
  // Runs the job on the caller and n_workers workers; false (nothing run) when the pool is busy.
  bool run(size_t n, int n_workers, const std::function<void(size_t)>& fn) {
    std::unique_lock<std::mutex> lock(busy_, std::try_to_lock);
    if (!lock.owns_lock()) return false;
    while (static_cast<int>(workers_.size()) < n_workers) {
      const int id = static_cast<int>(workers_.size());
      workers_.emplace_back([this, id] { worker_main(id); });
      workers_.back().detach();  // the pool lives as long as the process
    }
    Job job;
    job.fn = &fn;
    job.n = n;
    job.max_workers = n_workers;
    current_.store(&job);
    epoch_.fetch_add(1);
    if (sleepers_.load() > 0) epoch_.notify_all();
    t_in_parallel = true;
    job.work();
    t_in_parallel = false;
    wait_done(job);
    current_.store(nullptr);
    while (active_.load() != 0) cpu_relax();  // workers that may still hold &job
    if (job.first_error) std::rethrow_exception(job.first_error);
    return true;
  }

 private:
  static void wait_done(Job& job) {
    const int64_t spin_until = now_micros() + kSpinMicros;
    size_t d = job.done.load();
    while (d != job.n && now_micros() < spin_until) {
      for (int k = 0; k < 64 && d != job.n; ++k) {
        cpu_relax();
        d = job.done.load();
      }
    }
    if (d == job.n) return;
    job.caller_sleeping.store(true);
    for (d = job.done.load(); d != job.n; d = job.done.load()) job.done.wait(d);
  }

  void worker_main(int id) {
    t_in_parallel = true;
    uint32_t seen = 0;
    for (;;) {
      seen = wait_epoch(seen);
      active_.fetch_add(1);
      Job* job = current_.load();
      if (job != nullptr && id < job->max_workers) job->work();
      active_.fetch_sub(1);
    }
  }

  // Returns the epoch once it differs from `seen`: spinning first, then asleep.
  uint32_t wait_epoch(uint32_t seen) {
    const int64_t spin_until = now_micros() + kSpinMicros;
    uint32_t e = epoch_.load();
    while (e == seen && now_micros() < spin_until) {
      for (int k = 0; k < 64 && e == seen; ++k) {
        cpu_relax();
        e = epoch_.load();
      }
    }
    if (e != seen) return e;
    sleepers_.fetch_add(1);
    for (e = epoch_.load(); e == seen; e = epoch_.load()) epoch_.wait(seen);
    sleepers_.fetch_sub(1);
    return e;
  }

  std::mutex busy_;  // held by the caller whose job runs
  std::vector<std::thread> workers_;
  std::atomic<Job*> current_{nullptr};
  std::atomic<uint32_t> epoch_{0};
  std::atomic<int> sleepers_{0};
  std::atomic<int> active_{0};
};

Pool& pool() {
  static Pool* const p = new Pool;  // never destroyed: detached workers may still wait on it
  return *p;
}

void parallel_for_omp(size_t n, int threads, const std::function<void(size_t)>& fn) {
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

}  // namespace

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
  if (n <= 1 || threads <= 1 || t_in_parallel) {
    for (size_t i = 0; i < n; ++i) fn(i);
    return;
  }
  if (use_openmp()) {
    parallel_for_omp(n, threads, fn);
    return;
  }
  const int n_workers = static_cast<int>(std::min<size_t>(static_cast<size_t>(threads), n)) - 1;
  if (!pool().run(n, n_workers, fn)) {
    for (size_t i = 0; i < n; ++i) fn(i);  // another caller's job holds the pool
  }
}

}  // namespace snapkv
