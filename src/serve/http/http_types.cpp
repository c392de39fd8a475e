// The request and response of the HTTP layer (serve/http/http_types.h).
#include "serve/http/http_types.h"

#include <utility>

namespace snapkv::serve::http {

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    char x = a[i];
    char y = b[i];
    if (x >= 'A' && x <= 'Z') x = static_cast<char>(x - 'A' + 'a');
    if (y >= 'A' && y <= 'Z') y = static_cast<char>(y - 'A' + 'a');
    if (x != y) return false;
  }
  return true;
}

bool Request::has_header(std::string_view name) const {
  for (const Header& h : headers) {
    if (iequals(h.name, name)) return true;
  }
  return false;
}

std::string Request::get_header_value(std::string_view name) const {
  for (const Header& h : headers) {
    if (iequals(h.name, name)) return h.value;
  }
  return "";
}

void Response::set_header(std::string name, std::string value) {
  for (Header& h : headers) {
    if (iequals(h.name, name)) {
      h.value = std::move(value);
      return;
    }
  }
  headers.push_back({std::move(name), std::move(value)});
}

std::string Response::get_header_value(std::string_view name) const {
  for (const Header& h : headers) {
    if (iequals(h.name, name)) return h.value;
  }
  return "";
}

void Response::set_content(std::string content, std::string content_type) {
  body = std::move(content);
  provider = nullptr;
  set_header("Content-Type", std::move(content_type));
}

void Response::set_chunked_content_provider(std::string content_type, ContentProvider p) {
  body.clear();
  provider = std::move(p);
  set_header("Content-Type", std::move(content_type));
}

}  // namespace snapkv::serve::http
