// Request bodies of the server (serve/server.h), parsed and checked field by field: a malformed
// body, an unknown field or a mistyped one is an HttpError (400) naming the field.
//
// Promises: every field of OpenAI's completions and chat-completions request schemas is accepted;
// what the engine implements is parsed into CompletionRequest, what it cannot do is either
// ignored (metadata, store, user, logit_bias, tools without a required call, ...: docs/SERVER.md
// lists them) or refused with a 400 naming why (a tool call required by tool_choice, a
// response_format other than text, image or audio content parts, tool messages).
// Leaves out: limits that depend on the server's options (n, max_tokens: server.cpp checks them).
// Private to serve/.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "snapkv/kv/core/spec.h"
#include "snapkv/model/sampler.h"

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

[[noreturn]] inline void bad_request(const std::string& message) {
  throw HttpError(400, "invalid_request_error", message);
}

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
  std::string role;  // system | user | assistant ("developer" is read as "system")
  std::string content;
};

// One prompt of /v1/completions: text, or token ids given directly.
struct PromptInput {
  std::string text;
  std::vector<int32_t> tokens;  // non-empty when the prompt was given as token ids
};

struct CompletionRequest {
  std::string model;
  std::vector<PromptInput> prompts;   // /v1/completions (a list prompt: one entry each)
  std::vector<ChatMessage> messages;  // /v1/chat/completions
  std::optional<size_t> max_tokens;   // max_completion_tokens, else max_tokens
  size_t n = 1;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  SamplerConfig sampler;       // temperature, top_p, top_k, min_p, penalties, seed, logit_bias
  std::vector<std::string> stop;
  bool ignore_eos = false;  // llama-server's field: end-of-generation tokens banned
  int top_logprobs = -1;    // -1: no logprobs; chat: logprobs + top_logprobs; completions: logprobs
  bool echo = false;        // completions: the prompt text before the completion
  std::string cache_id;     // present but empty: refused
  CacheOptions cache;
};

struct CacheRequest {
  std::string document;
  CacheOptions cache;
  bool save = false;
};

// /tokenize {content, add_special?, parse_special?, with_pieces?} and /detokenize {tokens}.
struct TokenizeRequest {
  std::string content;
  bool add_special = true;
  bool parse_special = false;
  bool with_pieces = false;
};

CompletionRequest parse_completion(const std::string& body, bool chat);
CacheRequest parse_cache_request(const std::string& body);
TokenizeRequest parse_tokenize(const std::string& body);
std::vector<int32_t> parse_detokenize(const std::string& body);

}  // namespace snapkv::serve
