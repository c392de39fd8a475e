// One client connection of the HTTP layer (serve/http/http_connection.h).
#include "serve/http/http_connection.h"

#include <sys/socket.h>

#include <cerrno>
#include <utility>

namespace snapkv::serve::http {
namespace {

Clock::time_point after(Clock::time_point t, double seconds) {
  return t + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

}  // namespace

bool Connection::read_available(size_t cap, Clock::time_point now) {
  char buf[65536];
  size_t got = 0;
  while (got < cap) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n > 0) {
      got += static_cast<size_t>(n);
      if (phase != Phase::draining) in.append(buf, static_cast<size_t>(n));
      last_byte = now;
      continue;
    }
    if (n == 0) {
      peer_closed = true;
      return true;
    }
    if (errno == EINTR) continue;
    return errno == EAGAIN || errno == EWOULDBLOCK;  // else the socket failed
  }
  return true;
}

Connection::Step Connection::advance(const ConnectionLimits& limits, Clock::time_point now) {
  if (phase == Phase::draining) {
    in.clear();
    return Step::wait;
  }
  if (phase == Phase::idle) {
    // Blank lines before a request line are ignored (RFC 9112 2.2).
    size_t blank = 0;
    while (blank < in.size() && (in[blank] == '\r' || in[blank] == '\n')) ++blank;
    in.erase(0, blank);
    if (in.empty()) return Step::wait;
    phase = Phase::head;
    phase_start = now;
    scanned = 0;
    head = Head{};
    chunked.reset();
    continue_due = false;
  }
  if (phase == Phase::head) {
    const size_t end = find_head_end(in, scanned);
    if (end == 0) {
      scanned = in.size();
      head.error = check_partial_head(in, limits.head);
      return head.error.status != 0 ? Step::refused : Step::wait;
    }
    head = parse_head(std::string_view(in).substr(0, end), limits.head);
    in.erase(0, end);
    scanned = 0;
    if (head.error.status != 0) return Step::refused;
    phase = Phase::body;
    phase_start = now;
    if (head.body == BodyKind::chunked) chunked.emplace(limits.head);
    continue_due =
        head.expect_continue && head.body != BodyKind::none && head.request.minor_version >= 1;
  }
  // Phase::body
  Request& r = head.request;
  if (head.body == BodyKind::length) {
    if (in.size() < head.content_length) return Step::wait;
    if (in.size() == head.content_length) {
      r.body = std::move(in);
      in.clear();
    } else {
      r.body = in.substr(0, head.content_length);
      in.erase(0, head.content_length);
    }
  } else if (head.body == BodyKind::chunked) {
    in.erase(0, chunked->feed(in));
    if (chunked->error().status != 0) {
      head.error = chunked->error();
      return Step::refused;
    }
    if (!chunked->done()) return Step::wait;
    r.body = std::move(chunked->body());
    chunked.reset();
  }
  continue_due = false;
  return Step::ready;
}

Clock::time_point Connection::deadline(const ConnectionLimits& limits) const {
  switch (phase) {
    case Phase::idle:
      return after(phase_start, limits.keep_alive_timeout_s);
    case Phase::head:
      return std::min(after(last_byte, limits.read_timeout_s),
                      after(phase_start, limits.head_timeout_s));
    case Phase::body:
      return std::min(after(last_byte, limits.read_timeout_s),
                      after(phase_start, limits.body_timeout_s));
    case Phase::draining:
      return after(phase_start, limits.linger_s);
  }
  return phase_start;
}

void Connection::next_request(Clock::time_point now) {
  ++served;
  phase = Phase::idle;
  phase_start = now;
  last_byte = now;
  head = Head{};
  chunked.reset();
  continue_due = false;
  scanned = 0;
}

}  // namespace snapkv::serve::http
