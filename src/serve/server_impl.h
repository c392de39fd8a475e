// The server's private state (serve/server.h), shared by its route files: server.cpp (set-up,
// connections, authentication, logging, caches, tokenize) and openai_routes.cpp (completions).
// Private to serve/.
#pragma once

#include "serve/http/http_server.h"

#include <atomic>
#include <chrono>
#include <ctime>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "serve/decode_batcher.h"
#include "serve/metrics.h"
#include "serve/requests.h"
#include "serve/work_queue.h"
#include "snapkv/kv/core/method.h"
#include "snapkv/model/chat_template.h"
#include "snapkv/model/llama.h"
#include "snapkv/serve/cache_store.h"
#include "snapkv/serve/server.h"

namespace snapkv::serve {

using nlohmann::json;

std::string error_body(const std::string& message, const std::string& type, int status);
void send_error(http::Response& res, int status, const std::string& type,
                const std::string& message);
void send_json(http::Response& res, const json& j);
std::string dump(const json& j);  // invalid UTF-8 as U+FFFD

// What the request on this handler thread did, for its log line and the counters (reset
// before each request; streamed responses fill it from the same thread).
RequestRecord& current_record();

json doc_json(const CacheStore::Listed& d);
CacheStore::Listed listed(const StoredPrompt& e, bool in_memory);

// How a prompt was started (the response's "snapkv" object, the log line).
struct Reuse {
  std::string kind = "none";  // none | exact | prefix | document
  size_t tokens = 0;          // prompt tokens not prefilled again
};

struct Server::Impl {
  const LlamaModel& model;
  const Tokenizer& tokenizer;
  ServerOptions options;
  http::HttpServer http_server;
  WorkQueue queue;
  // The running requests' decode steps, batched (serve/decode_batcher.h).
  DecodeBatcher batcher;
  Metrics metrics;
  std::atomic<bool> stopping{false};
  // Prefilled prompts and documents: memory, --cache-dir, --cache-store (serve/cache_store.h).
  std::unique_ptr<CacheStore> store;
  const uint64_t id_salt = std::random_device{}();  // ids differ across server runs
  std::atomic<uint64_t> next_id{1};
  // /v1/chat/completions renders with the model's template; without one (or one we do not
  // recognise) chat requests get chat_error, unless options.chat_template is off.
  std::optional<ChatTemplate> chat_template;
  std::string chat_error;
  std::vector<std::string> model_ids;  // options.model_id, then general.name when it differs

  Impl(const LlamaModel& m, const Tokenizer& t, ServerOptions o);

  std::string new_id(const char* prefix);
  std::vector<int32_t> chat_tokens(const std::vector<serve::ChatMessage>& messages,
                                   bool after_document) const;
  std::vector<int32_t> prompt_tokens(const PromptInput& p, bool after_document) const;
  SessionOptions session_options() const;
  std::shared_ptr<WorkQueue::Ticket> take_slot();
  // The cache of a request: its options over the defaults (a document's: /v1/caches).
  CacheConfig make_config(const CacheOptions& c, size_t n_tokens, std::string& method,
                          bool document = false) const;
  // Refuses an empty prompt, one over max_prompt_tokens, or cached + prompt + to_generate over
  // the context (to_generate <= n_ctx, so the sum cannot overflow).
  void check_fits(const std::vector<int32_t>& tokens, size_t cached, size_t to_generate) const;
  // The document `id` (400 for a name that is not an id, 404 when no tier has it).
  std::shared_ptr<const StoredPrompt> find(const std::string& id);
  // The session after `tokens` with `config` and the logits of its last position: the stored
  // state of the same prompt (exact reuse), a stored uncompressed prefix extended by the rest
  // (prefix reuse), or a fresh prefill; what was reused goes to `reuse`. A new state is kept.
  std::pair<LlamaSession, std::vector<float>> start_prompt(const std::vector<int32_t>& tokens,
                                                           const CacheConfig& config,
                                                           const std::string& method, Reuse& reuse);
  void keep_prompt(const std::vector<int32_t>& tokens, const CacheConfig& config,
                   const std::string& method, const LlamaSession& session,
                   const std::vector<float>& logits, bool document);
  void create_cache(const http::Request& req, http::Response& res);
  void routes();

  // openai_routes.cpp
  void completion(const http::Request& req, http::Response& res, bool chat);
  json models_json() const;
};

}  // namespace snapkv::serve
