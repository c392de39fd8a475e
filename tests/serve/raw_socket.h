// A raw loopback TCP connection for the server tests: send bytes exactly as given (pipelined,
// trickled, malformed) and read what comes back until a marker, the close or a timeout.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>

namespace snapkv::serve::test {

// A raw loopback TCP connection (closed on destruction).
class RawSocket {
 public:
  explicit RawSocket(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = fd_ >= 0 && ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  }
  ~RawSocket() {
    if (fd_ >= 0) ::close(fd_);
  }
  RawSocket(const RawSocket&) = delete;
  RawSocket& operator=(const RawSocket&) = delete;

  bool connected() const { return connected_; }
  int fd() const { return fd_; }
  bool send(const std::string& s) {
    return ::send(fd_, s.data(), s.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(s.size());
  }
  // Reads until `count` occurrences of `marker` arrived, the peer closed, or `timeout_s` passed.
  std::string read_until(const std::string& marker, size_t count, double timeout_s,
                         bool* closed = nullptr) {
    std::string got;
    using Clock = std::chrono::steady_clock;
    const auto t0 = Clock::now();
    while (std::chrono::duration<double>(Clock::now() - t0).count() < timeout_s) {
      size_t seen = 0;
      for (size_t p = got.find(marker); p != std::string::npos; p = got.find(marker, p + 1)) {
        ++seen;
      }
      if (!marker.empty() && seen >= count) break;
      pollfd pfd{fd_, POLLIN, 0};
      if (::poll(&pfd, 1, 50) <= 0) continue;
      char buf[4096];
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) {
        if (closed != nullptr) *closed = true;
        break;
      }
      got.append(buf, static_cast<size_t>(n));
    }
    return got;
  }

 private:
  int fd_ = -1;
  bool connected_ = false;
};

}  // namespace snapkv::serve::test
