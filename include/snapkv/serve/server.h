// `snapkv serve`: a local HTTP server over one loaded model that OpenAI clients and llama-server
// scripts can point at, plus a table of compressed documents. docs/SERVER.md is the reference.
//
// Endpoints (JSON in and out; errors are {"error": {"message", "type", "param", "code"}} with a
// 4xx/5xx status):
//   GET  /health                  {"status": "ok"} (never needs an API key)
//   GET  /v1/models               the model under options.model_id and its general.name
//   POST /v1/completions          OpenAI's completions request (prompt: text, list, token ids)
//   POST /v1/chat/completions     OpenAI's chat-completions request
//   POST /v1/caches               {document, method?, keep?, budget?, codec?, save?}: the document
//                                 is prefilled and compressed once (question-agnostic), an id out
//   GET  /v1/caches, GET/DELETE /v1/caches/{id}
//   POST /tokenize, /detokenize   llama-server's shapes
//   GET  /metrics                 Prometheus text format
//   GET  /                        the web chat page (src/serve/web/index.html, compiled in)
// Promises:
//  - Every field of OpenAI's two request schemas is accepted; stop, n (the n choices of a prompt
//    share one prefill: the session is cloned), logprobs / top_logprobs, echo,
//    max_completion_tokens, temperature, top_p, top_k, min_p, the penalties, seed and
//    stream_options.include_usage are implemented through model/generation.h's Generator
//    (generate()'s loop); what the engine cannot do is refused by name only when a request needs it
//    (tool_choice "required", response_format other than text, non-text content parts). Any model
//    name is served. Responses have OpenAI's shapes (a stream's first chat delta carries the role;
//    include_usage adds the final usage chunk) plus a "snapkv" object: method, budget, keep,
//    rows kept / seen, KV bytes against fp16, prefill and decode milliseconds, reused or not.
//  - Prompts are tokenized as `snapkv tokenize` does: BOS only where the vocabulary asks for it.
//  - At most max_concurrent requests prefill or generate at once; the next max_queue wait in FIFO
//    order (each at most request_timeout_s); beyond that 503 with Retry-After. The decode steps of
//    the generating ones run batched, one LlamaSession::decode_batch per step (continuous
//    batching: a sequence joins after its prefill and leaves when it ends). Connections live in
//    the server's own HTTP/1.1 layer (src/serve/http/): idle or slow clients cost no thread and
//    never hold a model worker; a request head must be complete within head_timeout_s, a body
//    within body_timeout_s, with no pause longer than read_timeout_s; pipelined requests are
//    answered in order.
//  - Every prefilled prompt and document is kept in a content-addressed store
//    (serve/cache_store.h: memory LRU, cache_dir, a shared Redis store): a repeated prompt or
//    document is not prefilled again, an uncompressed prompt's stored prefix is extended
//    ("snapkv.reuse" says which); a cache id that is not a valid name is a 400, a stored cache
//    that is damaged or of another model a 500 / 409, a shared store out of reach a 503.
//  - With api_keys set, every route but /health needs "Authorization: Bearer <key>" (401).
//  - stop() refuses queued requests, cancels running generations at their next token and closes
//    the listener. A client leaving a stream cancels its generation at the next token.
// Leaves out: TLS, HTTP/2, prefill inside the batched steps (a prompt prefills on its request's
// thread, beside the steps).
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
  // Connections (src/serve/http/http_server.h): one I/O thread holds every connection that is
  // idle or reading a request, at most max_connections of them (beyond: the one idle longest is
  // closed for a new one, or new ones wait in the listen backlog); complete requests go to
  // handler threads. A head or body that sends nothing for read_timeout_s, a head not complete
  // within head_timeout_s or a body within body_timeout_s gets 408 and the close; a response
  // that the client does not read for write_timeout_s (0: read_timeout_s) is abandoned.
  size_t max_connections = 256;
  double read_timeout_s = 5.0;
  double write_timeout_s = 0.0;
  double head_timeout_s = 10.0;
  double body_timeout_s = 60.0;
  size_t keep_alive_max = 1000;     // requests per connection
  double keep_alive_timeout_s = 5;  // idle time between requests of a connection (or before one)
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
  std::string default_method = std::string(kDefaultMethod);  // completions' prompts
  std::string default_document_method = std::string(kDefaultDocumentMethod);  // /v1/caches
  double default_keep = kDefaultKeep;
  CacheConfig defaults;  // window, sinks, pooling of every method
  // .kvc files served by id (<id>.kvc), read at start-up; {"save": true} and evicted documents
  // are written there ("" = none: "save" refused).
  std::string cache_dir;
  bool reuse_prompts = true;  // keep prefilled prompts for repeats and (uncompressed) prefixes
  // Shortest common token prefix of a new prompt and a stored uncompressed one that is reused
  // (cut from the stored one) instead of prefilled.
  size_t prefix_reuse_min = 16;
  std::string cache_store;  // "redis://HOST:PORT": a store shared with other replicas
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
  // running generations at their next token, closes the listener and every connection; listen()
  // returns once the I/O and handler threads have ended.
  void stop();

  struct Impl;  // private to serve/ (src/serve/server_impl.h)

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace snapkv::serve
