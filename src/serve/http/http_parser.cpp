// HTTP/1.1 request parsing (serve/http/http_parser.h).
#include "serve/http/http_parser.h"

#include <limits>
#include <utility>
#include <vector>

namespace snapkv::serve::http {
namespace {

// RFC 9110 tchar: the characters of a method, a field name or a token.
bool is_tchar(char c) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) return true;
  switch (c) {
    case '!':
    case '#':
    case '$':
    case '%':
    case '&':
    case '\'':
    case '*':
    case '+':
    case '-':
    case '.':
    case '^':
    case '_':
    case '`':
    case '|':
    case '~':
      return true;
    default:
      return false;
  }
}

bool is_token(std::string_view s) {
  if (s.empty()) return false;
  for (const char c : s) {
    if (!is_tchar(c)) return false;
  }
  return true;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// The comma-separated elements of a field value, trimmed, empty ones dropped.
std::vector<std::string_view> split_list(std::string_view v) {
  std::vector<std::string_view> out;
  while (true) {
    const size_t comma = v.find(',');
    const std::string_view item = trim(v.substr(0, comma));
    if (!item.empty()) out.push_back(item);
    if (comma == std::string_view::npos) break;
    v.remove_prefix(comma + 1);
  }
  return out;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// A decimal count; a value beyond 2^64-1 saturates (refused later as over the body limit).
bool parse_count(std::string_view s, uint64_t& out) {
  if (s.empty()) return false;
  out = 0;
  for (const char c : s) {
    if (c < '0' || c > '9') return false;
    const uint64_t digit = static_cast<uint64_t>(c - '0');
    if (out > (std::numeric_limits<uint64_t>::max() - digit) / 10) {
      out = std::numeric_limits<uint64_t>::max();
    } else {
      out = out * 10 + digit;
    }
  }
  return true;
}

// The lines of a head: each without its line end; false for a bare CR inside a line.
bool next_line(std::string_view& rest, std::string_view& line) {
  const size_t nl = rest.find('\n');
  line = rest.substr(0, nl);
  rest.remove_prefix(nl == std::string_view::npos ? rest.size() : nl + 1);
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  return line.find('\r') == std::string_view::npos;
}

bool parse_request_line(std::string_view line, Head& h) {
  Request& r = h.request;
  const size_t sp1 = line.find(' ');
  const size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos || line.find(' ', sp2 + 1) != std::string_view::npos) {
    h.error = {400, "malformed request line: expected 'METHOD TARGET HTTP/1.1'"};
    return false;
  }
  r.method = std::string(line.substr(0, sp1));
  r.target = std::string(line.substr(sp1 + 1, sp2 - sp1 - 1));
  const std::string_view version = line.substr(sp2 + 1);
  if (!is_token(r.method)) {
    h.error = {400, "malformed request line: the method is not a token"};
    return false;
  }
  if (version.size() != 8 || version.substr(0, 5) != "HTTP/" || version[6] != '.' ||
      version[5] < '0' || version[5] > '9' || version[7] < '0' || version[7] > '9') {
    h.error = {400, "malformed request line: the version is not HTTP/<digit>.<digit>"};
    return false;
  }
  if (version[5] != '1' || (version[7] != '0' && version[7] != '1')) {
    h.error = {505, "HTTP version " + std::string(version) + " is not supported (1.0 and 1.1 are)"};
    return false;
  }
  r.minor_version = version[7] - '0';
  std::string_view target = r.target;
  for (const char c : target) {
    if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f) {
      h.error = {400, "malformed request target: control character"};
      return false;
    }
  }
  // absolute-form (http://host/path): the path is what routes see.
  for (const std::string_view scheme : {"http://", "https://"}) {
    if (target.size() >= scheme.size() && iequals(target.substr(0, scheme.size()), scheme)) {
      target.remove_prefix(scheme.size());
      const size_t slash = target.find_first_of("/?");
      target = slash == std::string_view::npos ? std::string_view("/") : target.substr(slash);
      if (target.front() == '?') target = "/";
    }
  }
  if (target == "*" && r.method == "OPTIONS") {
    r.path = "*";
    return true;
  }
  if (target.empty() || target.front() != '/') {
    h.error = {400, "malformed request target: expected a path starting with '/'"};
    return false;
  }
  const size_t q = target.find('?');
  if (q != std::string_view::npos) r.query = std::string(target.substr(q + 1));
  const std::string_view raw_path = target.substr(0, q);
  if (!decode_path(raw_path.substr(0, raw_path.find('#')), r.path)) {
    h.error = {400, "malformed request target: an escaped NUL"};
    return false;
  }
  return true;
}

