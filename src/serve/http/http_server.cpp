// The HTTP/1.1 connection layer (serve/http/http_server.h): the listener, the I/O thread's poll
// loop, the handler threads and routing. Writing a response is in http_response.cpp.
#include "serve/http/http_server.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <exception>
#include <utility>

#include "serve/http/http_response.h"

namespace snapkv::serve::http {
namespace {

void set_nonblocking(int fd) {
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL, 0) | O_NONBLOCK);
}

int milliseconds_until(Clock::time_point t, Clock::time_point now) {
  if (t <= now) return 0;
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(t - now).count() + 1;
  return static_cast<int>(std::min<long long>(ms, 1000));
}

constexpr size_t kReadCap = 256 * 1024;  // bytes read from one connection per poll round

}  // namespace

HttpServer::HttpServer(const ServerLimits& limits) : limits_(limits) {
  if (::pipe2(wake_pipe_, O_NONBLOCK | O_CLOEXEC) != 0) {
    wake_pipe_[0] = wake_pipe_[1] = -1;
  }
}

HttpServer::~HttpServer() {
  if (listen_fd_ >= 0) ::close(listen_fd_);
  for (const int fd : wake_pipe_) {
    if (fd >= 0) ::close(fd);
  }
}

void HttpServer::route(std::string method, std::string path, Handler handler) {
  routes_.push_back({std::move(method), std::move(path), nullptr, std::move(handler)});
}

void HttpServer::route_regex(std::string method, const std::string& pattern, Handler handler) {
  routes_.push_back(
      {std::move(method), pattern, std::make_unique<std::regex>(pattern), std::move(handler)});
}

void HttpServer::set_pre_routing(std::function<bool(const Request&, Response&)> fn) {
  pre_routing_ = std::move(fn);
}

void HttpServer::set_logger(std::function<void(const Request&, const Response&)> fn) {
  logger_ = std::move(fn);
}

void HttpServer::set_error_handler(
    std::function<void(const Request&, Response&, const std::string&)> fn) {
  error_handler_ = std::move(fn);
}

int HttpServer::bind(const std::string& host, int port) {
  if (wake_pipe_[0] < 0) return -1;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0) return -1;
  int fd = -1;
  for (addrinfo* a = found; a != nullptr && fd < 0; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    int yes = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    if (::bind(fd, a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd, SOMAXCONN) != 0) {
      ::close(fd);
      fd = -1;
    }
  }
  ::freeaddrinfo(found);
  if (fd < 0) return -1;
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    ::close(fd);
    return -1;
  }
  set_nonblocking(fd);
  if (listen_fd_ >= 0) ::close(listen_fd_);
  listen_fd_ = fd;
  return addr.ss_family == AF_INET6 ? ntohs(reinterpret_cast<const sockaddr_in6*>(&addr)->sin6_port)
                                    : ntohs(reinterpret_cast<const sockaddr_in*>(&addr)->sin_port);
}

void HttpServer::listen() {
  if (listen_fd_ < 0 || stopping_) return;
  std::vector<std::thread> handlers;
  for (size_t i = 0; i < std::max<size_t>(1, limits_.handler_threads); ++i) {
    handlers.emplace_back([this] { handler_loop(); });
  }
  io_loop();
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  jobs_cv_.notify_all();
  for (std::thread& t : handlers) t.join();
  // Connections handed back after the I/O thread ended.
  std::vector<ConnPtr> left;
  {
    std::lock_guard<std::mutex> lock(mu_);
    left.swap(returned_);
    for (ConnPtr& c : jobs_) left.push_back(std::move(c));
    jobs_.clear();
  }
  for (ConnPtr& c : left) close_connection(std::move(c));
}

void HttpServer::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    // Wakes a handler thread blocked writing to, and the I/O thread reading from, any client.
    for (const int fd : open_fds_) ::shutdown(fd, SHUT_RDWR);
  }
  jobs_cv_.notify_all();
  wake();
}

void HttpServer::wake() {
  if (wake_pipe_[1] < 0) return;
  const char byte = 1;
  [[maybe_unused]] const ssize_t n = ::write(wake_pipe_[1], &byte, 1);
}

void HttpServer::close_connection(ConnPtr conn) {
  if (!conn) return;
  std::lock_guard<std::mutex> lock(mu_);
  open_fds_.erase(conn->fd);
  ::close(conn->fd);
}

