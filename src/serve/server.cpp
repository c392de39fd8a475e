// The HTTP server (serve/server.h): set-up of connections and limits, authentication, the
// per-request log line and counters, the table of compressed documents, tokenize / detokenize.
// The OpenAI completion routes are in openai_routes.cpp.
#include "snapkv/serve/server.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "serve/server_impl.h"
#include "serve/web_index_html.h"
#include "snapkv/model/kvzip.h"
#include "snapkv/model/prompt_cache.h"
#include "snapkv/util/error.h"

namespace snapkv::serve {

std::string dump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string error_body(const std::string& message, const std::string& type, int status) {
  return dump(
      {{"error", {{"message", message}, {"type", type}, {"param", nullptr}, {"code", status}}}});
}

void send_error(http::Response& res, int status, const std::string& type,
                const std::string& message) {
  res.status = status;
  if (status == 503) res.set_header("Retry-After", "1");
  res.set_content(error_body(message, type, status), "application/json");
}

void send_json(http::Response& res, const json& j) {
  res.status = 200;
  res.set_content(dump(j), "application/json");
}

RequestRecord& current_record() {
  thread_local RequestRecord record;
  return record;
}

json doc_json(const CacheStore::Listed& d) {
  json j = {{"id", d.id},
            {"object", "cache"},
            {"created", d.created},
            {"prompt_tokens", d.prompt_tokens},
            {"method", d.method},
            {"policy", to_string(d.config.policy)},
            {"codec", to_string(d.config.codec)},
            {"budget", d.config.budget},
            {"kv_bytes", d.kv_bytes},
            {"kv_bytes_full_fp16", d.kv_bytes_full_fp16},
            {"in_memory", d.in_memory}};
  if (!d.path.empty()) j["path"] = d.path;
  return j;
}

CacheStore::Listed listed(const StoredPrompt& e, bool in_memory) {
  return {e.id,   e.tokens.size(), e.config, e.method, e.kv_bytes, e.kv_bytes_full_fp16,
          e.path, e.created,       in_memory};
}

namespace {

thread_local std::chrono::steady_clock::time_point request_start;

// The route a path is counted and logged under: a fixed set, so that no client can grow the
// counters without bound by asking for made-up paths.
std::string route_label(const std::string& path) {
  static const char* const kRoutes[] = {
      "/health",    "/v1/models", "/v1/completions", "/v1/chat/completions",
      "/v1/caches", "/tokenize",  "/detokenize",     "/metrics",
      "/"};
  for (const char* route : kRoutes) {
    if (path == route) return route;
  }
  if (path.rfind("/v1/caches/", 0) == 0) return "/v1/caches/{id}";
  return "other";
}

bool authorized(const http::Request& req, const std::vector<std::string>& keys) {
  const std::string header = req.get_header_value("Authorization");
  const std::string prefix = "Bearer ";
  if (header.compare(0, prefix.size(), prefix) != 0) return false;
  const std::string given = header.substr(prefix.size());
  bool ok = false;
  for (const std::string& key : keys) {
    // Compare every byte of equal-length keys so the time does not tell how much matched.
    if (key.size() != given.size()) continue;
    unsigned char diff = 0;
    for (size_t i = 0; i < key.size(); ++i) diff |= static_cast<unsigned char>(key[i] ^ given[i]);
    ok |= diff == 0;
  }
  return ok;
}

// Handler threads beyond the light routes' few: one per running and queued request, at most
// this many (complete requests beyond them wait for a thread in arrival order).
constexpr size_t kMaxModelHandlers = 512;

// The connection layer's limits from the server's options. Handler threads: one per running and
// queued request, plus a few for the light routes (/health, /metrics, ...) and 503 answers.
http::ServerLimits http_limits(const ServerOptions& o) {
  http::ServerLimits l;
  l.connection.head.max_body = o.max_body_bytes;
  l.connection.read_timeout_s = o.read_timeout_s;
  l.connection.head_timeout_s = o.head_timeout_s;
  l.connection.body_timeout_s = o.body_timeout_s;
  l.connection.keep_alive_timeout_s = o.keep_alive_timeout_s;
  l.max_connections = o.max_connections;
  l.handler_threads = std::min(kMaxModelHandlers, std::min(o.max_concurrent, kMaxModelHandlers) +
                                                      std::min(o.max_queue, kMaxModelHandlers)) +
                      8;
  l.keep_alive_max = o.keep_alive_max;
  l.write_timeout_s = o.write_timeout_s == 0.0 ? o.read_timeout_s : o.write_timeout_s;
  return l;
}

}  // namespace

Server::Impl::Impl(const LlamaModel& m, const Tokenizer& t, ServerOptions o)
    : model(m),
      tokenizer(t),
      options(std::move(o)),
      http_server(http_limits(options)),
      queue(options.max_concurrent, options.max_queue) {
  model_ids.push_back(options.model_id);
  const std::string general_name = model.file().get_string_or("general.name", "");
  if (!general_name.empty() && general_name != options.model_id) model_ids.push_back(general_name);
  store = std::make_unique<CacheStore>(
      model, session_options(), StoreLimits{options.max_caches, options.max_cache_bytes},
      options.cache_dir,
      options.cache_store.empty()
          ? nullptr
          : open_blob_store(options.cache_store, options.cache_store_chunk_bytes));
  if (!options.chat_template) return;
  try {
    chat_template = ChatTemplate::from_gguf(model.file());
  } catch (const RuntimeError& e) {
    chat_error = e.what();
  }
}

std::string Server::Impl::new_id(const char* prefix) {
  return prefix + std::to_string(id_salt % 1000000) + "-" + std::to_string(next_id.fetch_add(1));
}

// The tokens of a chat request: the messages rendered with the model's template (special-token
// texts parsed, BOS only where the template writes it), or, with options.chat_template off, one
// message's content per line as plain text. After a cached document (which starts with BOS) a
// leading BOS of the render is dropped.
std::vector<int32_t> Server::Impl::chat_tokens(const std::vector<serve::ChatMessage>& messages,
                                               bool after_document) const {
  if (!options.chat_template) {
    std::string text;
    for (const serve::ChatMessage& m : messages) text += m.content + "\n";
    return tokenizer.encode(text, /*add_special=*/!after_document, /*parse_special=*/false);
  }
  if (!chat_template) {
    throw HttpError(400, "chat_template_unsupported",
                    "this model's chat template cannot be rendered: " + chat_error +
                        "; start the server with --no-chat to send chat messages as plain "
                        "text (one message per line), or use /v1/completions");
  }
  std::vector<snapkv::ChatMessage> conversation;
  for (const serve::ChatMessage& m : messages) conversation.push_back({m.role, m.content});
  std::vector<int32_t> tokens = tokenizer.encode(chat_template->render(conversation),
                                                 /*add_special=*/false, /*parse_special=*/true);
  if (after_document && !tokens.empty() && tokens.front() == tokenizer.bos()) {
    tokens.erase(tokens.begin());
  }
  return tokens;
}

// A completion prompt's tokens: given ids as they are (each checked against the vocabulary), or
// the text encoded as `snapkv tokenize` does: BOS (and EOS) only where the vocabulary's metadata
// asks for them, and none after a cached document.
std::vector<int32_t> Server::Impl::prompt_tokens(const PromptInput& p, bool after_document) const {
  if (!p.tokens.empty()) {
    for (const int32_t id : p.tokens) {
      if (static_cast<size_t>(id) >= tokenizer.n_vocab()) {
        bad_request("prompt token id " + std::to_string(id) + " is outside the vocabulary of " +
                    std::to_string(tokenizer.n_vocab()));
      }
    }
    return p.tokens;
  }
  return tokenizer.encode(p.text, /*add_special=*/!after_document, /*parse_special=*/false);
}

// Prefill chunking, and kvzip's repeat prompt in this model's tokenizer (method kvzip).
SessionOptions Server::Impl::session_options() const {
  return SessionOptions{options.prefill_chunk,
                        ReconstructionOptions{kvzip_repeat_prompt(tokenizer)}};
}

std::shared_ptr<WorkQueue::Ticket> Server::Impl::take_slot() {
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                            std::chrono::duration<double>(options.request_timeout_s));
  std::shared_ptr<WorkQueue::Ticket> ticket = queue.admit(deadline);
  if (options.on_slot_taken) options.on_slot_taken();
  return ticket;
}

