// Writing one response of the HTTP layer (serve/http/http_response.h).
#include "serve/http/http_response.h"

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <string>

namespace snapkv::serve::http {
namespace {

// Chunks on HTTP/1.1, the raw bytes (ended by the close) on HTTP/1.0.
class SocketSink : public DataSink {
 public:
  SocketSink(int fd, bool chunked, double timeout_s)
      : fd_(fd), chunked_(chunked), timeout_s_(timeout_s) {}

  bool write(const char* data, size_t n) override {
    if (failed_ || done_) return false;
    if (n == 0) return true;
    bool ok = true;
    if (chunked_) {
      char size[32];
      const int len = std::snprintf(size, sizeof size, "%zx\r\n", n);
      std::string chunk(size, static_cast<size_t>(len));
      chunk.append(data, n);
      chunk += "\r\n";
      ok = send_all(fd_, chunk.data(), chunk.size(), timeout_s_);
    } else {
      ok = send_all(fd_, data, n, timeout_s_);
    }
    failed_ = !ok;
    if (ok) written_ += n;
    return ok;
  }

  bool is_writable() const override {
    if (failed_ || done_) return false;
    pollfd p{fd_, POLLOUT, 0};
    return ::poll(&p, 1, 0) >= 0 && (p.revents & (POLLERR | POLLHUP | POLLNVAL)) == 0;
  }

  void done() override {
    if (done_ || failed_) return;
    if (chunked_) failed_ = !send_all(fd_, "0\r\n\r\n", 5, timeout_s_);
    done_ = true;
  }

  bool finished() const { return done_ && !failed_; }
  bool failed() const { return failed_; }
  size_t written() const { return written_; }

 private:
  int fd_;
  bool chunked_;
  double timeout_s_;
  bool failed_ = false;
  bool done_ = false;
  size_t written_ = 0;
};

}  // namespace

const char* reason_phrase(int status) {
  switch (status) {
    case 100:
      return "Continue";
    case 200:
      return "OK";
    case 201:
      return "Created";
    case 204:
      return "No Content";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 409:
      return "Conflict";
    case 411:
      return "Length Required";
    case 413:
      return "Payload Too Large";
    case 414:
      return "URI Too Long";
    case 417:
      return "Expectation Failed";
    case 422:
      return "Unprocessable Entity";
    case 429:
      return "Too Many Requests";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 501:
      return "Not Implemented";
    case 503:
      return "Service Unavailable";
    case 505:
      return "HTTP Version Not Supported";
    default:
      return "";
  }
}

bool send_all(int fd, const char* data, size_t n, double timeout_s) {
  const int wait_ms = static_cast<int>(timeout_s * 1000.0);
  while (n > 0) {
    const ssize_t k = ::send(fd, data, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (k > 0) {
      data += k;
      n -= static_cast<size_t>(k);
      continue;
    }
    if (k < 0 && errno == EINTR) continue;
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{fd, POLLOUT, 0};
      int r = 0;
      do {
        r = ::poll(&p, 1, wait_ms);
      } while (r < 0 && errno == EINTR);
      if (r <= 0) return false;  // no progress within the timeout
      continue;
    }
    return false;
  }
  return true;
}

Written write_response(int fd, const Request& req, Response& res, bool keep_alive,
                       double write_timeout_s) {
  const bool head_only = req.method == "HEAD";
  const bool http11 = req.minor_version >= 1;
  const bool streamed = static_cast<bool>(res.provider) && !head_only;
  // A streamed body to an HTTP/1.0 client has no length: the close ends it.
  if (streamed && !http11) keep_alive = false;
  const bool no_body =
      res.status == 204 || res.status == 304 || (res.status >= 100 && res.status < 200);

  std::string head =
      "HTTP/1.1 " + std::to_string(res.status) + " " + reason_phrase(res.status) + "\r\n";
  for (const Header& h : res.headers) {
    if (iequals(h.name, "Content-Length") || iequals(h.name, "Transfer-Encoding") ||
        iequals(h.name, "Connection")) {
      continue;
    }
    head += h.name + ": " + h.value + "\r\n";
  }
  if (streamed) {
    if (http11) head += "Transfer-Encoding: chunked\r\n";
  } else if (!no_body) {
    head += "Content-Length: " + std::to_string(res.body.size()) + "\r\n";
  }
  head += keep_alive ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n";

  const bool with_body = !head_only && !no_body && !streamed;
  if (with_body && res.body.size() <= 64 * 1024) {
    head += res.body;
    if (!send_all(fd, head.data(), head.size(), write_timeout_s)) return Written::failed;
  } else {
    if (!send_all(fd, head.data(), head.size(), write_timeout_s)) return Written::failed;
    if (with_body && !send_all(fd, res.body.data(), res.body.size(), write_timeout_s)) {
      return Written::failed;
    }
  }
  if (streamed) {
    SocketSink sink(fd, http11, write_timeout_s);
    while (!sink.finished() && !sink.failed()) {
      if (!res.provider(sink.written(), sink)) break;
    }
    if (!sink.finished()) return Written::failed;
  }
  return keep_alive ? Written::keep_open : Written::close;
}

}  // namespace snapkv::serve::http
