// The server's HTTP/1.1 connection layer (serve/http/): one I/O thread accepts connections and
// polls every connection that is idle or reading a request head or body (these cost no thread);
// a request whose head and body are complete goes to a pool of handler threads, which route it,
// write the response (Content-Length, or chunked for a content provider) and hand the
// connection back, so that bytes already read beyond the request are parsed as the next one:
// pipelined requests are answered in order.
// Promises:
//  - At most max_connections connections are idle or reading (or waiting for a handler thread);
//    when a new one arrives beyond that, the connection idle the longest (no byte of a request
//    read) is closed for it; when none is idle, new connections wait in the listen backlog.
//  - Deadlines: read_timeout_s without a byte while a head or body is due, head_timeout_s for a
//    whole head, body_timeout_s for a whole body: 408 and the close. keep_alive_timeout_s idle
//    between requests (or before the first): closed. A write that makes no progress for
//    write_timeout_s ends the response and closes the connection (a content provider sees its
//    sink's write fail).
//  - A refused request (http_parser.h's statuses, 408) gets its error response with
//    "Connection: close"; the connection is then drained for a moment before the close, so the
//    client reads the answer rather than a reset.
//  - keep-alive per HTTP/1.1 and 1.0 (Connection: close / keep-alive), at most keep_alive_max
//    requests per connection; a streamed response to an HTTP/1.0 client ends with the close.
//  - stop() (any thread, not a signal handler): the listener and every connection are shut down
//    and listen() returns once the I/O and handler threads have ended.
// Leaves out: TLS, HTTP/2, response compression, multipart.
// Private to serve/.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <regex>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

#include "serve/http/http_connection.h"
#include "serve/http/http_types.h"

namespace snapkv::serve::http {

struct ServerLimits {
  ConnectionLimits connection;
  size_t max_connections = 256;
  size_t handler_threads = 72;
  size_t keep_alive_max = 1000;  // requests per connection
  double write_timeout_s = 5.0;
};

class HttpServer {
 public:
  explicit HttpServer(const ServerLimits& limits);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Routes, tried in the order added: an exact path, or a regex over the whole path whose groups
  // land in Request::matches. HEAD takes the GET routes (no body sent).
  void route(std::string method, std::string path, Handler handler);
  void route_regex(std::string method, const std::string& pattern, Handler handler);
  // Before routing; returns true when it answered the request itself (authentication).
  void set_pre_routing(std::function<bool(const Request&, Response&)> fn);
  // After each response is written (or failed), on the handler thread that wrote it.
  void set_logger(std::function<void(const Request&, const Response&)> fn);
  // Fills the body of an error without one: no route (404), a known path asked with a method
  // none of its routes takes (405, with an Allow header listing those), a refusal of the
  // connection layer
  // (400, 408, 413, 414, 417, 431, 501, 505) with `why`, a handler's exception (500).
  void set_error_handler(std::function<void(const Request&, Response&, const std::string&)> fn);

  // Listens on host:port (0: any free port); returns the port, or -1 when it cannot.
  int bind(const std::string& host, int port);
  void listen();  // blocks until stop()
  void stop();

 private:
  struct Route {
    std::string method;
    std::string path;
    std::unique_ptr<std::regex> re;  // null: exact path
    Handler handler;
  };
  using ConnPtr = std::unique_ptr<Connection>;

  void io_loop();
  void accept_new(std::vector<ConnPtr>& held);
  void dispatch(ConnPtr conn);   // to the handler threads
  void give_back(ConnPtr conn);  // from a handler thread to the I/O thread
  void handler_loop();
  void serve(ConnPtr conn);  // one request (or refusal) on a handler thread
  void answer(Request& req, Response& res);
  void close_connection(ConnPtr conn);
  void wake();

  ServerLimits limits_;
  std::vector<Route> routes_;
  std::function<bool(const Request&, Response&)> pre_routing_;
  std::function<void(const Request&, const Response&)> logger_;
  std::function<void(const Request&, Response&, const std::string&)> error_handler_;

  int listen_fd_ = -1;
  int wake_pipe_[2] = {-1, -1};
  std::atomic<bool> stopping_{false};
  uint64_t next_serial_ = 0;
  Clock::time_point accept_paused_until_{};  // after running out of descriptors (I/O thread)

  std::mutex mu_;  // guards jobs_, returned_, open_fds_
  std::condition_variable jobs_cv_;
  std::deque<ConnPtr> jobs_;          // complete requests waiting for a handler thread
  std::vector<ConnPtr> returned_;     // connections handed back to the I/O thread
  std::unordered_set<int> open_fds_;  // every connection's socket, shut down by stop()
};

}  // namespace snapkv::serve::http