CacheConfig Server::Impl::make_config(const CacheOptions& c, size_t n_tokens, std::string& method,
                                      bool document) const {
  const std::string& fallback = document ? options.default_document_method : options.default_method;
  method = c.method.empty() ? fallback : c.method;
  try {
    CacheConfig config = parse_method(method, options.defaults).config;
    if (!c.codec.empty()) {
      const CodecKind codec = parse_codec(c.codec);
      if (config.codec != CodecKind::fp16 && config.codec != codec) {
        throw std::invalid_argument("codec '" + c.codec + "' disagrees with method '" + method +
                                    "'");
      }
      config.codec = codec;
    }
    for (const auto& [name, value] : c.options) set_cache_option_value(config, name, value);
    config.budget =
        c.budget ? *c.budget : budget_for(c.keep.value_or(options.default_keep), n_tokens, config);
    config.validate();
    return config;
  } catch (const std::invalid_argument& e) {
    throw HttpError(400, "invalid_request_error", e.what());
  }
}

void Server::Impl::check_fits(const std::vector<int32_t>& tokens, size_t cached,
                              size_t to_generate) const {
  if (tokens.empty()) throw HttpError(400, "invalid_request_error", "prompt has no tokens");
  const size_t n_ctx = model.config().n_ctx;
  const size_t limit = options.max_prompt_tokens > 0 ? options.max_prompt_tokens : n_ctx;
  if (cached + tokens.size() > limit) {
    throw HttpError(400, "context_length_exceeded",
                    "prompt of " + std::to_string(cached + tokens.size()) +
                        " tokens exceeds the limit of " + std::to_string(limit) + " tokens");
  }
  if (to_generate > n_ctx || cached + tokens.size() + to_generate > n_ctx) {
    throw HttpError(400, "context_length_exceeded",
                    (cached > 0 ? std::to_string(cached) + " cached document tokens + " : "") +
                        "prompt of " + std::to_string(tokens.size()) + " tokens + " +
                        std::to_string(to_generate) + " to generate exceeds the context of " +
                        std::to_string(n_ctx) + " tokens");
  }
}

