// Writing one response of the HTTP layer (serve/http/) to a non-blocking socket: the status
// line, the handler's headers, Content-Length or (a content provider on HTTP/1.1) chunked
// transfer coding, Connection, and the body; HEAD gets the head only. A write that makes no
// progress for the write timeout fails the response; a content provider's sink reports a client
// that is gone (its write fails, is_writable() turns false).
// Leaves out: compression, ranges, trailers.
// Private to serve/.
#pragma once

#include "serve/http/http_types.h"

namespace snapkv::serve::http {

enum class Written {
  failed,     // the client is gone or stopped reading: close at once
  keep_open,  // complete; the connection serves the next request
  close,      // complete, answered with "Connection: close" (or a streamed HTTP/1.0 body)
};

// `keep_alive`: the connection may serve another request after this one.
Written write_response(int fd, const Request& req, Response& res, bool keep_alive,
                       double write_timeout_s);

// Writes all of `data`; false when the socket fails or makes no progress for `timeout_s`.
bool send_all(int fd, const char* data, size_t n, double timeout_s);

// The reason phrase of a status ("Not Found"), "" for one not listed.
const char* reason_phrase(int status);

}  // namespace snapkv::serve::http
