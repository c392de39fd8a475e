// The server's continuous batching of decode steps (serve/decode_batcher.h).
#include "serve/decode_batcher.h"

#include <algorithm>
#include <utility>

#include "serve/requests.h"

namespace snapkv::serve {

DecodeBatcher::DecodeBatcher() : thread_([this] { loop(); }) {}

DecodeBatcher::~DecodeBatcher() {
  close();
  thread_.join();
}

DecodeBatcher::Member::~Member() {
  {
    std::lock_guard<std::mutex> lock(batcher_.mutex_);
    --batcher_.members_;
  }
  batcher_.work_cv_.notify_all();  // a step waiting for this member's token can go
}

std::unique_ptr<DecodeBatcher::Member> DecodeBatcher::join() {
  std::lock_guard<std::mutex> lock(mutex_);
  ++members_;
  return std::make_unique<Member>(*this);
}

std::vector<float> DecodeBatcher::decode(LlamaSession& session, int32_t token) {
  LlamaSession* const sessions[] = {&session};
  return std::move(decode(sessions, std::span<const int32_t>(&token, 1)).front());
}

std::vector<std::vector<float>> DecodeBatcher::decode(std::span<LlamaSession* const> sessions,
                                                      std::span<const int32_t> tokens) {
  std::vector<Pending> mine(sessions.size());
  for (size_t i = 0; i < sessions.size(); ++i) {
    mine[i].session = sessions[i];
    mine[i].token = tokens[i];
  }
  std::unique_lock<std::mutex> lock(mutex_);
  if (closed_) throw HttpError(503, "shutting_down", "the server is shutting down");
  for (Pending& p : mine) pending_.push_back(&p);
  work_cv_.notify_all();
  done_cv_.wait(lock, [&] {
    return std::all_of(mine.begin(), mine.end(), [](const Pending& p) { return p.done; });
  });
  std::vector<std::vector<float>> out;
  for (Pending& p : mine) {
    if (p.error) std::rethrow_exception(p.error);
    out.push_back(std::move(p.logits));
  }
  return out;
}

void DecodeBatcher::close() {
  std::vector<Pending*> left;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    closed_ = true;
    left.swap(pending_);
    for (Pending* p : left) {
      p->error =
          std::make_exception_ptr(HttpError(503, "shutting_down", "the server is shutting down"));
      p->done = true;
    }
  }
  work_cv_.notify_all();
  done_cv_.notify_all();
}

size_t DecodeBatcher::steps() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return steps_;
}

size_t DecodeBatcher::rows() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return rows_;
}

void DecodeBatcher::loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    work_cv_.wait(lock, [&] { return closed_ || !pending_.empty(); });
    if (closed_) return;
    // Every running sequence's token, or what came within the grace period.
    const auto deadline = std::chrono::steady_clock::now() + kGrace;
    work_cv_.wait_until(lock, deadline, [&] { return closed_ || pending_.size() >= members_; });
    if (closed_) return;
    std::vector<Pending*> batch;
    batch.swap(pending_);
    lock.unlock();
    run_step(batch);
    lock.lock();
    ++steps_;
    rows_ += batch.size();
    for (Pending* p : batch) p->done = true;
    done_cv_.notify_all();
  }
}

void DecodeBatcher::run_step(std::vector<Pending*>& batch) {
  std::vector<LlamaSession*> sessions;
  std::vector<int32_t> tokens;
  for (const Pending* p : batch) {
    sessions.push_back(p->session);
    tokens.push_back(p->token);
  }
  try {
    const std::vector<float> all = LlamaSession::decode_batch(sessions, tokens);
    const size_t n_vocab = all.size() / batch.size();
    for (size_t b = 0; b < batch.size(); ++b) {
      const auto first = all.begin() + static_cast<std::ptrdiff_t>(b * n_vocab);
      batch[b]->logits.assign(first, first + static_cast<std::ptrdiff_t>(n_vocab));
    }
  } catch (const std::exception&) {
    for (Pending* p : batch) p->error = std::current_exception();
  }
}

}  // namespace snapkv::serve