std::shared_ptr<const StoredPrompt> Server::Impl::find(const std::string& id) {
  if (!valid_store_name(id)) {
    throw HttpError(400, "invalid_request_error",
                    "cache id '" + id +
                        "' is not a valid name ([A-Za-z0-9._-], 1 to 128, not starting with '.')");
  }
  std::shared_ptr<const StoredPrompt> doc = store->get(id);
  if (!doc) throw HttpError(404, "not_found", "no cache with id '" + id + "'");
  return doc;
}

// Keeps a prefilled prompt for the next request with the same tokens and config (a failing
// shared store is logged: the answer does not depend on it).
void Server::Impl::keep_prompt(const std::vector<int32_t>& tokens, const CacheConfig& config,
                               const std::string& method, const LlamaSession& session,
                               const std::vector<float>& logits, bool document) {
  if (!options.reuse_prompts) return;
  const CacheStats stats = session.cache_stats();
  auto entry = std::make_shared<StoredPrompt>(StoredPrompt{
      content_id(store->fingerprint(), tokens, config), tokens, config, method, session.clone(),
      logits, document, stats.bytes_stored, stats.bytes_full_fp16, "", std::time(nullptr)});
  try {
    store->put(std::move(entry));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[serve] prompt kept in memory only: %s\n", e.what());
  }
}

