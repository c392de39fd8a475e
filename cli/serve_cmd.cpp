// `snapkv serve`: a local OpenAI-style HTTP server over one model, with compressed documents
// (serve/server.h lists the endpoints and errors).
//
//   snapkv serve --model models/snapkv-tiny4.gguf --port 8080
//   curl -s localhost:8080/v1/caches -H 'Content-Type: application/json'
//       -d '{"document": "...", "method": "snapkv+kivi2"}'
//   curl -s localhost:8080/v1/completions -H 'Content-Type: application/json'
//       -d '{"prompt": "Q?", "cache_id": "kv-..."}'
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>

#include "cache_options.h"
#include "command.h"
#include "snapkv/model/generation.h"
#include "snapkv/model/llama.h"
#include "snapkv/model/tokenizer.h"
#include "snapkv/ops/gemm.h"
#include "snapkv/serve/server.h"
#include "snapkv/util/error.h"
#include "snapkv/util/parallel.h"

namespace {

struct ServeOptions {
  std::string model;
  snapkv::serve::ServerOptions server;
  snapkv::cli::CacheOptions cache;  // the server's defaults; requests may override method/keep
  bool no_chat = false;             // chat messages as plain text, not the model's template
  bool no_reuse = false;            // --no-prompt-reuse
  std::string api_key, api_key_file;
};

// Keys of --api-key and --api-key-file (one per line, blank lines and '#' comments skipped).
std::vector<std::string> read_api_keys(const ServeOptions& o) {
  std::vector<std::string> keys;
  if (!o.api_key.empty()) keys.push_back(o.api_key);
  if (o.api_key_file.empty()) return keys;
  std::ifstream in(o.api_key_file);
  if (!in)
    snapkv::throw_runtime("serve", "cannot read --api-key-file", o.api_key_file, "a readable file");
  for (std::string line; std::getline(in, line);) {
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
    if (!line.empty() && line[0] != '#') keys.push_back(line);
  }
  if (keys.empty()) {
    snapkv::throw_runtime("serve", "no key in --api-key-file", o.api_key_file, "one key per line");
  }
  return keys;
}

int g_signal_pipe[2] = {-1, -1};

void on_signal(int sig) {
  const unsigned char byte = static_cast<unsigned char>(sig);
  [[maybe_unused]] const ssize_t n = ::write(g_signal_pipe[1], &byte, 1);
}

bool is_loopback(const std::string& host) {
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

// The address as bound, in URL form: an IPv6 literal in brackets.
std::string bound_host(const std::string& host) {
  return host.find(':') != std::string::npos ? "[" + host + "]" : host;
}

int run_serve(ServeOptions o) {
  using namespace snapkv;
  snapkv::cli::apply_threads("serve", o.cache.threads);
  o.server.defaults = o.cache.knobs;
  o.server.default_method = o.cache.single_method().name;  // bad usage before the load
  o.server.default_keep = o.cache.keeps().at(0);
  o.server.api_keys = read_api_keys(o);
  if (o.server.model_id.empty())
    o.server.model_id = std::filesystem::path(o.model).filename().string();
  o.server.prefill_chunk = o.cache.prefill_chunk;
  o.server.chat_template = !o.no_chat;
  o.server.reuse_prompts = !o.no_reuse;
  const LlamaModel model = LlamaModel::load(o.model);
  const Tokenizer tokenizer = Tokenizer::from_gguf(model.file());
  serve::Server server(model, tokenizer, o.server);
  const int port = server.bind();
  if (!is_loopback(o.server.host) && o.server.api_keys.empty()) {
    std::fprintf(stderr,
                 "[serve] warning: listening on %s without --api-key: anyone who can reach this "
                 "address can use the model\n",
                 o.server.host.c_str());
  }
  std::fprintf(stderr,
               "[serve] listening on http://%s:%d (model id '%s', %zu concurrent, chat template "
               "%s)\n",
               bound_host(o.server.host).c_str(), port, o.server.model_id.c_str(),
               o.server.max_concurrent, server.chat_template_status().c_str());
  // SIGINT / SIGTERM: the handler only writes the signal number to a pipe (async-signal-safe);
  // a thread of its own reads it and stops the server. If the I/O and handler threads have not
  // ended 1.5 s later, the process exits anyway.
  if (::pipe(g_signal_pipe) != 0) snapkv::throw_runtime("serve", "cannot create a pipe", "", "");
  struct sigaction action {};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
  std::thread([&server] {
    unsigned char sig = 0;
    while (::read(g_signal_pipe[0], &sig, 1) < 0 && errno == EINTR) {
    }
    std::fprintf(stderr, "[serve] signal %d: shutting down\n", sig);
    server.stop();
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    std::fprintf(stderr, "[serve] connections still open after 1.5 s: exiting\n");
    std::_Exit(0);
  }).detach();
  server.listen();
  std::fprintf(stderr, "[serve] stopped\n");
  return 0;
}

snapkv::cli::RegisterCommand reg{
    "serve", "Serve the model over HTTP (OpenAI-style completions + compressed documents)",
    [](CLI::App& sub) -> snapkv::cli::Action {
      auto o = std::make_shared<ServeOptions>();
      sub.footer(
          "Example:\n  snapkv serve --model models/snapkv-tiny4.gguf --port 8080\n"
          "Endpoints: GET /health, GET /v1/models, POST /v1/completions, POST\n"
          "/v1/chat/completions (\"stream\": true for server-sent events), POST/GET /v1/caches,\n"
          "GET/DELETE /v1/caches/{id}; \"cache_id\" on a completion asks a compressed document.\n"
          "Chat messages are rendered with the model's tokenizer.chat_template (Llama 3, ChatML /\n"
          "Qwen, Mistral [INST]); without one, chat requests get a 400 unless --no-chat.");
      sub.add_option("--model,-m", o->model, "GGUF model file")->required();
      sub.add_option("--host", o->server.host, "Address to listen on")->capture_default_str();
      snapkv::cli::bounded(sub.add_option("--port", o->server.port, "Port (0: any free port)"), 0,
                           65535, "a TCP port; 0 = any free port")
          ->capture_default_str();
      o->server.model_id.clear();
      sub.add_option("--model-id", o->server.model_id,
                     "Model id /v1/models lists first (default: the file's name; requests may "
                     "name any model)");
      sub.add_option("--max-concurrent,--parallel", o->server.max_concurrent,
                     "Requests prefilling or generating at once")
          ->capture_default_str();
      sub.add_option("--max-queue", o->server.max_queue,
                     "Requests waiting for a worker, FIFO (more: 503 with Retry-After)")
          ->capture_default_str();
      sub.add_option("--request-timeout", o->server.request_timeout_s,
                     "Seconds a request may wait in the queue")
          ->capture_default_str();
      sub.add_option("--max-connections", o->server.max_connections,
                     "Connections idle or sending a request, held without a thread (beyond: the "
                     "one idle longest is closed, or new ones wait)")
          ->capture_default_str();
      sub.add_option("--read-timeout", o->server.read_timeout_s,
                     "Seconds a connection may stall while sending a request (408)")
          ->capture_default_str();
      sub.add_option("--write-timeout", o->server.write_timeout_s,
                     "Seconds a response may wait for its client to read (then abandoned, a "
                     "stream's generation cancelled; 0: the --read-timeout)")
          ->capture_default_str();
      sub.add_option("--head-timeout", o->server.head_timeout_s,
                     "Seconds for a whole request head, from its first byte (408)")
          ->capture_default_str();
      sub.add_option("--body-timeout", o->server.body_timeout_s,
                     "Seconds for a whole request body, from the end of its head (408)")
          ->capture_default_str();
      sub.add_option("--keep-alive-timeout", o->server.keep_alive_timeout_s,
                     "Seconds an idle connection is kept between requests")
          ->capture_default_str();
      sub.add_option("--keep-alive-max", o->server.keep_alive_max,
                     "Requests served on one connection")
          ->capture_default_str();
      sub.add_option("--max-n", o->server.max_n, "Most choices (n x prompts) per request")
          ->capture_default_str();
      sub.add_option("--max-prompt-tokens", o->server.max_prompt_tokens,
                     "Longest prompt in tokens (0: the model's context)")
          ->capture_default_str();
      sub.add_option("--document-method", o->server.default_document_method,
                     "Method of /v1/caches documents that name none")
          ->capture_default_str();
      sub.add_option("--api-key", o->api_key,
                     "Require 'Authorization: Bearer KEY' on every route but /health");
      sub.add_option("--api-key-file", o->api_key_file, "File of accepted keys, one per line");
      sub.add_flag(
          "--quiet-requests", [o](int64_t) { o->server.log_requests = false; },
          "No log line per request");
      sub.add_option("--max-body", o->server.max_body_bytes, "Largest request body in bytes")
          ->capture_default_str();
      sub.add_option("--max-caches", o->server.max_caches,
                     "Prefilled prompts and documents held in memory (least recently used "
                     "evicted)")
          ->capture_default_str();
      sub.add_option("--max-cache-bytes", o->server.max_cache_bytes,
                     "Bytes of KV held in memory by those")
          ->capture_default_str();
      sub.add_option("--cache-dir", o->server.cache_dir,
                     "Directory of .kvc files served by id (<id>.kvc, read at start-up); "
                     "{\"save\": true} and evicted documents are written there");
      sub.add_option("--cache-store", o->server.cache_store,
                     "redis://HOST:PORT: compressed documents and prompts shared with other "
                     "replicas");
      sub.add_option("--cache-store-chunk", o->server.cache_store_chunk_bytes,
                     "Largest value written to the cache store (payloads are chunked)")
          ->capture_default_str();
      sub.add_flag("--no-prompt-reuse", o->no_reuse, "Prefill every prompt, even one seen before");
      sub.add_option("--prefix-reuse-min", o->server.prefix_reuse_min,
                     "Shortest common token prefix with a stored uncompressed prompt that is "
                     "reused instead of prefilled")
          ->capture_default_str();
      sub.add_option("--max-tokens,-n,--n-predict", o->server.default_max_tokens,
                     "Default max_tokens (shortened to what the context leaves)")
          ->capture_default_str();
      sub.add_flag(
          "--no-chat", o->no_chat,
          "Send /v1/chat/completions messages as plain text, one per line, instead of rendering "
          "them with the model's chat template");
      snapkv::cli::CacheOptionSpec spec;
      spec.budget = snapkv::cli::BudgetStyle::keep_one;
      static_assert(snapkv::kDefaultKeep == 0.2, "the --keep default below follows generation.h");
      spec.default_keep = "0.2";
      snapkv::cli::add_cache_options(sub, o->cache, spec);
      return [o] { return run_serve(*o); };
    }};

}  // namespace
