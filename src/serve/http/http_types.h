// The request and response of the server's HTTP/1.1 layer (serve/http/): what a route handler
// reads (method, path, headers, body, the groups of a regex route) and writes (status, headers, a
// body, or a content provider that streams through a sink reporting a closed client).
// Leaves out: multipart bodies, query-string parsing (the raw query is kept), cookies.
// Private to serve/.
#pragma once

#include <cstddef>
#include <functional>
#include <regex>
#include <string>
#include <string_view>
#include <vector>

namespace snapkv::serve::http {

// ASCII case-insensitive equality (header names, tokens).
bool iequals(std::string_view a, std::string_view b);

struct Header {
  std::string name;
  std::string value;
};

struct Request {
  std::string method;     // as sent ("GET", "POST", ...)
  std::string target;     // as sent: path and query
  std::string path;       // the target's path, percent-decoded
  std::string query;      // after '?', as sent
  int minor_version = 1;  // HTTP/1.<minor_version>
  std::vector<Header> headers;
  std::string body;        // decoded (a chunked body's chunks joined)
  std::smatch matches;     // the groups of the regex route that took the request (over `path`)
  bool keep_alive = true;  // what the client asked for (version and Connection)

  bool has_header(std::string_view name) const;
  // The first value of `name`, or "" when absent.
  std::string get_header_value(std::string_view name) const;
};

// Where a streamed body goes. write() returns false once the client is gone or stopped reading
// for the write timeout; the provider should then end.
class DataSink {
 public:
  virtual ~DataSink() = default;
  virtual bool write(const char* data, size_t n) = 0;
  virtual bool is_writable() const = 0;
  virtual void done() = 0;  // the body is complete
};

// Called until it calls sink.done() or returns false (offset: bytes written so far).
using ContentProvider = std::function<bool(size_t offset, DataSink& sink)>;

struct Response {
  int status = -1;  // -1: no handler answered
  std::vector<Header> headers;
  std::string body;
  ContentProvider provider;  // set: the body is streamed (chunked on HTTP/1.1)

  void set_header(std::string name, std::string value);
  std::string get_header_value(std::string_view name) const;
  void set_content(std::string content, std::string content_type);
  void set_chunked_content_provider(std::string content_type, ContentProvider p);
};

using Handler = std::function<void(const Request&, Response&)>;

}  // namespace snapkv::serve::http