void HttpServer::accept_new(std::vector<ConnPtr>& held) {
  while (!stopping_) {
    size_t waiting = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      waiting = jobs_.size();
    }
    if (held.size() + waiting >= limits_.max_connections) {
      // Full: the connection idle the longest makes room, or the new one waits in the backlog.
      auto oldest = held.end();
      for (auto it = held.begin(); it != held.end(); ++it) {
        if ((*it)->idle() &&
            (oldest == held.end() || (*it)->phase_start < (*oldest)->phase_start)) {
          oldest = it;
        }
      }
      if (oldest == held.end()) return;
      close_connection(std::move(*oldest));
      held.erase(oldest);
    }
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      // Out of descriptors or memory: the listener is left alone for a moment rather than
      // polled (readable) in a busy loop. EAGAIN: none waiting.
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        accept_paused_until_ = Clock::now() + std::chrono::milliseconds(100);
      }
      return;
    }
    int yes = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof yes);
    {
      std::lock_guard<std::mutex> lock(mu_);
      open_fds_.insert(fd);
    }
    held.push_back(std::make_unique<Connection>(fd, next_serial_++, Clock::now()));
  }
}

void HttpServer::dispatch(ConnPtr conn) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    jobs_.push_back(std::move(conn));
  }
  jobs_cv_.notify_one();
}

void HttpServer::give_back(ConnPtr conn) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!stopping_) {
      returned_.push_back(std::move(conn));
      conn = nullptr;
    }
  }
  if (conn) {
    close_connection(std::move(conn));
  } else {
    wake();
  }
}

void HttpServer::io_loop() {
  const ConnectionLimits& cl = limits_.connection;
  std::vector<ConnPtr> held;
  std::vector<pollfd> fds;
  // Parses what a connection holds: dispatches a complete request or a refusal, keeps the rest.
  // False when the connection left `held` (dispatched, or closed after the client half-closed).
  auto step = [&](ConnPtr& c, Clock::time_point now) {
    const Connection::Step s = c->advance(cl, now);
    if (s == Connection::Step::wait && c->peer_closed) {
      close_connection(std::move(c));  // an incomplete request can no longer complete
      return false;
    }
    if (s == Connection::Step::wait) {
      if (c->continue_due) {
        static const char kContinue[] = "HTTP/1.1 100 Continue\r\n\r\n";
        [[maybe_unused]] const ssize_t n =
            ::send(c->fd, kContinue, sizeof kContinue - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
        c->continue_due = false;
      }
      return true;
    }
    dispatch(std::move(c));
    return false;
  };
  while (!stopping_) {
    // Connections handed back by handler threads: their buffers may hold the next request.
    std::vector<ConnPtr> back;
    {
      std::lock_guard<std::mutex> lock(mu_);
      back.swap(returned_);
    }
    const Clock::time_point now = Clock::now();
    for (ConnPtr& c : back) {
      if (step(c, now)) held.push_back(std::move(c));
    }
    // Deadlines.
    Clock::time_point next = now + std::chrono::seconds(1);
    for (size_t i = 0; i < held.size();) {
      Connection& c = *held[i];
      const Clock::time_point due = c.deadline(cl);
      if (due > now) {
        next = std::min(next, due);
        ++i;
        continue;
      }
      ConnPtr gone = std::move(held[i]);
      held.erase(held.begin() + static_cast<std::ptrdiff_t>(i));
      if (gone->phase == Connection::Phase::head || gone->phase == Connection::Phase::body) {
        gone->head.error = {408, gone->phase == Connection::Phase::head
                                     ? "the request head was not complete in time"
                                     : "the request body was not complete in time"};
        dispatch(std::move(gone));
      } else {
        close_connection(std::move(gone));
      }
    }
    fds.clear();
    fds.push_back({wake_pipe_[0], POLLIN, 0});
    // Full, with no idle connection to close for a new one: new ones wait in the backlog.
    size_t waiting = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      waiting = jobs_.size();
    }
    const bool room =
        held.size() + waiting < limits_.max_connections ||
        std::any_of(held.begin(), held.end(), [](const ConnPtr& c) { return c->idle(); });
    const bool paused = accept_paused_until_ > now;
    if (paused) next = std::min(next, accept_paused_until_);
    fds.push_back({room && !paused ? listen_fd_ : -1, POLLIN, 0});
    for (const ConnPtr& c : held) fds.push_back({c->fd, POLLIN, 0});
    const int ready = ::poll(fds.data(), fds.size(), milliseconds_until(next, Clock::now()));
    if (ready < 0 && errno != EINTR) break;
    if (ready <= 0) continue;
    if (fds[0].revents != 0) {
      char drain[256];
      while (::read(wake_pipe_[0], drain, sizeof drain) > 0) {
      }
    }
    const Clock::time_point t = Clock::now();
    // Reads, newest index first so that erasing keeps the rest in place.
    for (size_t i = held.size(); i-- > 0;) {
      if (fds[i + 2].revents == 0) continue;
      ConnPtr& c = held[i];
      bool keep = c->read_available(kReadCap, t);
      if (!keep) {
        close_connection(std::move(c));
      } else {
        keep = step(c, t);
      }
      if (!keep) held.erase(held.begin() + static_cast<std::ptrdiff_t>(i));
    }
    if (fds[1].revents != 0) accept_new(held);
  }
  for (ConnPtr& c : held) close_connection(std::move(c));
  std::lock_guard<std::mutex> lock(mu_);
  ::close(listen_fd_);
  listen_fd_ = -1;
}