bool valid_field_value(std::string_view v) {
  for (const char c : v) {
    const auto u = static_cast<unsigned char>(c);
    if ((u < 0x20 && c != '\t') || u == 0x7f) return false;
  }
  return true;
}

// Body framing, keep-alive and Expect from the fields.
void read_fields(Head& h, const HeadLimits& limits) {
  Request& r = h.request;
  bool have_length = false;
  uint64_t length = 0;
  bool have_te = false;
  bool chunked_last = false;
  std::string other_coding;
  bool conn_close = false;
  bool conn_keep = false;
  for (const Header& f : r.headers) {
    if (iequals(f.name, "Content-Length")) {
      uint64_t n = 0;
      if (!parse_count(f.value, n)) {
        h.error = {400, "Content-Length '" + f.value.substr(0, 40) + "' is not a decimal count"};
        return;
      }
      if (have_length && n != length) {
        h.error = {400, "two different Content-Length fields"};
        return;
      }
      have_length = true;
      length = n;
    } else if (iequals(f.name, "Transfer-Encoding")) {
      for (const std::string_view coding : split_list(f.value)) {
        if (have_te && chunked_last) {
          h.error = {400, "Transfer-Encoding: chunked must be the last coding"};
          return;
        }
        have_te = true;
        chunked_last = iequals(coding, "chunked");
        if (!chunked_last && other_coding.empty()) other_coding = std::string(coding.substr(0, 40));
      }
    } else if (iequals(f.name, "Connection")) {
      for (const std::string_view option : split_list(f.value)) {
        conn_close |= iequals(option, "close");
        conn_keep |= iequals(option, "keep-alive");
      }
    } else if (iequals(f.name, "Expect")) {
      if (!iequals(trim(f.value), "100-continue")) {
        h.error = {417,
                   "Expect '" + f.value.substr(0, 40) + "' is not supported (only 100-continue)"};
        return;
      }
      h.expect_continue = true;
    }
  }
  r.keep_alive = r.minor_version >= 1 ? !conn_close : conn_keep && !conn_close;
  if (have_te) {
    if (have_length) {
      h.error = {400, "both Content-Length and Transfer-Encoding"};
    } else if (!other_coding.empty()) {
      h.error = {501, "transfer coding '" + other_coding + "' is not supported (only chunked)"};
    } else if (!chunked_last) {
      h.error = {400, "Transfer-Encoding without chunked"};
    } else {
      h.body = BodyKind::chunked;
    }
    return;
  }
  if (have_length) {
    if (length > limits.max_body) {
      h.error = {413,
                 "request body of " +
                     (length == std::numeric_limits<uint64_t>::max() ? std::string("2^64 or more")
                                                                     : std::to_string(length)) +
                     " bytes exceeds the limit of " + std::to_string(limits.max_body)};
      return;
    }
    h.content_length = static_cast<size_t>(length);
    h.body = length > 0 ? BodyKind::length : BodyKind::none;
  }
}

// RFC 9112 3.2: an HTTP/1.1 request has exactly one Host field (HTTP/1.0 may omit it).
void check_host(Head& h) {
  size_t hosts = 0;
  for (const Header& f : h.request.headers) hosts += iequals(f.name, "Host") ? 1 : 0;
  if (hosts == 0 && h.request.minor_version >= 1) {
    h.error = {400, "an HTTP/1.1 request without a Host header field"};
  } else if (hosts > 1) {
    h.error = {400, "more than one Host header field"};
  }
}

}  // namespace

size_t find_head_end(std::string_view buf, size_t from) {
  for (size_t i = buf.find('\n', from); i != std::string_view::npos; i = buf.find('\n', i + 1)) {
    if (i >= 1 && buf[i - 1] == '\n') return i + 1;
    if (i >= 2 && buf[i - 1] == '\r' && buf[i - 2] == '\n') return i + 1;
  }
  return 0;
}

ParseError check_partial_head(std::string_view buf, const HeadLimits& limits) {
  if (buf.size() > limits.max_head) {
    return {431, "request head over " + std::to_string(limits.max_head) + " bytes"};
  }
  const size_t nl = buf.rfind('\n');
  const size_t line = nl == std::string_view::npos ? buf.size() : buf.size() - nl - 1;
  if (line > limits.max_line) {
    if (nl == std::string_view::npos) {
      return {414, "request line over " + std::to_string(limits.max_line) + " bytes"};
    }
    return {431, "header line over " + std::to_string(limits.max_line) + " bytes"};
  }
  return {};
}