std::pair<LlamaSession, std::vector<float>> Server::Impl::start_prompt(
    const std::vector<int32_t>& tokens, const CacheConfig& config, const std::string& method,
    Reuse& reuse) {
  reuse = Reuse{};
  std::shared_ptr<const StoredPrompt> hit;
  if (options.reuse_prompts) {
    try {
      hit = store->get(content_id(store->fingerprint(), tokens, config));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "[serve] stored prompt not used: %s\n", e.what());
    }
    if (hit && !hit->logits.empty()) {
      reuse = {"exact", tokens.size()};
      return {hit->session.clone(), hit->logits};
    }
    if (const CacheStore::PrefixMatch prefix =
            store->find_prefix(tokens, config, options.prefix_reuse_min);
        prefix.entry) {
      reuse = {"prefix", prefix.tokens};
      // The stored prompt cut to the common prefix (a copy; the entry stays whole).
      LlamaSession session = prefix.tokens == prefix.entry->session.n_past()
                                 ? prefix.entry->session.clone()
                                 : prefix.entry->session.truncated(prefix.tokens);
      std::vector<float> logits =
          session.extend(std::span<const int32_t>(tokens).subspan(prefix.tokens));
      keep_prompt(tokens, config, method, session, logits, false);
      return {std::move(session), std::move(logits)};
    }
  }
  LlamaSession session(model, config, session_options());
  std::vector<float> logits = session.prefill(tokens);
  keep_prompt(tokens, config, method, session, logits, hit && hit->document);
  return {std::move(session), std::move(logits)};
}

// Prefills and compresses a document once: its id is its content address, so the same document
// with the same config is answered from the store (memory, the directory or the shared store)
// without a second prefill.
void Server::Impl::create_cache(const http::Request& req, http::Response& res) {
  const CacheRequest r = parse_cache_request(req.body);
  if (r.save && options.cache_dir.empty()) {
    throw HttpError(400, "invalid_request_error", "'save' needs a server started with --cache-dir");
  }
  const std::vector<int32_t> tokens = tokenizer.encode(r.document, true, false);
  check_fits(tokens, 0, 1);
  std::string method;
  const CacheConfig config = make_config(r.cache, tokens.size(), method, /*document=*/true);
  const std::string id = content_id(store->fingerprint(), tokens, config);
  RequestRecord& record = current_record();
  record.id = id;
  record.prompt_tokens = tokens.size();
  std::shared_ptr<const StoredPrompt> have = store->get(id);
  if (have && !have->document) {  // the same prompt ran as a completion: listed from now on
    auto doc = std::make_shared<StoredPrompt>(
        StoredPrompt{id, have->tokens, have->config, method, have->session.clone(), have->logits,
                     true, have->kv_bytes, have->kv_bytes_full_fp16, "", std::time(nullptr)});
    store->put(doc);
    have = doc;
  }
  if (have) {
    record.kv_bytes = have->kv_bytes;
    record.reused = true;
    json j = doc_json(listed(*have, true));
    j["reused"] = true;
    if (r.save && have->path.empty()) {
      const std::string path = (std::filesystem::path(options.cache_dir) / (id + ".kvc")).string();
      save_prompt_cache(path, have->session, tokens);
      j["path"] = path;
    }
    send_json(res, j);
    return;
  }
  const std::shared_ptr<WorkQueue::Ticket> slot = take_slot();
  const auto t0 = std::chrono::steady_clock::now();
  LlamaSession session(model, config, session_options());
  session.prefill(tokens);
  const CacheStats stats = session.cache_stats();
  auto doc = std::make_shared<StoredPrompt>(StoredPrompt{id,
                                                         tokens,
                                                         config,
                                                         method,
                                                         std::move(session),
                                                         {},
                                                         true,
                                                         stats.bytes_stored,
                                                         stats.bytes_full_fp16,
                                                         "",
                                                         std::time(nullptr)});
  record.kv_bytes = stats.bytes_stored;
  record.prefill_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (r.save) {
    doc->path = (std::filesystem::path(options.cache_dir) / (id + ".kvc")).string();
    save_prompt_cache(doc->path, doc->session, tokens);
  }
  store->put(doc);
  json j = doc_json(listed(*doc, true));
  j["reused"] = false;
  send_json(res, j);
}

namespace {

// Runs a handler, turning every exception into a JSON error.
http::Handler guarded(std::function<void(const http::Request&, http::Response&)> fn) {
  return [fn = std::move(fn)](const http::Request& req, http::Response& res) {
    try {
      fn(req, res);
    } catch (const HttpError& e) {
      send_error(res, e.status(), e.type(), e.what());
    } catch (const StoreError& e) {
      const bool down = e.kind() == StoreError::Kind::unavailable;
      send_error(res, down ? 503 : 500, down ? "cache_store_unavailable" : "cache_store_corrupt",
                 e.what());
    } catch (const KvcError& e) {
      send_error(res, e.kind() == KvcErrorKind::wrong_model ? 409 : 500, "cache_unreadable",
                 e.what());
    } catch (const std::invalid_argument& e) {
      send_error(res, 400, "invalid_request_error", e.what());
    } catch (const std::exception& e) {
      send_error(res, 500, "server_error", e.what());
    }
  };
}

}  // namespace

