// The server's HTTP/1.1 connection layer (src/serve/http/) through raw sockets on loopback:
// pipelined requests answered in order (GETs, POSTs with Content-Length and chunked bodies), the
// whole-head and body deadlines with other clients served meanwhile, 200 idle connections, the
// bound on held connections, a stream nobody reads dropped at the write timeout (--read-timeout's
// by default), HEAD, a known path with another method (405 + Allow), malformed and oversized
// heads and bodies, bad Content-Length values, a missing Host, Expect: 100-continue, HTTP/1.0.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "serve/raw_socket.h"
#include "serve/running_server.h"

namespace snapkv::serve {
namespace {

using nlohmann::json;
using test::post;
using test::post_until_ok;
using test::RawSocket;
using test::Running;
using test::seconds_since;
using test::tiny_model;
using Clock = std::chrono::steady_clock;

std::string detokenize_request(int token, bool chunked, bool close = false) {
  const std::string body = json{{"tokens", {token}}}.dump();
  std::string head = "POST /detokenize HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n";
  if (close) head += "Connection: close\r\n";
  if (!chunked) return head + "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  // Two chunks, split inside the JSON.
  const std::string a = body.substr(0, 5);
  const std::string b = body.substr(5);
  char sizes[64];
  std::snprintf(sizes, sizeof sizes, "%zx", a.size());
  std::string wire = head + "Transfer-Encoding: chunked\r\n\r\n" + sizes + "\r\n" + a + "\r\n";
  std::snprintf(sizes, sizeof sizes, "%zx;note=x", b.size());
  return wire + sizes + "\r\n" + b + "\r\n0\r\n\r\n";
}

// The bodies of the responses in `wire`, in order (Content-Length framed).
std::vector<std::string> bodies(const std::string& wire) {
  std::vector<std::string> out;
  size_t at = 0;
  while (true) {
    const size_t end = wire.find("\r\n\r\n", at);
    if (end == std::string::npos) break;
    const std::string head = wire.substr(at, end - at);
    const size_t cl = head.find("Content-Length: ");
    if (cl == std::string::npos) break;
    const size_t n = std::stoul(head.substr(cl + 16));
    if (end + 4 + n > wire.size()) break;
    out.push_back(wire.substr(end + 4, n));
    at = end + 4 + n;
  }
  return out;
}

TEST(HttpConnection, TwentyPipelinedGetsAnsweredInOrder) {
  Running server(ServerOptions{});
  RawSocket s(server.port());
  ASSERT_TRUE(s.connected());
  std::string wire;
  for (int i = 0; i < 20; ++i)
    wire += "GET /v1/caches/pipe-" + std::to_string(i) + " HTTP/1.1\r\nHost: x\r\n\r\n";
  ASSERT_TRUE(s.send(wire));  // one write
  const std::string got = s.read_until("HTTP/1.1 404", 20, 20.0);
  const std::vector<std::string> b = bodies(got);
  ASSERT_EQ(b.size(), 20u) << got;
  for (int i = 0; i < 20; ++i) {
    EXPECT_NE(b[i].find("'pipe-" + std::to_string(i) + "'"), std::string::npos)
        << i << ": " << b[i];
  }
}

TEST(HttpConnection, PipelinedPostsWithLengthAndChunkedBodies) {
  Running server(ServerOptions{});
  const Tokenizer& tok = tiny_model().tokenizer;
  RawSocket s(server.port());
  ASSERT_TRUE(s.connected());
  std::string wire;
  const int n = 12;
  for (int i = 0; i < n; ++i) wire += detokenize_request(100 + i, i % 2 == 1, i == n - 1);
  ASSERT_TRUE(s.send(wire));
  bool closed = false;
  const std::string got = s.read_until("", 1, 20.0, &closed);
  EXPECT_TRUE(closed) << "the last request asked for the close";
  const std::vector<std::string> b = bodies(got);
  ASSERT_EQ(b.size(), static_cast<size_t>(n)) << got;
  for (int i = 0; i < n; ++i) {
    const json j = json::parse(b[i], nullptr, false);
    ASSERT_TRUE(j.is_object()) << b[i];
    EXPECT_EQ(j["content"], tok.decode(std::vector<int32_t>{100 + i})) << i;
  }
}

// A client that sends its requests and then shuts down its sending side (nc -N, some proxies)
// gets every complete request answered before the close; an incomplete last one is dropped.
TEST(HttpConnection, AHalfClosedClientGetsItsCompleteRequestsAnswered) {
  Running server(ServerOptions{});
  RawSocket s(server.port());
  ASSERT_TRUE(s.connected());
  std::string wire;
  for (int i = 0; i < 3; ++i) wire += detokenize_request(100 + i, i == 1);
  wire += "POST /detokenize HTTP/1.1\r\nHost: x\r\nContent-Length: 50\r\n\r\n{\"tok";
  ASSERT_TRUE(s.send(wire));
  ASSERT_EQ(::shutdown(s.fd(), SHUT_WR), 0);
  bool closed = false;
  const Clock::time_point t0 = Clock::now();
  const std::string got = s.read_until("", 1, 20.0, &closed);
  EXPECT_TRUE(closed);
  EXPECT_LT(seconds_since(t0), 5.0) << "closed at once, not at a deadline";
  const std::vector<std::string> b = bodies(got);
  ASSERT_EQ(b.size(), 3u) << got;
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(json::parse(b[i])["content"],
              tiny_model().tokenizer.decode(std::vector<int32_t>{100 + i}));
  }
}

TEST(HttpConnection, ATrickledHeadIsClosedAtTheHeadDeadline) {
  ServerOptions o;
  o.head_timeout_s = 2.0;
  o.read_timeout_s = 5.0;
  Running server(o);
  RawSocket slow(server.port());
  ASSERT_TRUE(slow.connected());
  const std::string head = "GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaa";
  const auto t0 = Clock::now();
  bool closed = false;
  std::string got;
  std::thread other([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(700));
    httplib::Client c = server.client();
    const auto t1 = Clock::now();
    const auto res = c.Get("/health");
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 200);
    EXPECT_LT(seconds_since(t1), 1.0) << "a client waited behind a trickled head";
  });
  for (size_t i = 0; i < head.size() && !closed && seconds_since(t0) < 6.0; ++i) {
    slow.send(head.substr(i, 1));
    got += slow.read_until("", 1, 0.5, &closed);
  }
  other.join();
  EXPECT_TRUE(closed) << "a head trickled byte by byte held its connection: " << got;
  EXPECT_LT(seconds_since(t0), 3.0);
  EXPECT_NE(got.find("HTTP/1.1 408"), std::string::npos) << got;
}

