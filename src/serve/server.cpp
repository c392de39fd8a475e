// The HTTP server (serve/server.h): routes, concurrency slots, the table of compressed documents,
// and generation (plain and server-sent events) on per-request sessions.
#include "snapkv/serve/server.h"

#include <httplib.h>

#include <atomic>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "serve/requests.h"
#include "serve/web_index_html.h"
#include "snapkv/model/chat_template.h"
#include "snapkv/model/kvzip.h"
#include "snapkv/model/prompt_cache.h"
#include "snapkv/model/sampler.h"
#include "snapkv/serve/cache_store.h"
#include "snapkv/util/error.h"

namespace snapkv::serve {
namespace {

using nlohmann::json;

std::string error_body(const std::string& message, const std::string& type, int status) {
  const json j = {{"error", {{"message", message}, {"type", type}, {"code", status}}}};
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

void send_error(httplib::Response& res, int status, const std::string& type,
                const std::string& message) {
  res.status = status;
  res.set_content(error_body(message, type, status), "application/json");
}

void send_json(httplib::Response& res, const json& j) {
  res.status = 200;
  res.set_content(j.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
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

// How a completion's prompt was started (the response's "snapkv" object, the log line).
struct Reuse {
  std::string kind = "none";  // none | exact | prefix | document
  size_t tokens = 0;          // prompt tokens not prefilled again
};

// Releases a concurrency slot when the last owner (handler or stream provider) lets go.
class Slot {
 public:
  explicit Slot(std::atomic<size_t>& busy) : busy_(busy) {}
  ~Slot() { busy_.fetch_sub(1); }
  Slot(const Slot&) = delete;
  Slot& operator=(const Slot&) = delete;

 private:
  std::atomic<size_t>& busy_;
};

}  // namespace

struct Server::Impl {
  const LlamaModel& model;
  const Tokenizer& tokenizer;
  ServerOptions options;
  httplib::Server http;
  std::atomic<size_t> busy{0};
  std::unique_ptr<CacheStore> store;
  const uint64_t id_salt = std::random_device{}();  // ids differ across server runs
  std::atomic<uint64_t> next_id{1};
  // /v1/chat/completions renders with the model's template; without one (or one we do not
  // recognise) chat requests get chat_error, unless options.chat_template is off.
  std::optional<ChatTemplate> chat_template;
  std::string chat_error;

  std::string new_id(const char* prefix) {
    return prefix + std::to_string(id_salt % 1000000) + "-" + std::to_string(next_id.fetch_add(1));
  }

  Impl(const LlamaModel& m, const Tokenizer& t, ServerOptions o)
      : model(m), tokenizer(t), options(std::move(o)) {
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

  // The tokens of a chat request: the messages rendered with the model's template (special-token
  // texts parsed, BOS only where the template writes it), or, with options.chat_template off, one
  // message's content per line as plain text. After a cached document (which starts with BOS) a
  // leading BOS of the render is dropped.
  std::vector<int32_t> chat_tokens(const std::vector<serve::ChatMessage>& messages,
                                   bool after_document) const {
    if (!options.chat_template) {
      std::string text;
      for (const serve::ChatMessage& m : messages) text += m.content + "\n";
      return tokenizer.encode(text, !after_document);
    }
    if (!chat_template) {
      throw HttpError(400, "chat_template_unsupported",
                      "this model's chat template cannot be rendered: " + chat_error +
                          "; start the server with --no-chat to send chat messages as plain "
                          "text (one message per line), or use /v1/completions");
    }
    std::vector<snapkv::ChatMessage> conversation;
    for (const serve::ChatMessage& m : messages) conversation.push_back({m.role, m.content});
    std::vector<int32_t> tokens =
        tokenizer.encode(chat_template->render(conversation), /*add_special=*/false,
                         /*parse_special=*/true);
    if (after_document && !tokens.empty() && tokens.front() == tokenizer.bos()) {
      tokens.erase(tokens.begin());
    }
    return tokens;
  }

  // Prefill chunking, and kvzip's repeat prompt in this model's tokenizer (method kvzip).
  SessionOptions session_options() const {
    return SessionOptions{options.prefill_chunk,
                          ReconstructionOptions{kvzip_repeat_prompt(tokenizer)}};
  }

  std::shared_ptr<Slot> take_slot() {
    if (busy.fetch_add(1) >= options.max_concurrent) {
      busy.fetch_sub(1);
      throw HttpError(503, "server_busy",
                      "too many concurrent requests (limit " +
                          std::to_string(options.max_concurrent) + "), retry later");
    }
    auto slot = std::make_shared<Slot>(busy);
    if (options.on_slot_taken) options.on_slot_taken();
    return slot;
  }

  CacheConfig make_config(const CacheOptions& c, size_t n_tokens, std::string& method) const {
    method = c.method.empty() ? options.default_method : c.method;
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
      config.budget = c.budget
                          ? *c.budget
                          : budget_for(c.keep.value_or(options.default_keep), n_tokens, config);
      config.validate();
      return config;
    } catch (const std::invalid_argument& e) {
      throw HttpError(400, "invalid_request_error", e.what());
    }
  }

  // Tokens of `text`, refused when cached document + text + tokens to generate exceed n_ctx.
  std::vector<int32_t> encode_checked(const std::string& text, bool add_bos, size_t cached,
                                      size_t to_generate) const {
    std::vector<int32_t> tokens = tokenizer.encode(text, add_bos);
    check_fits(tokens, cached, to_generate);
    return tokens;
  }

  void check_fits(const std::vector<int32_t>& tokens, size_t cached, size_t to_generate) const {
    if (tokens.empty()) throw HttpError(400, "invalid_request_error", "prompt has no tokens");
    const size_t n_ctx = model.config().n_ctx;
    if (cached + tokens.size() + to_generate > n_ctx) {
      throw HttpError(400, "context_length_exceeded",
                      (cached > 0 ? std::to_string(cached) + " cached document tokens + " : "") +
                          "prompt of " + std::to_string(tokens.size()) + " tokens + " +
                          std::to_string(to_generate) + " to generate exceeds the context of " +
                          std::to_string(n_ctx) + " tokens");
    }
  }

  std::shared_ptr<const StoredPrompt> find(const std::string& id) {
    if (!valid_store_name(id)) {
      throw HttpError(400, "invalid_request_error",
                      "cache id '" + id +
                          "' is not a valid name ([A-Za-z0-9._-], 1 to 128, not "
                          "starting with '.')");
    }
    std::shared_ptr<const StoredPrompt> doc = store->get(id);
    if (!doc) throw HttpError(404, "not_found", "no cache with id '" + id + "'");
    return doc;
  }

  // Keeps a prefilled prompt for the next request with the same tokens and config (a failing
  // shared store is logged: the answer does not depend on it).
  void keep_prompt(const std::vector<int32_t>& tokens, const CacheConfig& config,
                   const std::string& method, const LlamaSession& session,
                   const std::vector<float>& logits, bool document = false) {
    if (!options.reuse_prompts) return;
    const CacheStats stats = session.cache_stats();
    auto entry = std::make_shared<StoredPrompt>(
        StoredPrompt{content_id(model_fingerprint(model), tokens, config), tokens, config, method,
                     session.clone(), logits, document, stats.bytes_stored, stats.bytes_full_fp16,
                     "", std::time(nullptr)});
    try {
      store->put(std::move(entry));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "[serve] prompt kept in memory only: %s\n", e.what());
    }
  }

  // The session to generate from and its first logits: a clone of a cached document with the
  // prompt appended; the stored state of the same prompt (exact reuse); a stored prefix extended
  // by the rest (prefix reuse, uncompressed caches only: serve/cache_store.h); or a fresh
  // prefill of the prompt, which is then kept for the next request.
  std::pair<LlamaSession, std::vector<float>> start(const CompletionRequest& r, bool chat,
                                                    size_t max_tokens, size_t& prompt_tokens,
                                                    Reuse& reuse) {
    if (!r.cache_id.empty()) {
      const std::shared_ptr<const StoredPrompt> doc = find(r.cache_id);
      const size_t doc_tokens = doc->tokens.size();
      std::vector<int32_t> tokens;
      if (chat) {
        tokens = chat_tokens(r.messages, true);
        check_fits(tokens, doc_tokens, max_tokens);
      } else {
        tokens = encode_checked(r.prompt, false, doc_tokens, max_tokens);
      }
      prompt_tokens = doc_tokens + tokens.size();
      reuse = {"document", doc_tokens};
      LlamaSession session = doc->session.clone();
      std::vector<float> logits = session.extend(tokens);
      return {std::move(session), std::move(logits)};
    }
    std::vector<int32_t> tokens;
    if (chat) {
      tokens = chat_tokens(r.messages, false);
      check_fits(tokens, 0, max_tokens);
    } else {
      tokens = encode_checked(r.prompt, true, 0, max_tokens);
    }
    prompt_tokens = tokens.size();
    std::string method;
    const CacheConfig config = make_config(r.cache, tokens.size(), method);
    std::shared_ptr<const StoredPrompt> hit;
    if (options.reuse_prompts) {
      try {
        hit = store->get(content_id(model_fingerprint(model), tokens, config));
      } catch (const std::exception& e) {
        std::fprintf(stderr, "[serve] stored prompt not used: %s\n", e.what());
      }
      if (hit && !hit->logits.empty()) {
        reuse = {"exact", tokens.size()};
        return {hit->session.clone(), hit->logits};
      }
      if (const auto prefix = store->find_prefix(tokens, config)) {
        reuse = {"prefix", prefix->tokens.size()};
        LlamaSession session = prefix->session.clone();
        std::vector<float> logits =
            session.extend(std::span<const int32_t>(tokens).subspan(prefix->tokens.size()));
        keep_prompt(tokens, config, method, session, logits);
        return {std::move(session), std::move(logits)};
      }
    }
    LlamaSession session(model, config, session_options());
    std::vector<float> logits = session.prefill(tokens);
    keep_prompt(tokens, config, method, session, logits, hit && hit->document);
    return {std::move(session), std::move(logits)};
  }

  void completion(const httplib::Request& req, httplib::Response& res, bool chat) {
    const CompletionRequest r = parse_completion(req.body, chat);
    if (!r.model.empty() && r.model != options.model_id) {
      throw HttpError(404, "model_not_found", "model '" + r.model + "' is not served here");
    }
    SamplerConfig sampling{r.temperature, r.top_p, r.seed};
    try {
      sampling.validate();
    } catch (const std::invalid_argument& e) {
      throw HttpError(400, "invalid_request_error", e.what());
    }
    const size_t max_tokens = r.max_tokens.value_or(options.default_max_tokens);
    const std::shared_ptr<Slot> slot = take_slot();
    size_t prompt_tokens = 0;
    Reuse reuse;
    auto started = std::make_shared<std::pair<LlamaSession, std::vector<float>>>(
        start(r, chat, max_tokens, prompt_tokens, reuse));
    if (reuse.kind != "none") {
      std::fprintf(stderr, "[serve] %s: prompt reused (%s, %zu of %zu tokens not prefilled)\n",
                   req.path.c_str(), reuse.kind.c_str(), reuse.tokens, prompt_tokens);
    }
    // What the cache holds after the answer, and what the prompt reuse saved.
    auto accounting = [started, reuse] {
      const CacheStats stats = started->first.cache_stats();
      return json{{"reuse", reuse.kind},
                  {"reused_tokens", reuse.tokens},
                  {"kv_bytes", stats.bytes_stored},
                  {"kv_bytes_full_fp16", stats.bytes_full_fp16}};
    };
    const std::string id = new_id(chat ? "chatcmpl-" : "cmpl-");
    const std::time_t created = std::time(nullptr);
    const std::string object = chat ? "chat.completion" : "text_completion";
    // Generates up to max_tokens, calling emit(piece) per token; returns the finish reason.
    auto generate = [this, started, sampling, max_tokens](
                        const std::function<bool(const std::string&)>& emit,
                        size_t& n_generated) -> std::string {
      Sampler sampler(sampling);
      LlamaSession& session = started->first;
      std::vector<float>& logits = started->second;
      const size_t n_ctx = model.config().n_ctx;
      for (size_t step = 0; step < max_tokens; ++step) {
        const int32_t token = sampler.sample(logits);
        if (tokenizer.is_eog(token)) return "stop";  // EOS or an end of turn (<|im_end|>)
        ++n_generated;
        if (!emit(tokenizer.token_to_piece(token))) return "cancelled";
        if (step + 1 == max_tokens || session.n_past() >= n_ctx) break;
        logits = session.decode(token);
      }
      return "length";
    };
    const std::string model_id = options.model_id;
    if (!r.stream) {
      std::string out;
      size_t n = 0;
      const std::string finish = generate(
          [&out](const std::string& p) {
            out += p;
            return true;
          },
          n);
      json choice = {{"index", 0}, {"finish_reason", finish}};
      if (chat) {
        choice["message"] = {{"role", "assistant"}, {"content", out}};
      } else {
        choice["text"] = out;
      }
      send_json(res, {{"id", id},
                      {"object", object},
                      {"created", created},
                      {"model", model_id},
                      {"choices", json::array({choice})},
                      {"usage",
                       {{"prompt_tokens", prompt_tokens},
                        {"completion_tokens", n},
                        {"total_tokens", prompt_tokens + n}}},
                      {"snapkv", accounting()}});
      return;
    }
    const std::string chunk_object = chat ? "chat.completion.chunk" : "text_completion";
    res.set_chunked_content_provider(
        "text/event-stream", [slot, generate, id, created, chat, chunk_object, model_id,
                              accounting](size_t, httplib::DataSink& sink) {
          auto event = [&](const json& choice, bool last = false) {
            json j = {{"id", id},
                      {"object", chunk_object},
                      {"created", created},
                      {"model", model_id},
                      {"choices", json::array({choice})}};
            if (last) j["snapkv"] = accounting();
            const std::string line =
                "data: " + j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
            return sink.write(line.data(), line.size());
          };
          size_t n = 0;
          std::string finish;
          try {
            finish = generate(
                [&](const std::string& piece) {
                  json choice = {{"index", 0}, {"finish_reason", nullptr}};
                  if (chat) {
                    choice["delta"] = {{"content", piece}};
                  } else {
                    choice["text"] = piece;
                  }
                  return event(choice);
                },
                n);
          } catch (const std::exception& e) {
            const std::string line = "data: " + error_body(e.what(), "server_error", 500) + "\n\n";
            sink.write(line.data(), line.size());
            finish = "error";
          }
          if (finish != "cancelled") {
            json last = {{"index", 0}, {"finish_reason", finish}};
            if (chat) {
              last["delta"] = json::object();
            } else {
              last["text"] = "";
            }
            event(last, true);
            const std::string done = "data: [DONE]\n\n";
            sink.write(done.data(), done.size());
          }
          sink.done();
          return true;
        });
  }

  // Prefills and compresses a document once: its id is its content address, so the same
  // document with the same config is answered from the store (here, the directory or the shared
  // store) without a second prefill.
  void create_cache(const httplib::Request& req, httplib::Response& res) {
    const CacheRequest r = parse_cache_request(req.body);
    if (r.save && options.cache_dir.empty()) {
      throw HttpError(400, "invalid_request_error",
                      "'save' needs a server started with --cache-dir");
    }
    const std::vector<int32_t> tokens = encode_checked(r.document, true, 0, 1);
    std::string method;
    const CacheConfig config = make_config(r.cache, tokens.size(), method);
    const std::string id = content_id(model_fingerprint(model), tokens, config);
    std::shared_ptr<const StoredPrompt> have = store->get(id);
    if (have && !have->document) {  // the same prompt ran as a completion: list it from now on
      auto doc = std::make_shared<StoredPrompt>(
          StoredPrompt{id, have->tokens, have->config, method, have->session.clone(), have->logits,
                       true, have->kv_bytes, have->kv_bytes_full_fp16, "", std::time(nullptr)});
      store->put(doc);
      have = doc;
    }
    if (have) {
      std::fprintf(stderr, "[serve] /v1/caches: '%s' reused (%zu tokens not prefilled)\n",
                   id.c_str(), tokens.size());
      json j = doc_json(listed(*have, true));
      j["reused"] = true;
      if (r.save && have->path.empty()) {
        const std::string path =
            (std::filesystem::path(options.cache_dir) / (id + ".kvc")).string();
        save_prompt_cache(path, have->session, tokens);
        j["path"] = path;
      }
      send_json(res, j);
      return;
    }
    const std::shared_ptr<Slot> slot = take_slot();
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
    if (r.save) {
      doc->path = (std::filesystem::path(options.cache_dir) / (id + ".kvc")).string();
      save_prompt_cache(doc->path, doc->session, tokens);
    }
    store->put(doc);
    json j = doc_json(listed(*doc, true));
    j["reused"] = false;
    send_json(res, j);
  }

  // Runs a handler, turning every exception into a JSON error.
  httplib::Server::Handler guarded(
      std::function<void(const httplib::Request&, httplib::Response&)> fn) {
    return [fn = std::move(fn)](const httplib::Request& req, httplib::Response& res) {
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

  void routes() {
    http.set_payload_max_length(options.max_body_bytes);
    const size_t workers = options.max_concurrent + 4;  // room to answer 503s and /health
    http.new_task_queue = [workers] { return new httplib::ThreadPool(workers); };
    http.Get("/health", guarded([](const auto&, auto& res) {
               send_json(res, {{"status", "ok"}});
             }));
    http.Get("/v1/models", guarded([this](const auto&, auto& res) {
               send_json(res,
                         {{"object", "list"},
                          {"data", json::array({{{"id", options.model_id},
                                                 {"object", "model"},
                                                 {"owned_by", "snapkv"},
                                                 {"context_length", model.config().n_ctx}}})}});
             }));
    http.Post("/v1/completions",
              guarded([this](const auto& req, auto& res) { completion(req, res, false); }));
    http.Post("/v1/chat/completions",
              guarded([this](const auto& req, auto& res) { completion(req, res, true); }));
    http.Post("/v1/caches",
              guarded([this](const auto& req, auto& res) { create_cache(req, res); }));
    http.Get("/v1/caches", guarded([this](const auto&, auto& res) {
               json data = json::array();
               for (const CacheStore::Listed& d : store->list()) data.push_back(doc_json(d));
               send_json(res, {{"object", "list"}, {"data", data}});
             }));
    http.Get(R"(/v1/caches/([^/]+))", guarded([this](const auto& req, auto& res) {
               send_json(res, doc_json(listed(*find(req.matches[1]), true)));
             }));
    http.Delete(R"(/v1/caches/([^/]+))", guarded([this](const auto& req, auto& res) {
                  const std::string id = req.matches[1];
                  if (!valid_store_name(id) || !store->erase(id)) {
                    throw HttpError(404, "not_found", "no cache with id '" + id + "'");
                  }
                  send_json(res, {{"id", id}, {"object", "cache"}, {"deleted", true}});
                }));
    http.Get("/", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(kIndexHtml, "text/html; charset=utf-8");
    });
    // httplib's own refusals (unknown route 404, oversized body 413, ...) get a JSON body too.
    http.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty()) return;
      const std::string message = res.status == 404   ? "no route " + req.method + " " + req.path
                                  : res.status == 413 ? "request body too large"
                                                      : "request refused";
      send_error(res, res.status, res.status == 404 ? "not_found" : "invalid_request_error",
                 message);
    });
  }
};

Server::Server(const LlamaModel& model, const Tokenizer& tokenizer, ServerOptions options)
    : impl_(std::make_unique<Impl>(model, tokenizer, std::move(options))) {
  if (impl_->options.max_concurrent == 0) {
    throw_invalid("serve", "max_concurrent", "0", ">= 1");
  }
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
  int port = o.port;
  if (o.port == 0) {
    port = impl_->http.bind_to_any_port(o.host);
  } else if (!impl_->http.bind_to_port(o.host, o.port)) {
    port = -1;
  }
  if (port <= 0) {
    throw_runtime("serve", "cannot listen", o.host + ":" + std::to_string(o.port),
                  "a free port on a local address");
  }
  return port;
}

void Server::listen() {
  impl_->http.listen_after_bind();
}

void Server::stop() {
  impl_->http.stop();
}

}  // namespace snapkv::serve