void Server::Impl::routes() {
  http::HttpServer& router = http_server;
  router.set_pre_routing([this](const http::Request& req, http::Response& res) {
    request_start = std::chrono::steady_clock::now();
    current_record() = RequestRecord{};
    if (options.api_keys.empty() || req.path == "/health" || authorized(req, options.api_keys)) {
      return false;
    }
    res.set_header("WWW-Authenticate", "Bearer");
    send_error(res, 401, "invalid_api_key",
               "missing or wrong API key: send the header 'Authorization: Bearer <key>'");
    return true;
  });
  router.set_logger([this](const http::Request& req, const http::Response& res) {
    RequestRecord& r = current_record();
    const std::string route = route_label(req.path);
    metrics.record(route, res.status, r);
    if (options.log_requests) {
      const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() -
                                                                  request_start)
                            .count();
      std::fprintf(stderr, "[serve] %s %s %s %d in=%zu out=%zu kv_bytes=%zu %.1fms\n",
                   r.id.empty() ? "-" : r.id.c_str(), req.method.empty() ? "-" : req.method.c_str(),
                   route.c_str(), res.status, r.prompt_tokens, r.completion_tokens, r.kv_bytes, ms);
    }
    // A request refused before routing (a bad head, an oversized body) starts from zero.
    r = RequestRecord{};
    request_start = std::chrono::steady_clock::now();
  });

  router.route("GET", "/health", guarded([](const auto&, auto& res) {
                 send_json(res, {{"status", "ok"}});
               }));
  router.route("GET", "/v1/models",
               guarded([this](const auto&, auto& res) { send_json(res, models_json()); }));
  router.route("POST", "/v1/completions",
               guarded([this](const auto& req, auto& res) { completion(req, res, false); }));
  router.route("POST", "/v1/chat/completions",
               guarded([this](const auto& req, auto& res) { completion(req, res, true); }));
  router.route("POST", "/v1/caches",
               guarded([this](const auto& req, auto& res) { create_cache(req, res); }));
  router.route("GET", "/v1/caches", guarded([this](const auto&, auto& res) {
                 json data = json::array();
                 for (const CacheStore::Listed& d : store->list()) data.push_back(doc_json(d));
                 send_json(res, {{"object", "list"}, {"data", data}});
               }));
  router.route_regex("GET", R"(/v1/caches/([^/]+))", guarded([this](const auto& req, auto& res) {
                       send_json(res, doc_json(listed(*find(req.matches[1]), true)));
                     }));
  router.route_regex("DELETE", R"(/v1/caches/([^/]+))", guarded([this](const auto& req, auto& res) {
                       const std::string id = req.matches[1];
                       if (!valid_store_name(id) || !store->erase(id)) {
                         throw HttpError(404, "not_found", "no cache with id '" + id + "'");
                       }
                       send_json(res, {{"id", id}, {"object", "cache"}, {"deleted", true}});
                     }));
  // The web chat page (src/serve/web/index.html, compiled in).
  router.route("GET", "/", [](const http::Request&, http::Response& res) {
    res.set_content(kIndexHtml, "text/html; charset=utf-8");
  });
  // llama-server's shapes: {"tokens": [ids]} or, with with_pieces, [{"id", "piece"}].
  router.route("POST", "/tokenize", guarded([this](const auto& req, auto& res) {
                 const TokenizeRequest r = parse_tokenize(req.body);
                 const std::vector<int32_t> ids =
                     tokenizer.encode(r.content, r.add_special, r.parse_special);
                 json tokens = json::array();
                 for (const int32_t id : ids) {
                   if (r.with_pieces) {
                     tokens.push_back({{"id", id}, {"piece", tokenizer.token_to_piece(id)}});
                   } else {
                     tokens.push_back(id);
                   }
                 }
                 send_json(res, {{"tokens", tokens}});
               }));
  router.route("POST", "/detokenize", guarded([this](const auto& req, auto& res) {
                 const std::vector<int32_t> ids = parse_detokenize(req.body);
                 for (const int32_t id : ids) {
                   if (static_cast<size_t>(id) >= tokenizer.n_vocab()) {
                     bad_request("token id " + std::to_string(id) + " is outside the vocabulary");
                   }
                 }
                 send_json(res, {{"content", tokenizer.decode(ids)}});
               }));
  router.route("GET", "/metrics", [this](const http::Request&, http::Response& res) {
    Gauges g{queue.running(), queue.queued(), 0, 0};
    g.caches = store->memory_entries();
    g.cache_bytes = store->memory_bytes();
    g.decode_steps = batcher.steps();
    g.decode_rows = batcher.rows();
    res.set_content(metrics.prometheus(g), "text/plain; version=0.0.4");
  });
  // The connection layer's refusals (no route 404, an oversized body 413, a malformed or late
  // head 400 / 408 / 431, ...) get a JSON body too.
  router.set_error_handler([](const http::Request&, http::Response& res, const std::string& why) {
    const char* type = res.status == 404   ? "not_found"
                       : res.status >= 500 ? "server_error"
                                           : "invalid_request_error";
    send_error(res, res.status, type, why);
  });
}