TEST(HttpConnection, ASlowBodyIsClosedAtTheBodyDeadline) {
  ServerOptions o;
  o.body_timeout_s = 1.0;
  o.read_timeout_s = 5.0;
  Running server(o);
  RawSocket s(server.port());
  ASSERT_TRUE(s.connected());
  ASSERT_TRUE(s.send("POST /detokenize HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"));
  const auto t0 = Clock::now();
  bool closed = false;
  std::string got;
  while (!closed && seconds_since(t0) < 4.0) {
    s.send(" ");
    got += s.read_until("", 1, 0.3, &closed);
  }
  EXPECT_TRUE(closed) << got;
  EXPECT_LT(seconds_since(t0), 2.0);
  EXPECT_NE(got.find("HTTP/1.1 408"), std::string::npos) << got;
}

TEST(HttpConnection, TwoHundredIdleConnectionsAndARequestServedAtOnce) {
  Running server(ServerOptions{});
  std::vector<std::unique_ptr<RawSocket>> idle;
  for (int i = 0; i < 200; ++i) {
    idle.push_back(std::make_unique<RawSocket>(server.port()));
    ASSERT_TRUE(idle.back()->connected()) << i;
    if (i % 3 == 1) idle.back()->send("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Le");
    if (i % 3 == 2)
      idle.back()->send("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 50\r\n\r\n{");
  }
  const auto t0 = Clock::now();
  httplib::Client c = server.client();
  post(c, "/v1/completions", {{"prompt", "hi"}, {"max_tokens", 1}});
  EXPECT_LT(seconds_since(t0), 1.0);
}

