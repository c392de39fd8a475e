// HTTP/1.1 request parsing for the server's connection layer (serve/http/), pure functions over
// bytes already read (no sockets): where a request head ends, the head itself (request line,
// header fields, body framing, keep-alive, Expect) and a chunked request body, fed as it arrives.
// Refusals carry the status to answer: 400 (malformed), 413 (body over the limit, a count
// beyond 2^64-1 included), 414 (request line too long), 417 (an expectation other than
// 100-continue), 431 (a header line, the head or the field count over the limits), 501 (a
// transfer coding other than chunked), 505 (an HTTP version other than 1.0 / 1.1).
// Line ends are CRLF or a bare LF; obsolete line folding, a bare CR, NUL and other control
// characters in a field are refused; Content-Length together with Transfer-Encoding is refused
// (400), as are differing repeated Content-Length fields. An HTTP/1.1 request without a Host
// field, or any request with two, is a 400 (RFC 9112 3.2; HTTP/1.0 may omit it), checked after
// the framing so that a request refused for its body keeps that status. Leaves out: trailer
// fields (read and dropped), checking the Host value, absolute-form targets beyond dropping their
// scheme and authority.
// Private to serve/.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "serve/http/http_types.h"

namespace snapkv::serve::http {

struct HeadLimits {
  size_t max_line = 8192;      // bytes of one line (request line: 414, a field: 431)
  size_t max_head = 32768;     // bytes of the whole head (431)
  size_t max_fields = 100;     // header fields (431)
  size_t max_body = 8u << 20;  // Content-Length or decoded chunked bytes (413)
};

struct ParseError {
  int status = 0;  // 0: none
  std::string message;
};

enum class BodyKind { none, length, chunked };

struct Head {
  Request request;  // all but body and matches
  BodyKind body = BodyKind::none;
  size_t content_length = 0;
  bool expect_continue = false;  // Expect: 100-continue
  ParseError error;              // status != 0: refused (request holds what was read)
};

// The offset just past the blank line that ends the head in `buf`, or 0 while there is none.
// `from`: where the previous search stopped (bytes before it hold no end).
size_t find_head_end(std::string_view buf, size_t from = 0);

// A head not yet complete: a refusal when it can no longer fit the limits, status 0 otherwise.
ParseError check_partial_head(std::string_view buf, const HeadLimits& limits);

// A complete head: the bytes up to find_head_end(), blank line included.
Head parse_head(std::string_view head, const HeadLimits& limits);

// Percent-decodes a path ("%2F" -> "/"); a malformed escape is kept as it is. False for an
// escaped NUL.
bool decode_path(std::string_view in, std::string& out);

// A chunked body, decoded as its bytes arrive.
class ChunkedDecoder {
 public:
  explicit ChunkedDecoder(const HeadLimits& limits) : limits_(limits) {}
  // Consumes what it can of `in` (bytes after the ones consumed before) and returns how many;
  // stops at the end of the body (done()) or at a refusal (error().status != 0).
  size_t feed(std::string_view in);
  bool done() const { return state_ == State::done; }
  const ParseError& error() const { return error_; }
  std::string& body() { return body_; }

 private:
  enum class State { size, data, data_end, trailer, done, failed };
  size_t fail(int status, std::string message);
  HeadLimits limits_;
  State state_ = State::size;
  std::string line_;        // a size or trailer line read so far
  uint64_t remaining_ = 0;  // bytes of the current chunk still due
  size_t trailer_bytes_ = 0;
  std::string body_;
  ParseError error_;
};

}  // namespace snapkv::serve::http
