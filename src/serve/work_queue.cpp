// The model's admission queue (serve/work_queue.h).
#include "serve/work_queue.h"

#include "serve/requests.h"

namespace snapkv::serve {

WorkQueue::WorkQueue(size_t max_running, size_t max_queued)
    : max_running_(max_running), max_queued_(max_queued) {}

std::shared_ptr<WorkQueue::Ticket> WorkQueue::admit(
    std::chrono::steady_clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (closed_) throw HttpError(503, "shutting_down", "the server is shutting down");
  if (waiting_.empty() && running_ < max_running_) {
    ++running_;
    return std::make_shared<Ticket>(*this);
  }
  if (waiting_.size() >= max_queued_) {
    throw HttpError(503, "server_busy",
                    std::to_string(running_) + " requests running and " +
                        std::to_string(waiting_.size()) + " queued (the limits); retry later");
  }
  const uint64_t me = next_++;
  const auto it = waiting_.insert(waiting_.end(), me);
  const bool admitted = cv_.wait_until(lock, deadline, [&] {
    return closed_ || (waiting_.front() == me && running_ < max_running_);
  });
  waiting_.erase(it);
  cv_.notify_all();  // the next waiter may now be at the front
  if (closed_) throw HttpError(503, "shutting_down", "the server is shutting down");
  if (!admitted) {
    throw HttpError(503, "queue_timeout",
                    "the request waited in the queue past its timeout; retry later");
  }
  ++running_;
  return std::make_shared<Ticket>(*this);
}

void WorkQueue::release() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    --running_;
  }
  cv_.notify_all();
}

void WorkQueue::close() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    closed_ = true;
  }
  cv_.notify_all();
}

size_t WorkQueue::running() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return running_;
}

size_t WorkQueue::queued() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return waiting_.size();
}

}  // namespace snapkv::serve