TEST(HttpConnection, BeyondMaxConnectionsTheOldestIdleOneMakesRoom) {
  ServerOptions o;
  o.max_connections = 8;
  Running server(o);
  std::vector<std::unique_ptr<RawSocket>> idle;
  for (int i = 0; i < 8; ++i) {
    idle.push_back(std::make_unique<RawSocket>(server.port()));
    ASSERT_TRUE(idle.back()->connected());
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // accepted in this order
  }
  const auto t0 = Clock::now();
  httplib::Client c = server.client();
  const auto res = c.Get("/health");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_LT(seconds_since(t0), 1.0);
  bool closed = false;
  idle[0]->read_until("", 1, 2.0, &closed);
  EXPECT_TRUE(closed) << "the oldest idle connection was kept";
  closed = false;
  idle[7]->read_until("", 1, 0.2, &closed);
  EXPECT_FALSE(closed) << "a newer idle connection was closed";
}

TEST(HttpConnection, HeadGetsTheHeadersOnlyAndUnknownRoutesA404) {
  Running server(ServerOptions{});
  RawSocket s(server.port());
  ASSERT_TRUE(s.connected());
  // HEAD, then a GET on the same connection: the HEAD answer has a length and no body.
  s.send("HEAD /health HTTP/1.1\r\nHost: x\r\n\r\nGET /nowhere HTTP/1.1\r\nHost: x\r\n\r\n");
  const std::string got = s.read_until("}", 1, 5.0);
  const size_t second = got.find("HTTP/1.1 404 ");
  ASSERT_NE(second, std::string::npos) << got;
  const std::string head = got.substr(0, second);
  EXPECT_EQ(head.rfind("HTTP/1.1 200 ", 0), 0u) << head;
  EXPECT_NE(head.find("Content-Length: 15\r\n"), std::string::npos) << head;
  EXPECT_EQ(head.substr(head.size() - 4), "\r\n\r\n") << "a body after the HEAD answer";
  EXPECT_NE(got.find("no route GET /nowhere"), std::string::npos) << got;
}

// A client that stops reading a long stream: the only worker is freed at the write timeout.
void expect_unread_stream_dropped(const ServerOptions& o) {
  Running server(o);
  // A client with a small receive window that sends a request for a long stream (128 choices
  // with 20 log-probabilities per token: more events than the sockets' buffers hold) and then
  // reads no more.
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  int small = 4096;
  ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(server.port()));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  const std::string body =
      json{{"prompt", "Once"}, {"max_tokens", 900}, {"n", 128}, {"logprobs", 20}, {"stream", true}}
          .dump();
  const std::string req =
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: " + std::to_string(body.size()) +
      "\r\n\r\n" + body;
  ASSERT_EQ(::send(fd, req.data(), req.size(), MSG_NOSIGNAL), static_cast<ssize_t>(req.size()));
  // The stream has begun (its first bytes read), then nothing more is read.
  std::string got;
  char buf[65536];
  while (got.find("data: ") == std::string::npos) {
    pollfd p{fd, POLLIN, 0};
    ASSERT_GT(::poll(&p, 1, 30000), 0) << "the stream never started";
    const ssize_t n = ::recv(fd, buf, 256, 0);
    ASSERT_GT(n, 0) << got;
    got.append(buf, static_cast<size_t>(n));
  }
  // The only worker is freed once a write has made no progress for the timeout.
  httplib::Client c = server.client();
  const int status = post_until_ok(c, "/v1/completions", R"({"prompt": "hi", "max_tokens": 1})",
                                   30.0, std::chrono::milliseconds(100));
  EXPECT_EQ(status, 200) << "a client that never reads kept the only worker";
  // The stream was cut, not finished: no [DONE] among what the server had sent.
  while (true) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 2000) <= 0) break;
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    got.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  EXPECT_EQ(got.find("server_error"), std::string::npos) << "the generation failed instead";
  EXPECT_EQ(got.find("data: [DONE]"), std::string::npos) << "the stream ran to its end";
}

