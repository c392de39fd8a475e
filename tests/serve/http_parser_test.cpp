// The HTTP layer's request parsing (src/serve/http/http_parser.h) without sockets: a table of
// heads and the status each is answered with (0: accepted; an HTTP/1.1 head without one Host
// field: 400) and what was read from it, the end of
// a head found across reads, partial heads over the limits, chunked bodies fed in pieces, and the
// connection's phases over pipelined bytes (serve/http/http_connection.h).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "serve/http/http_connection.h"
#include "serve/http/http_parser.h"

namespace snapkv::serve::http {
namespace {

struct HeadCase {
  const char* what;
  std::string head;
  int status;  // 0: accepted
  BodyKind body = BodyKind::none;
  size_t length = 0;
  bool keep_alive = true;
};

TEST(HttpParser, HeadTable) {
  HeadLimits limits;
  limits.max_body = 1000;
  const std::string big_line(9000, 'a');
  std::string many_fields = "GET / HTTP/1.1\r\n";
  for (int i = 0; i < 101; ++i) many_fields += "X-" + std::to_string(i) + ": y\r\n";
  many_fields += "\r\n";
  const std::vector<HeadCase> cases = {
      {"plain GET", "GET /health HTTP/1.1\r\nHost: x\r\n\r\n", 0},
      {"bare LF line ends", "GET / HTTP/1.1\nHost: x\n\n", 0},
      {"POST with a length",
       "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 12\r\n\r\n", 0,
       BodyKind::length, 12},
      {"zero length", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n", 0, BodyKind::none,
       0},
      {"repeated equal lengths",
       "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-length: 5\r\n\r\n", 0,
       BodyKind::length, 5},
      {"chunked", "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n", 0,
       BodyKind::chunked},
      {"HTTP/1.0 closes", "GET / HTTP/1.0\r\n\r\n", 0, BodyKind::none, 0, false},
      {"HTTP/1.0 keep-alive", "GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n", 0, BodyKind::none,
       0, true},
      {"Connection: close", "GET / HTTP/1.1\r\nHost: x\r\nConnection: foo, close\r\n\r\n", 0,
       BodyKind::none, 0, false},
      {"absolute-form target",
       "GET http://example.com/health HTTP/1.1\r\nHost: example.com\r\n\r\n", 0},
      {"Expect: 100-continue",
       "POST / HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n", 0,
       BodyKind::length, 3},
      {"HTTP/1.1 without Host", "GET /health HTTP/1.1\r\n\r\n", 400},
      {"HTTP/1.1 POST without Host", "POST / HTTP/1.1\r\nContent-Length: 3\r\n\r\n", 400},
      {"two Host fields", "GET / HTTP/1.1\r\nHost: x\r\nhost: y\r\n\r\n", 400},
      {"two Host fields on HTTP/1.0", "GET / HTTP/1.0\r\nHost: x\r\nHost: x\r\n\r\n", 400},
      {"HTTP/1.0 with Host", "GET / HTTP/1.0\r\nHost: x\r\n\r\n", 0, BodyKind::none, 0, false},
      {"empty request line", "\r\n\r\n", 400},
      {"two fields in the request line", "GET /\r\n\r\n", 400},
      {"four fields in the request line", "GET / HTTP/1.1 x\r\n\r\n", 400},
      {"method not a token", "G(T / HTTP/1.1\r\n\r\n", 400},
      {"target not a path", "GET health HTTP/1.1\r\n\r\n", 400},
      {"version garbage", "GET / HTTX/1.1\r\n\r\n", 400},
      {"version 2.0", "GET / HTTP/2.0\r\n\r\n", 505},
      {"version 1.2", "GET / HTTP/1.2\r\n\r\n", 505},
      {"escaped NUL in the path", "GET /a%00b HTTP/1.1\r\n\r\n", 400},
      {"field without a colon", "GET / HTTP/1.1\r\nHost x\r\n\r\n", 400},
      {"space before the colon", "GET / HTTP/1.1\r\nHost : x\r\n\r\n", 400},
      {"obsolete folding", "GET / HTTP/1.1\r\nX-A: 1\r\n  2\r\n\r\n", 400},
      {"control character in a value", "GET / HTTP/1.1\r\nX-A: 1\x01 2\r\n\r\n", 400},
      {"bare CR", "GET / HTTP/1.1\r\nX-A: 1\r2\r\n\r\n", 400},
      {"negative length", "POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 400},
      {"length not a number", "POST / HTTP/1.1\r\nContent-Length: 12abc\r\n\r\n", 400},
      {"empty length", "POST / HTTP/1.1\r\nContent-Length: \r\n\r\n", 400},
      {"length with a sign", "POST / HTTP/1.1\r\nContent-Length: +5\r\n\r\n", 400},
      {"length list", "POST / HTTP/1.1\r\nContent-Length: 5, 5\r\n\r\n", 400},
      {"two different lengths", "POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
       400},
      {"length over the limit", "POST / HTTP/1.1\r\nContent-Length: 1001\r\n\r\n", 413},
      {"length overflowing 64 bits",
       "POST / HTTP/1.1\r\nContent-Length: 99999999999999999999999999\r\n\r\n", 413},
      {"length and chunked",
       "POST / HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n", 400},
      {"gzip coding", "POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 501},
      {"chunked not last", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked, gzip\r\n\r\n", 400},
      {"other expectation", "POST / HTTP/1.1\r\nExpect: something\r\n\r\n", 417},
      {"request line too long", "GET /" + big_line + " HTTP/1.1\r\n\r\n", 414},
      {"field line too long", "GET / HTTP/1.1\r\nX-A: " + big_line + "\r\n\r\n", 431},
      {"too many fields", many_fields, 431},
  };
  for (const HeadCase& c : cases) {
    const Head h = parse_head(c.head, limits);
    EXPECT_EQ(h.error.status, c.status) << c.what << ": " << h.error.message;
    if (c.status != 0) {
      EXPECT_FALSE(h.error.message.empty()) << c.what;
      continue;
    }
    EXPECT_EQ(h.body, c.body) << c.what;
    EXPECT_EQ(h.content_length, c.length) << c.what;
    EXPECT_EQ(h.request.keep_alive, c.keep_alive) << c.what;
  }
}

TEST(HttpParser, RequestFields) {
  const Head h = parse_head(
      "DELETE /v1/caches/a%2Fb%zz?x=1&y=2 HTTP/1.1\r\nHost: x\r\nAuthorization:  Bearer k "
      "\r\nX-Empty:\r\n\r\n",
      HeadLimits{});
  ASSERT_EQ(h.error.status, 0) << h.error.message;
  EXPECT_EQ(h.request.method, "DELETE");
  EXPECT_EQ(h.request.path, "/v1/caches/a/b%zz");  // a malformed escape is kept
  EXPECT_EQ(h.request.query, "x=1&y=2");
  EXPECT_EQ(h.request.minor_version, 1);
  EXPECT_EQ(h.request.get_header_value("authorization"), "Bearer k");
  EXPECT_TRUE(h.request.has_header("X-EMPTY"));
  EXPECT_EQ(h.request.get_header_value("X-Empty"), "");
  EXPECT_FALSE(h.request.has_header("Cookie"));
  EXPECT_TRUE(
      parse_head("POST / HTTP/1.1\r\nHost: x\r\nExpect: 100-Continue\r\n\r\n", {}).expect_continue);
}

TEST(HttpParser, HeadEndFoundAcrossReads) {
  const std::string head = "GET / HTTP/1.1\r\nHost: x\r\n\r\nGET /next";
  const size_t end = head.find("GET /next");
  // Every split point: a search that stopped at the split finds the same end.
  for (size_t split = 0; split <= head.size(); ++split) {
    const std::string first = head.substr(0, split);
    const size_t found = find_head_end(first, 0);
    if (found != 0) {
      EXPECT_EQ(found, end) << split;
      continue;
    }
    EXPECT_EQ(find_head_end(head, first.size()), end) << split;
  }
  EXPECT_EQ(find_head_end("GET / HTTP/1.1\nHost: x\n\nrest"), 24u);
  EXPECT_EQ(find_head_end("GET / HTTP/1.1\r\nHost: x\r\n"), 0u);
}

TEST(HttpParser, PartialHeadsOverTheLimits) {
  HeadLimits limits;
  limits.max_line = 100;
  limits.max_head = 300;
  EXPECT_EQ(check_partial_head("GET /abc HTTP/1.1\r\nHost: x", limits).status, 0);
  EXPECT_EQ(check_partial_head("GET /" + std::string(200, 'a'), limits).status, 414);
  EXPECT_EQ(check_partial_head("GET / HTTP/1.1\r\nX: " + std::string(200, 'a'), limits).status,
            431);
  std::string fields = "GET / HTTP/1.1\r\n";
  while (fields.size() <= 300) fields += "X-A: b\r\n";
  EXPECT_EQ(check_partial_head(fields, limits).status, 431);
}

// Feeds `wire` to a decoder in pieces of `step` bytes; returns the bytes it consumed in all.
size_t feed_in_pieces(ChunkedDecoder& d, const std::string& wire, size_t step) {
  size_t used = 0;
  std::string pending;
  for (size_t i = 0; i < wire.size() && !d.done() && d.error().status == 0; i += step) {
    pending += wire.substr(i, step);
    const size_t n = d.feed(pending);
    used += n;
    pending.erase(0, n);
  }
  return used;
}

TEST(HttpParser, ChunkedBodies) {
  const std::string wire = "5\r\nhello\r\n7;ext=1\r\n, world\r\n0\r\nX-Trailer: 1\r\n\r\nNEXT";
  for (const size_t step : {size_t{1}, size_t{3}, size_t{7}, wire.size()}) {
    ChunkedDecoder d{HeadLimits{}};
    const size_t used = feed_in_pieces(d, wire, step);
    ASSERT_TRUE(d.done()) << step << ": " << d.error().message;
    EXPECT_EQ(d.body(), "hello, world") << step;
    EXPECT_EQ(used, wire.size() - 4) << step;  // "NEXT" is the next request's
  }
  HeadLimits small;
  small.max_body = 8;
  struct Bad {
    const char* what;
    std::string wire;
    int status;
  };
  const std::vector<Bad> bad = {
      {"size not hex", "xyz\r\n", 400},
      {"empty size", "\r\n", 400},
      {"size over 64 bits", "11112222333344445\r\n", 400},
      {"data longer than its size", "2\r\nabc\r\n", 400},
      {"body over the limit", "5\r\nhello\r\n5\r\nworld\r\n", 413},
      {"one chunk over the limit", "ffffffffffffffff\r\n", 413},
  };
  for (const Bad& b : bad) {
    ChunkedDecoder d{small};
    feed_in_pieces(d, b.wire, 1);
    EXPECT_EQ(d.error().status, b.status) << b.what << ": " << d.error().message;
    EXPECT_FALSE(d.done()) << b.what;
  }
}

TEST(HttpConnection, PipelinedRequestsComeOutOneByOne) {
  ConnectionLimits limits;
  const Clock::time_point t = Clock::now();
  Connection c(-1, 0, t);
  c.in =
      "\r\nGET /a HTTP/1.1\r\nHost: x\r\n\r\nPOST /b HTTP/1.1\r\nHost: x\r\nContent-Length: "
      "3\r\n\r\nxyz"
      "POST /c HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\nGET /d";
  ASSERT_EQ(c.advance(limits, t), Connection::Step::ready);
  EXPECT_EQ(c.head.request.path, "/a");
  c.next_request(t);
  ASSERT_EQ(c.advance(limits, t), Connection::Step::ready);
  EXPECT_EQ(c.head.request.path, "/b");
  EXPECT_EQ(c.head.request.body, "xyz");
  c.next_request(t);
  ASSERT_EQ(c.advance(limits, t), Connection::Step::ready);
  EXPECT_EQ(c.head.request.path, "/c");
  EXPECT_EQ(c.head.request.body, "hi");
  c.next_request(t);
  EXPECT_EQ(c.advance(limits, t), Connection::Step::wait);  // "GET /d" is not a whole head
  EXPECT_EQ(c.phase, Connection::Phase::head);
  c.in += " HTTP/1.1\r\nHost: x\r\n\r\n";
  ASSERT_EQ(c.advance(limits, t), Connection::Step::ready);
  EXPECT_EQ(c.head.request.path, "/d");
  EXPECT_EQ(c.served, 3u);
}

TEST(HttpConnection, DeadlinesOfEachPhase) {
  ConnectionLimits limits;
  limits.read_timeout_s = 1;
  limits.head_timeout_s = 3;
  limits.body_timeout_s = 7;
  limits.keep_alive_timeout_s = 5;
  const Clock::time_point t0 = Clock::now();
  const auto at = [&](double s) {
    return t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
  };
  Connection c(-1, 0, t0);
  EXPECT_EQ(c.deadline(limits), at(5));  // idle
  c.in = "GET / HTTP/1.1\r\nHost: x\r\n";
  c.last_byte = at(0.5);
  ASSERT_EQ(c.advance(limits, at(0.5)), Connection::Step::wait);
  EXPECT_EQ(c.deadline(limits), at(1.5));  // the read timeout after the last byte
  c.last_byte = at(2.8);                   // bytes keep trickling in: the whole-head deadline holds
  EXPECT_EQ(c.deadline(limits), at(3.5));
  c.in += "Content-Length: 4\r\nExpect: 100-continue\r\n\r\nab";
  c.last_byte = at(3);
  ASSERT_EQ(c.advance(limits, at(3)), Connection::Step::wait);
  EXPECT_TRUE(c.continue_due);
  EXPECT_EQ(c.phase, Connection::Phase::body);
  c.last_byte = at(9.5);
  EXPECT_EQ(c.deadline(limits), at(10));  // body: 7 s from the end of the head
}

}  // namespace
}  // namespace snapkv::serve::http