Head parse_head(std::string_view head, const HeadLimits& limits) {
  Head h;
  if (head.size() > limits.max_head) {
    h.error = {431, "request head over " + std::to_string(limits.max_head) + " bytes"};
    return h;
  }
  std::string_view rest = head;
  std::string_view line;
  if (!next_line(rest, line)) {
    h.error = {400, "malformed request line: a bare CR"};
    return h;
  }
  if (line.size() > limits.max_line) {
    h.error = {414, "request line over " + std::to_string(limits.max_line) + " bytes"};
    return h;
  }
  if (!parse_request_line(line, h)) return h;
  while (true) {
    if (!next_line(rest, line)) {
      h.error = {400, "malformed header field: a bare CR"};
      return h;
    }
    if (line.empty()) break;
    if (line.size() > limits.max_line) {
      h.error = {431, "header line over " + std::to_string(limits.max_line) + " bytes"};
      return h;
    }
    if (line.front() == ' ' || line.front() == '\t') {
      h.error = {400, "malformed header field: obsolete line folding"};
      return h;
    }
    const size_t colon = line.find(':');
    const std::string_view name = line.substr(0, colon);
    if (colon == std::string_view::npos || !is_token(name)) {
      h.error = {400, "malformed header field: expected 'Name: value'"};
      return h;
    }
    const std::string_view value = trim(line.substr(colon + 1));
    if (!valid_field_value(value)) {
      h.error = {400, "malformed header field '" + std::string(name) + "': a control character"};
      return h;
    }
    if (h.request.headers.size() == limits.max_fields) {
      h.error = {431, "more than " + std::to_string(limits.max_fields) + " header fields"};
      return h;
    }
    h.request.headers.push_back({std::string(name), std::string(value)});
  }
  read_fields(h, limits);
  if (h.error.status == 0) check_host(h);
  return h;
}

bool decode_path(std::string_view in, std::string& out) {
  out.clear();
  out.reserve(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] == '%' && i + 2 < in.size() && hex_value(in[i + 1]) >= 0 &&
        hex_value(in[i + 2]) >= 0) {
      const char c = static_cast<char>(hex_value(in[i + 1]) * 16 + hex_value(in[i + 2]));
      if (c == '\0') return false;
      out.push_back(c);
      i += 2;
    } else {
      out.push_back(in[i]);
    }
  }
  return true;
}

size_t ChunkedDecoder::fail(int status, std::string message) {
  state_ = State::failed;
  error_ = {status, std::move(message)};
  return 0;
}

size_t ChunkedDecoder::feed(std::string_view in) {
  size_t used = 0;
  while (used < in.size() && state_ != State::done && state_ != State::failed) {
    if (state_ == State::data) {
      const size_t take = static_cast<size_t>(std::min<uint64_t>(remaining_, in.size() - used));
      body_.append(in.data() + used, take);
      used += take;
      remaining_ -= take;
      if (remaining_ == 0) state_ = State::data_end;
      continue;
    }
    // A line: chunk size, the CRLF after a chunk's data, or a trailer field.
    const size_t nl = in.find('\n', used);
    const size_t end = nl == std::string_view::npos ? in.size() : nl;
    line_.append(in.data() + used, end - used);
    used = nl == std::string_view::npos ? in.size() : nl + 1;
    if (line_.size() > limits_.max_line) {
      return fail(400, "chunked body: a line over " + std::to_string(limits_.max_line) + " bytes");
    }
    if (nl == std::string_view::npos) break;
    if (!line_.empty() && line_.back() == '\r') line_.pop_back();
    const std::string line = std::move(line_);
    line_.clear();
    if (state_ == State::data_end) {
      if (!line.empty()) return fail(400, "chunked body: a chunk longer than its size");
      state_ = State::size;
    } else if (state_ == State::size) {
      const std::string_view size = trim(std::string_view(line).substr(0, line.find(';')));
      uint64_t n = 0;
      if (size.empty() || size.size() > 16) {
        return fail(400, "chunked body: chunk size '" + line.substr(0, 40) + "' is not hex");
      }
      for (const char c : size) {
        const int v = hex_value(c);
        if (v < 0)
          return fail(400, "chunked body: chunk size '" + line.substr(0, 40) + "' is not hex");
        n = n * 16 + static_cast<uint64_t>(v);
      }
      if (n > limits_.max_body - body_.size()) {
        return fail(413, "chunked request body over the limit of " +
                             std::to_string(limits_.max_body) + " bytes");
      }
      remaining_ = n;
      state_ = n == 0 ? State::trailer : State::data;
    } else {  // trailer fields until the blank line, read and dropped
      if (line.empty()) {
        state_ = State::done;
      } else if ((trailer_bytes_ += line.size()) > limits_.max_head) {
        return fail(431,
                    "chunked body: trailer over " + std::to_string(limits_.max_head) + " bytes");
      }
    }
  }
  return used;
}

}  // namespace snapkv::serve::http
