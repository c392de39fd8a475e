// `snapkv serve`: a local HTTP server over one loaded model, with the endpoints people already
// script against plus a table of compressed documents.
//
// Endpoints (JSON in and out; errors are {"error": {"message", "type", "code"}} with a 4xx/5xx):
//   GET  /health                  {"status": "ok"}
//   GET  /v1/models               the one model, OpenAI list shape
//   POST /v1/completions          {prompt, max_tokens?, stream?, temperature?, top_p?, seed?,
//                                  cache_id?, method?, keep?, budget?, codec?, model?}
//   POST /v1/chat/completions     the same with messages [{role, content}] instead of prompt
//   POST /v1/caches               {document, method?, keep?, budget?, codec?, save?}: the document
//                                 is prefilled and compressed once (question-agnostic), an id out
//   GET  /v1/caches, GET/DELETE /v1/caches/{id}
//   GET  /                        the web chat page (src/serve/web/index.html, compiled in)
// Every prefilled prompt and document is kept in a content-addressed store (serve/cache_store.h:
// memory LRU, --cache-dir, a shared Redis store): a repeated prompt or document is not prefilled
// again, an uncompressed prompt's stored prefix is extended; "snapkv.reuse" says which.
// A completion with cache_id appends its prompt (or rendered messages) to a copy of that cached
// document's compressed cache: the document is never prefilled again and never modified. Without
// cache_id the prompt is prefilled and compressed with the request's cache options (defaults from
// ServerOptions; method names as `snapkv eval`). stream: true answers with server-sent events
// ("data: {chunk}" lines, then "data: [DONE]"). Chat messages are rendered with the model's
// tokenizer.chat_template (model/chat_template.h: Llama 3, ChatML / Qwen, Mistral [INST]) with the
// assistant's generation prompt, special-token texts parsed, as `snapkv chat` and `run --chat` do;
// after a cached document a leading BOS of the render is dropped (the document has one). A model
// without a template we recognise answers chat requests with a 400 "chat_template_unsupported"
// naming why; ServerOptions::chat_template = false (`--no-chat`) sends the messages as plain
// text instead, one message's content per line. Generation stops at max_tokens or at any
// end-of-generation token (EOS, or an end of turn such as "<|eot_id|>"), as `snapkv run` does.
// Refused with a JSON error: malformed JSON or a body that is not an object (400), unknown or
// mistyped fields (400), bodies over max_body_bytes (413), unknown cache ids or routes (404), a
// prompt that does not fit the context with max_tokens (400), more than max_concurrent requests
// at once (503), a cache id that is not a valid name (400), a stored cache that is damaged or of
// another model (500 / 409), a shared store that cannot be reached (503).
// Send bodies as Content-Type: application/json: cpp-httplib refuses form-encoded bodies (curl -d
// without -H) over 8 KiB with a 413.
// Leaves out: TLS, authentication, batching requests into one forward (each request runs its own
// session; requests run concurrently, one model shared read-only).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "snapkv/kv/core/method.h"
#include "snapkv/model/generation.h"
#include "snapkv/model/llama.h"
#include "snapkv/model/tokenizer.h"

namespace snapkv::serve {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                  // 0: any free port (bind() returns it)
  std::string model_id = "snapkv";  // the id /v1/models lists first (the CLI: the file's name)
  // Model workers and their queue: max_concurrent requests prefill/generate at once, the next
  // max_queue wait in FIFO order (at most request_timeout_s each), more get 503 + Retry-After.
  size_t max_concurrent = 4;
  size_t max_queue = 64;
  double request_timeout_s = 600.0;
  // Connections: each open connection holds one of max_connections connection threads (not a
  // model worker); a request head or body that stalls for read_timeout_s closes the connection.
  size_t max_connections = 256;
  double read_timeout_s = 5.0;
  size_t keep_alive_max = 1000;     // requests per connection
  double keep_alive_timeout_s = 5;  // idle time between requests of a connection
  // Limits (4xx beyond them).
  size_t max_body_bytes = 8u << 20;  // 413
  // Prefilled prompts and documents held in memory (serve/cache_store.h): at most max_caches
  // entries and max_cache_bytes bytes, least recently used evicted (documents to cache_dir).
  size_t max_caches = 64;
  size_t max_cache_bytes = size_t{2} << 30;
  size_t max_n = 8;              // choices per request (400)
  size_t max_prompt_tokens = 0;  // 0: the model's context (400)
  // Defaults of requests (model/generation.h).
  size_t default_max_tokens = kDefaultMaxTokens;
  std::string default_method = std::string(kDefaultMethod);
  double default_keep = kDefaultKeep;
  CacheConfig defaults;  // window, sinks, pooling of every method
  // .kvc files served by id (<id>.kvc), read at start-up; {"save": true} and evicted documents
  // are written there ("" = none: "save" refused).
  std::string cache_dir;
  bool reuse_prompts = true;  // keep prefilled prompts for repeats and (uncompressed) prefixes
  std::string cache_store;    // "redis://HOST:PORT": a store shared with other replicas
  size_t cache_store_chunk_bytes = size_t{64} << 20;  // largest value written to Redis
  size_t prefill_chunk = 512;
  bool chat_template = true;  // false: chat messages as plain text, one per line (--no-chat)
  // Bearer keys; when non-empty every route but /health needs "Authorization: Bearer <key>".
  std::vector<std::string> api_keys;
  bool log_requests = true;  // one line per request on stderr
  // Test hook: called on the worker thread once a request holds its concurrency slot, before any
  // work (a test holds a slot with it to observe the queue). Empty in normal use.
  std::function<void()> on_slot_taken;
};

class Server {
 public:
  // The model and tokenizer must outlive the server.
  Server(const LlamaModel& model, const Tokenizer& tokenizer, ServerOptions options);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // What /v1/chat/completions renders with: the template family ("chatml", ...), "off (...)", or
  // "none: ..." with the reason the model's template is not usable.
  std::string chat_template_status() const;

  // Binds host:port and returns the port; throws snapkv::RuntimeError when it cannot.
  int bind();
  // Serves until stop() (blocks the calling thread). bind() first.
  void listen();
  // Stops listen() (from any thread, not from a signal handler): refuses queued requests, cancels
  // running generations at their next token and closes the listener; listen() returns once the
  // connection threads have ended.
  void stop();

  struct Impl;  // private to serve/ (src/serve/server_impl.h)

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace snapkv::serve