void HttpServer::handler_loop() {
  while (true) {
    ConnPtr conn;
    {
      std::unique_lock<std::mutex> lock(mu_);
      jobs_cv_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
      if (stopping_) return;  // listen() closes what is left
      conn = std::move(jobs_.front());
      jobs_.pop_front();
    }
    serve(std::move(conn));
  }
}

void HttpServer::answer(Request& req, Response& res) {
  if (pre_routing_ && pre_routing_(req, res)) return;
  static const std::string kGet = "GET";
  const std::string& method = req.method == "HEAD" ? kGet : req.method;
  for (const Route& r : routes_) {
    if (r.method != method) continue;
    if (r.re ? !std::regex_match(req.path, req.matches, *r.re) : r.path != req.path) continue;
    try {
      r.handler(req, res);
    } catch (const std::exception& e) {
      res = Response{};
      res.status = 500;
      if (error_handler_) error_handler_(req, res, e.what());
    }
    if (res.status == -1) res.status = 200;
    return;
  }
  // A known path asked with another method: 405 with the methods it takes (GET brings HEAD).
  std::vector<std::string> allowed;
  for (const Route& r : routes_) {
    std::smatch unused;
    if (r.re ? !std::regex_match(req.path, unused, *r.re) : r.path != req.path) continue;
    for (const std::string& m :
         r.method == "GET" ? std::vector<std::string>{"GET", "HEAD"} : std::vector{r.method}) {
      if (std::find(allowed.begin(), allowed.end(), m) == allowed.end()) allowed.push_back(m);
    }
  }
  if (allowed.empty()) {
    res.status = 404;
    if (error_handler_) error_handler_(req, res, "no route " + req.method + " " + req.path);
    return;
  }
  std::string allow;
  for (const std::string& m : allowed) allow += (allow.empty() ? "" : ", ") + m;
  res.status = 405;
  res.set_header("Allow", allow);
  if (error_handler_) {
    error_handler_(
        req, res,
        "method " + req.method + " is not allowed on " + req.path + " (allowed: " + allow + ")");
  }
}

void HttpServer::serve(ConnPtr conn) {
  Request& req = conn->head.request;
  Response res;
  const bool refused = conn->head.error.status != 0;
  if (refused) {
    res.status = conn->head.error.status;
    if (error_handler_) error_handler_(req, res, conn->head.error.message);
  } else {
    answer(req, res);
  }
  const bool keep_alive =
      !refused && req.keep_alive && conn->served + 1 < limits_.keep_alive_max && !stopping_;
  const Written written = write_response(conn->fd, req, res, keep_alive, limits_.write_timeout_s);
  if (logger_) logger_(req, res);
  if (written == Written::failed || stopping_) {
    close_connection(std::move(conn));
    return;
  }
  if (written == Written::close) {
    // Answered with "Connection: close": drain what the client still sends, then close, so it
    // reads the answer rather than a reset.
    ::shutdown(conn->fd, SHUT_WR);
    conn->phase = Connection::Phase::draining;
    conn->phase_start = Clock::now();
    conn->in.clear();
    give_back(std::move(conn));
    return;
  }
  conn->next_request(Clock::now());
  give_back(std::move(conn));
}

}  // namespace snapkv::serve::http
