// Continuous batching of the server's decode steps: the running requests' sequences advance
// together, one LlamaSession::decode_batch per step on the batcher's own thread, instead of one
// decode() each.
//
// A request's handler thread prefills its prompt on its own (so running sequences keep
// stepping meanwhile), then join()s the running set and loops: sample (model/generation.h
// Generator), hand the token to decode(), which blocks until the step that holds it has run and
// returns the sequence's logits. A step starts once every member has handed in its token, or
// kGrace after the first one did (a member busy writing to a slow client joins the next step
// instead of holding the others back). A member leaves at once when its Member is dropped
// (finished, cancelled, client gone): no step waits for it after that. A step that throws fails
// every sequence in it with that error (the generators never hand in a token outside the
// vocabulary or past the context, so this is not expected).
// Promises: each sequence's logits are decode_batch's (model/llama.h: decode()'s, up to the
// summation order of products over kGemmMinTokens rows or more); close() fails every waiting and
// later decode() with HttpError 503 "shutting_down".
// Leaves out: prefill inside the steps (prefill runs on the request's thread, concurrently),
// priorities. Private to serve/.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "snapkv/model/llama.h"

namespace snapkv::serve {

class DecodeBatcher {
 public:
  static constexpr std::chrono::microseconds kGrace{2000};

  DecodeBatcher();
  ~DecodeBatcher();  // close(), then joins the step thread
  DecodeBatcher(const DecodeBatcher&) = delete;
  DecodeBatcher& operator=(const DecodeBatcher&) = delete;

  // A sequence of the running set; dropping it leaves the set.
  class Member {
   public:
    explicit Member(DecodeBatcher& b) : batcher_(b) {}
    ~Member();
    Member(const Member&) = delete;
    Member& operator=(const Member&) = delete;

   private:
    DecodeBatcher& batcher_;
  };
  std::unique_ptr<Member> join();

  // Appends `token` to `session` in the next step and returns its logits [n_vocab]. The caller
  // must hold a Member and not touch the session until this returns. Rethrows the step's error.
  std::vector<float> decode(LlamaSession& session, int32_t token);
  // The same for several sequences of one caller (a request's n choices), one Member each:
  // tokens[i] is appended to sessions[i], all in the same step; [i] holds sessions[i]'s logits.
  std::vector<std::vector<float>> decode(std::span<LlamaSession* const> sessions,
                                         std::span<const int32_t> tokens);

  void close();
  // Steps run so far and sequences decoded in them (for the mean batch size).
  size_t steps() const;
  size_t rows() const;

 private:
  struct Pending {
    LlamaSession* session = nullptr;
    int32_t token = 0;
    std::vector<float> logits;
    std::exception_ptr error;
    bool done = false;
  };
  void loop();
  void run_step(std::vector<Pending*>& batch);

  mutable std::mutex mutex_;
  std::condition_variable work_cv_;  // the step thread: a token came in, a member left, close
  std::condition_variable done_cv_;  // the members: a step finished
  std::vector<Pending*> pending_;
  size_t members_ = 0;
  size_t steps_ = 0, rows_ = 0;
  bool closed_ = false;
  std::thread thread_;
};

}  // namespace snapkv::serve
