// Request bodies of the server (serve/server.h), parsed and checked field by field: a malformed
// body, an unknown field or a mistyped one is an HttpError (400) naming the field. Private to
// serve/.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "snapkv/kv/core/spec.h"

namespace snapkv::serve {

class HttpError : public std::runtime_error {
 public:
  HttpError(int status, std::string type, const std::string& message)
      : std::runtime_error(message), status_(status), type_(std::move(type)) {}
  int status() const { return status_; }
  const std::string& type() const { return type_; }

 private:
  int status_;
  std::string type_;
};

// Per-request cache options; empty fields take the server's defaults. Besides method, keep,
// budget and codec, a request may set any option of the cache spec by its name or an alias
// ("window", "sinks", "kivi_residual", ...: kv/core/spec.h), checked by the spec's own rules.
struct CacheOptions {
  std::string method;
  std::optional<double> keep;
  std::optional<size_t> budget;
  std::string codec;
  std::vector<std::pair<std::string, OptionValue>> options;  // spec options, as given

  bool any() const {
    return !method.empty() || keep || budget || !codec.empty() || !options.empty();
  }
};

struct ChatMessage {
  std::string role;  // system | user | assistant
  std::string content;
};

struct CompletionRequest {
  std::string model;
  std::string prompt;                 // /v1/completions
  std::vector<ChatMessage> messages;  // /v1/chat/completions
  std::optional<size_t> max_tokens;
  bool stream = false;
  float temperature = 0.0f;
  float top_p = 1.0f;
  uint64_t seed = 0;
  std::string cache_id;
  CacheOptions cache;
};

struct CacheRequest {
  std::string document;
  CacheOptions cache;
  bool save = false;
};

CompletionRequest parse_completion(const std::string& body, bool chat);
CacheRequest parse_cache_request(const std::string& body);

}  // namespace snapkv::serve
