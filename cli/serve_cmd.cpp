// `snapkv serve`: a local OpenAI-style HTTP server over one model, with compressed documents
// (serve/server.h lists the endpoints and errors).
//
//   snapkv serve --model models/snapkv-tiny4.gguf --port 8080
//   curl -s localhost:8080/v1/caches -H 'Content-Type: application/json'
//       -d '{"document": "...", "method": "snapkv+kivi2"}'
//   curl -s localhost:8080/v1/completions -H 'Content-Type: application/json'
//       -d '{"prompt": "Q?", "cache_id": "cache-..."}'
#include <csignal>
#include <cstdio>
#include <memory>
#include <string>

#include "cache_options.h"
#include "command.h"
#include "snapkv/model/llama.h"
#include "snapkv/model/tokenizer.h"
#include "snapkv/ops/gemm.h"
#include "snapkv/serve/server.h"
#include "snapkv/util/parallel.h"

namespace {

struct ServeOptions {
  std::string model;
  snapkv::serve::ServerOptions server;
  snapkv::cli::CacheOptions cache;  // the server's defaults; requests may override method/keep
  bool no_chat = false;             // chat messages as plain text, not the model's template
  bool no_reuse = false;            // --no-prompt-reuse
};

snapkv::serve::Server* g_server = nullptr;

void on_signal(int) {
  if (g_server != nullptr) g_server->stop();
}

int run_serve(ServeOptions o) {
  using namespace snapkv;
  snapkv::cli::apply_threads("serve", o.cache.threads);
  o.server.defaults = o.cache.knobs;
  o.server.default_method = o.cache.single_method().name;  // bad usage before the load
  o.server.default_keep = o.cache.keeps().at(0);
  o.server.prefill_chunk = o.cache.prefill_chunk;
  o.server.chat_template = !o.no_chat;
  o.server.reuse_prompts = !o.no_reuse;
  const LlamaModel model = LlamaModel::load(o.model);
  const Tokenizer tokenizer = Tokenizer::from_gguf(model.file());
  serve::Server server(model, tokenizer, o.server);
  const int port = server.bind();
  std::fprintf(stderr,
               "[serve] listening on http://%s:%d (model id '%s', %zu concurrent, chat template "
               "%s)\n",
               o.server.host.c_str(), port, o.server.model_id.c_str(), o.server.max_concurrent,
               server.chat_template_status().c_str());
  g_server = &server;
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  server.listen();
  g_server = nullptr;
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
      sub.add_option("--port", o->server.port, "Port (0: any free port)")->capture_default_str();
      sub.add_option("--model-id", o->server.model_id, "Model id reported and accepted")
          ->capture_default_str();
      sub.add_option("--max-concurrent", o->server.max_concurrent,
                     "Requests served at once (more: 503)")
          ->capture_default_str();
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
      sub.add_flag("--no-prompt-reuse", o->no_reuse, "Prefill every prompt, even one seen before");
      sub.add_option("--max-tokens,-n,--n-predict", o->server.default_max_tokens,
                     "Default max_tokens")
          ->capture_default_str();
      sub.add_flag(
          "--no-chat", o->no_chat,
          "Send /v1/chat/completions messages as plain text, one per line, instead of rendering "
          "them with the model's chat template");
      snapkv::cli::CacheOptionSpec spec;
      spec.budget = snapkv::cli::BudgetStyle::keep_one;
      spec.default_keep = "0.2";
      snapkv::cli::add_cache_options(sub, o->cache, spec);
      return [o] { return run_serve(*o); };
    }};

}  // namespace
