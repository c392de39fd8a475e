// The model's admission queue: at most max_running requests run at once; the next max_queued wait
// in first-in, first-out order; beyond that a request is refused at once.
//
// Promises: admit() returns a Ticket (running until the last copy is dropped) or throws HttpError
// 503 "server_busy" when the queue is full, 503 "queue_timeout" when the wait passed its deadline,
// 503 "shutting_down" after close(). A waiter whose deadline passes leaves the queue, so the ones
// behind it move up. Tickets are handed out in arrival order (FIFO).
// Leaves out: priorities, fairness between clients. Private to serve/.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>

namespace snapkv::serve {

class WorkQueue {
 public:
  WorkQueue(size_t max_running, size_t max_queued);

  class Ticket {
   public:
    explicit Ticket(WorkQueue& q) : queue_(q) {}
    ~Ticket() { queue_.release(); }
    Ticket(const Ticket&) = delete;
    Ticket& operator=(const Ticket&) = delete;

   private:
    WorkQueue& queue_;
  };

  std::shared_ptr<Ticket> admit(std::chrono::steady_clock::time_point deadline);
  void close();  // every waiter and later admit() gets 503 "shutting_down"

  size_t running() const;
  size_t queued() const;
  size_t max_queued() const { return max_queued_; }

 private:
  void release();

  const size_t max_running_, max_queued_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::list<uint64_t> waiting_;  // arrival numbers, oldest first
  uint64_t next_ = 0;
  size_t running_ = 0;
  bool closed_ = false;
};

}  // namespace snapkv::serve