TEST(HttpConnection, AStreamNobodyReadsIsDroppedAtTheWriteTimeout) {
  ServerOptions o;
  o.max_concurrent = 1;
  o.max_queue = 0;
  o.max_n = 128;
  {
    SCOPED_TRACE("no --write-timeout: the read timeout");
    o.read_timeout_s = 1.0;
    expect_unread_stream_dropped(o);
  }
  {
    SCOPED_TRACE("--write-timeout 1 under a read timeout the test outlasts");
    o.read_timeout_s = 120.0;
    o.write_timeout_s = 1.0;
    expect_unread_stream_dropped(o);
  }
}

TEST(HttpConnection, AKnownPathWithAnotherMethodGets405AndAllow) {
  Running server(ServerOptions{});
  httplib::Client c = server.client();
  struct Case {
    const char* method;
    const char* path;
    const char* allow;
  };
  const std::vector<Case> cases = {
      {"GET", "/v1/completions", "POST"},
      {"POST", "/health", "GET, HEAD"},
      {"PUT", "/v1/models", "GET, HEAD"},
      {"DELETE", "/v1/caches", "POST, GET, HEAD"},
      {"POST", "/v1/caches/abc", "GET, HEAD, DELETE"},
      {"GET", "/tokenize", "POST"},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(std::string(k.method) + " " + k.path);
    httplib::Request req;
    req.method = k.method;
    req.path = k.path;
    const auto res = c.send(req);
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 405) << res->body;
    EXPECT_EQ(res->get_header_value("Allow"), k.allow);
    const json j = json::parse(res->body, nullptr, false);
    ASSERT_TRUE(j.is_object()) << res->body;
    EXPECT_EQ(j["error"]["code"], 405);
    EXPECT_EQ(j["error"]["type"], "invalid_request_error");
    EXPECT_NE(j["error"]["message"].get<std::string>().find(k.allow), std::string::npos);
  }
  // An unknown path is still a 404, and the connection goes on after a 405.
  const auto res = c.Get("/nowhere");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 404);
  EXPECT_EQ(c.Get("/health")->status, 200);
}

struct Refusal {
  const char* what;
  std::string wire;
  int status;
};

