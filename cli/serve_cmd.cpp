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
  std::string pool = "max";
  bool no_keep_window = false;
  int threads = 0;
};

snapkv::serve::Server* g_server = nullptr;

void on_signal(int) {
  if (g_server != nullptr) g_server->stop();
}

int run_serve(ServeOptions o) {
  using namespace snapkv;
  if (o.threads > 0) {
    set_num_threads(o.threads);
    set_blas_threads(o.threads);
  }
  o.server.defaults.pool = parse_pool(o.pool);
  o.server.defaults.keep_window = !o.no_keep_window;
  o.server.defaults.chunk_mode = ChunkMode::end_of_prompt;
  (void)eval::parse_method(o.server.default_method, o.server.defaults);  // bad usage before load
  const LlamaModel model = LlamaModel::load(o.model);
  const Tokenizer tokenizer = Tokenizer::from_gguf(model.file());
  serve::Server server(model, tokenizer, o.server);
  const int port = server.bind();
  std::fprintf(stderr, "[serve] listening on http://%s:%d (model id '%s', %zu concurrent)\n",
               o.server.host.c_str(), port, o.server.model_id.c_str(), o.server.max_concurrent);
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
          "GET/DELETE /v1/caches/{id}; \"cache_id\" on a completion asks a compressed document.");
      sub.add_option("--model", o->model, "GGUF model file")->required();
      sub.add_option("--host", o->server.host, "Address to listen on")->capture_default_str();
      sub.add_option("--port", o->server.port, "Port (0: any free port)")->capture_default_str();
      sub.add_option("--model-id", o->server.model_id, "Model id reported and accepted")
          ->capture_default_str();
      sub.add_option("--max-concurrent", o->server.max_concurrent,
                     "Requests served at once (more: 503)")
          ->capture_default_str();
      sub.add_option("--max-body", o->server.max_body_bytes, "Largest request body in bytes")
          ->capture_default_str();
      sub.add_option("--max-caches", o->server.max_caches, "Compressed documents held at once")
          ->capture_default_str();
      sub.add_option("--cache-dir", o->server.cache_dir,
                     "Where {\"save\": true} writes .kvc files");
      sub.add_option("--method", o->server.default_method, "Default cache method")
          ->capture_default_str();
      sub.add_option("--keep", o->server.default_keep, "Default kept fraction")
          ->capture_default_str();
      sub.add_option("--window", o->server.defaults.window, "Observation window")
          ->capture_default_str();
      sub.add_option("--sinks", o->server.defaults.n_sink, "First positions always kept")
          ->capture_default_str();
      sub.add_option("--pool", o->pool, "none|max|avg")->capture_default_str();
      sub.add_option("--kernel", o->server.defaults.kernel, "Pooling kernel (odd)")
          ->capture_default_str();
      sub.add_flag("--no-keep-window", o->no_keep_window, "Let the window's rows compete");
      sub.add_option("--max-tokens", o->server.default_max_tokens, "Default max_tokens")
          ->capture_default_str();
      sub.add_option("--threads", o->threads, "Worker threads (0 = all cores)")
          ->capture_default_str();
      return [o] { return run_serve(*o); };
    }};

}  // namespace