Server::Server(const LlamaModel& model, const Tokenizer& tokenizer, ServerOptions options) {
  if (options.max_concurrent == 0) throw_invalid("serve", "max_concurrent", "0", ">= 1");
  if (options.max_connections < 2) {
    throw_invalid("serve", "max_connections", std::to_string(options.max_connections), ">= 2");
  }
  if (options.max_n == 0) throw_invalid("serve", "max_n", "0", ">= 1");
  const std::pair<const char*, double> timeouts[] = {
      {"read_timeout", options.read_timeout_s},
      {"request_timeout", options.request_timeout_s},
      {"keep_alive_timeout", options.keep_alive_timeout_s},
      {"head_timeout", options.head_timeout_s},
      {"body_timeout", options.body_timeout_s},
      {"write_timeout",
       options.write_timeout_s == 0.0 ? options.read_timeout_s : options.write_timeout_s}};
  for (const auto& [name, seconds] : timeouts) {
    // Bounded above so that deadlines (steady_clock + seconds) cannot overflow.
    if (!(seconds > 0.0) || !(seconds <= 1e6)) {
      throw_invalid("serve", name, std::to_string(seconds), "> 0 and <= 1000000 seconds");
    }
  }
  if (options.keep_alive_max == 0) throw_invalid("serve", "keep_alive_max", "0", ">= 1");
  if (options.default_max_tokens == 0) throw_invalid("serve", "default_max_tokens", "0", ">= 1");
  impl_ = std::make_unique<Impl>(model, tokenizer, std::move(options));
  impl_->routes();
  for (const std::string& line : impl_->store->scan_dir()) {
    std::fprintf(stderr, "[serve] --cache-dir: %s\n", line.c_str());
  }
}

Server::~Server() = default;

std::string Server::chat_template_status() const {
  if (!impl_->options.chat_template) return "off (messages as plain text, one per line)";
  if (impl_->chat_template) return std::string(to_string(impl_->chat_template->family()));
  return "none: /v1/chat/completions answers 400 (" + impl_->chat_error + ")";
}

int Server::bind() {
  const ServerOptions& o = impl_->options;
  if (o.host.empty()) throw_invalid("serve", "host", "''", "an address such as 127.0.0.1");
  if (o.port < 0 || o.port > 65535) {
    throw_invalid("serve", "port", std::to_string(o.port), "0..65535");
  }
  const int port = impl_->http_server.bind(o.host, o.port);
  if (port <= 0) {
    throw_runtime("serve", "cannot listen", o.host + ":" + std::to_string(o.port),
                  "a free port on a local address");
  }
  return port;
}

void Server::listen() {
  impl_->http_server.listen();
}

void Server::stop() {
  impl_->stopping = true;
  impl_->queue.close();
  impl_->http_server.stop();
}

}  // namespace snapkv::serve