TEST(HttpConnection, MalformedHeadsAndBodiesGetJsonErrorsAndTheClose) {
  ServerOptions o;
  o.max_body_bytes = 4096;
  Running server(o);
  const std::vector<Refusal> cases = {
      {"malformed request line", "GARBAGE\r\n\r\n", 400},
      {"no version", "GET /health\r\n\r\n", 400},
      {"HTTP/2.0", "GET /health HTTP/2.0\r\n\r\n", 505},
      {"oversized head",
       "GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(20000, 'a') + "\r\n\r\n", 431},
      {"oversized request line", "GET /" + std::string(10000, 'a') + " HTTP/1.1\r\nHost: x\r\n\r\n",
       414},
      {"body over --max-body",
       "POST /detokenize HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n" +
           std::string(5000, ' '),
       413},
      {"negative Content-Length",
       "POST /detokenize HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n", 400},
      {"Content-Length not a number",
       "POST /detokenize HTTP/1.1\r\nHost: x\r\nContent-Length: ten\r\n\r\n", 400},
      {"Content-Length overflowing",
       "POST /detokenize HTTP/1.1\r\nHost: x\r\nContent-Length: 184467440737095516160\r\n\r\n",
       413},
      {"chunked body over --max-body",
       "POST /detokenize HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n1001\r\n" +
           std::string(4097, ' ') + "\r\n0\r\n\r\n",
       413},
      {"bad chunk size",
       "POST /detokenize HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 400},
      {"gzip transfer coding",
       "POST /detokenize HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n", 501},
      {"unknown expectation", "POST /detokenize HTTP/1.1\r\nHost: x\r\nExpect: 200-ok\r\n\r\n",
       417},
      {"HTTP/1.1 without Host", "GET /health HTTP/1.1\r\n\r\n", 400},
      {"two Host fields", "GET /health HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400},
  };
  for (const Refusal& r : cases) {
    RawSocket s(server.port());
    ASSERT_TRUE(s.connected()) << r.what;
    s.send(r.wire);
    bool closed = false;
    const std::string got = s.read_until("", 1, 5.0, &closed);
    EXPECT_EQ(got.rfind("HTTP/1.1 " + std::to_string(r.status) + " ", 0), 0u)
        << r.what << ": " << got.substr(0, 200);
    EXPECT_NE(got.find("Connection: close"), std::string::npos) << r.what;
    EXPECT_TRUE(closed) << r.what;
    const std::vector<std::string> b = bodies(got);
    ASSERT_EQ(b.size(), 1u) << r.what << ": " << got.substr(0, 200);
    const json j = json::parse(b[0], nullptr, false);
    ASSERT_TRUE(j.is_object()) << r.what << ": " << b[0];
    EXPECT_EQ(j["error"]["code"], r.status) << r.what;
    EXPECT_FALSE(j["error"]["message"].get<std::string>().empty()) << r.what;
  }
  // The server is alive and counted the refusals.
  httplib::Client c = server.client();
  const auto res = c.Get("/health");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
}

TEST(HttpConnection, ExpectContinueAndHttp10) {
  Running server(ServerOptions{});
  const Tokenizer& tok = tiny_model().tokenizer;
  {
    RawSocket s(server.port());
    ASSERT_TRUE(s.connected());
    const std::string body = json{{"tokens", {42}}}.dump();
    s.send("POST /detokenize HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: " +
           std::to_string(body.size()) + "\r\n\r\n");
    const std::string interim = s.read_until("\r\n\r\n", 1, 5.0);
    EXPECT_EQ(interim, "HTTP/1.1 100 Continue\r\n\r\n");
    s.send(body);
    const std::string got = s.read_until("}", 1, 5.0);
    const std::vector<std::string> b = bodies(got);
    ASSERT_EQ(b.size(), 1u) << got;
    EXPECT_EQ(json::parse(b[0])["content"], tok.decode(std::vector<int32_t>{42}));
  }
  {  // HTTP/1.0: answered, then closed
    RawSocket s(server.port());
    ASSERT_TRUE(s.connected());
    s.send("GET /health HTTP/1.0\r\n\r\n");
    bool closed = false;
    const std::string got = s.read_until("", 1, 5.0, &closed);
    EXPECT_EQ(got.rfind("HTTP/1.1 200 ", 0), 0u) << got;
    EXPECT_NE(got.find("Connection: close"), std::string::npos) << got;
    EXPECT_TRUE(closed);
  }
  {  // HTTP/1.0 with keep-alive: two requests on one connection
    RawSocket s(server.port());
    ASSERT_TRUE(s.connected());
    const std::string req = "GET /health HTTP/1.0\r\nConnection: keep-alive\r\n\r\n";
    s.send(req + req);
    const std::string got = s.read_until("{\"status\":\"ok\"}", 2, 5.0);
    EXPECT_EQ(bodies(got).size(), 2u) << got;
  }
  {  // HTTP/1.0 stream: no chunked coding, the close ends the body
    RawSocket s(server.port());
    ASSERT_TRUE(s.connected());
    const std::string body = json{{"prompt", "Once"}, {"max_tokens", 3}, {"stream", true}}.dump();
    s.send("POST /v1/completions HTTP/1.0\r\nContent-Length: " + std::to_string(body.size()) +
           "\r\n\r\n" + body);
    bool closed = false;
    const std::string got = s.read_until("", 1, 30.0, &closed);
    EXPECT_TRUE(closed);
    EXPECT_EQ(got.find("Transfer-Encoding"), std::string::npos) << got;
    EXPECT_NE(got.find("data: [DONE]"), std::string::npos) << got;
  }
}

}  // namespace
}  // namespace snapkv::serve
