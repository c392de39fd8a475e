// One client connection of the HTTP layer (serve/http/): its socket, the bytes read and not yet
// consumed (a pipelined next request stays here), and where it is in reading its next request
// (idle between requests, head, body, or draining after a refusal) with the deadline of each
// phase. Pure bookkeeping over a non-blocking socket: no threads, no routing.
// Leaves out: writing responses (http_server.cpp), TLS.
// Private to serve/.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "serve/http/http_parser.h"

namespace snapkv::serve::http {

using Clock = std::chrono::steady_clock;

struct ConnectionLimits {
  HeadLimits head;
  double read_timeout_s = 5.0;        // no byte for this long while a request is due: 408
  double head_timeout_s = 10.0;       // a whole head, from its first byte: 408
  double body_timeout_s = 60.0;       // a whole body, from the end of its head: 408
  double keep_alive_timeout_s = 5.0;  // idle (no byte of a next request): closed
  double linger_s = 2.0;              // draining after a refusal, before the close
};

struct Connection {
  enum class Phase { idle, head, body, draining };
  enum class Step { wait, ready, refused };

  Connection(int socket, uint64_t serial_number, Clock::time_point now)
      : fd(socket), serial(serial_number), phase_start(now), last_byte(now) {}

  int fd;
  uint64_t serial;     // order of acceptance
  std::string in;      // bytes read and not yet consumed
  size_t scanned = 0;  // bytes of `in` searched for the end of the head
  Phase phase = Phase::idle;
  Clock::time_point phase_start;  // idle since, head or body begun, draining since
  Clock::time_point last_byte;
  size_t served = 0;  // requests answered on this connection
  Head head;          // the request being read, complete when advance() says ready
  std::optional<ChunkedDecoder> chunked;
  bool continue_due = false;  // Expect: 100-continue to answer before the body is read
  // The client shut down its sending side: the requests already complete are answered, then the
  // connection is closed (nothing more can arrive).
  bool peer_closed = false;

  // Reads what the socket holds (at most `cap` bytes); the end of the client's stream sets
  // peer_closed. False when the socket failed.
  bool read_available(size_t cap, Clock::time_point now);
  // Parses what is buffered: wait (more bytes needed), ready (head.request complete with its
  // body; the bytes after it stay in `in`) or refused (head.error says why).
  Step advance(const ConnectionLimits& limits, Clock::time_point now);
  // When the current phase expires; what expiry means depends on the phase (idle, draining:
  // close; head, body: 408).
  Clock::time_point deadline(const ConnectionLimits& limits) const;
  // Back to idle after a response, keeping the bytes of a pipelined next request.
  void next_request(Clock::time_point now);
  bool idle() const { return phase == Phase::idle && in.empty(); }
};

}  // namespace snapkv::serve::http
