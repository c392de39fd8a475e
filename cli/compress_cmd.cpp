// `snapkv compress`: prefill a document once, compress its KV cache question-agnostically (the
// prompt is compressed alone, at its end), and write a .kvc prompt-cache file for `snapkv ask`.
//
//   snapkv compress --model M.gguf --prompt-file doc.txt --method snapkv+kivi4 --keep 0.2
//       --out doc.kvc
//
// Prints one line (or --json one object): tokens, kept rows, file bytes vs an fp16 cache of every
// token, prefill and write seconds. Cache options use the names of `snapkv eval`.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "command.h"
#include "snapkv/eval/methods.h"
#include "snapkv/model/llama.h"
#include "snapkv/model/prompt_cache.h"
#include "snapkv/model/tokenizer.h"
#include "snapkv/ops/gemm.h"
#include "snapkv/util/error.h"
#include "snapkv/util/parallel.h"
#include "snapkv/util/timer.h"

namespace {

struct CompressOptions {
  std::string model;
  std::string prompt_file;
  std::string out;
  std::string method = "snapkv";
  std::string codec;  // empty: the method's codec
  double keep = 0.2;
  size_t budget = 0;  // 0: from --keep
  size_t window = 32;
  size_t sinks = 4;
  std::string pool = "max";
  size_t kernel = 7;
  bool no_keep_window = false;
  size_t chunk = 512;
  int threads = 0;
  bool json = false;
  bool quiet = false;
};

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) snapkv::throw_runtime("compress", "cannot read prompt file", path, "a readable file");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

int run_compress(const CompressOptions& o, bool keep_given) {
  using namespace snapkv;
  if (o.budget > 0 && keep_given) {
    throw_invalid("compress", "budget source", "both --keep and --budget", "one of them");
  }
  if (!(o.keep > 0.0 && o.keep <= 1.0)) {
    throw_invalid("compress", "--keep", std::to_string(o.keep), "a fraction in (0, 1]");
  }
  if (o.threads > 0) {
    set_num_threads(o.threads);
    set_blas_threads(o.threads);
  }
  eval::MethodDefaults defaults;
  defaults.window = o.window;
  defaults.n_sink = o.sinks;
  defaults.pool = parse_pool(o.pool);
  defaults.kernel = o.kernel;
  defaults.keep_window = !o.no_keep_window;
  defaults.chunk_mode = ChunkMode::end_of_prompt;  // question-agnostic: compress the whole prompt
  CacheConfig config = eval::parse_method(o.method, defaults).config;
  if (!o.codec.empty()) {
    const CodecKind codec = parse_codec(o.codec);
    if (config.codec != CodecKind::fp16 && config.codec != codec) {
      throw_invalid("compress", "--codec disagrees with --method", o.codec,
                    std::string(to_string(config.codec)) + " (the method's codec)");
    }
    config.codec = codec;
  }

  const std::string text = read_text(o.prompt_file);
  const LlamaModel model = LlamaModel::load(o.model);
  const Tokenizer tokenizer = Tokenizer::from_gguf(model.file());
  const std::vector<int32_t> tokens = tokenizer.encode(text);
  if (tokens.empty()) throw_invalid("compress", "empty document", "0 tokens", ">= 1 token");
  if (tokens.size() >= model.config().n_ctx) {
    throw_invalid("compress", "document leaves no room for a question",
                  std::to_string(tokens.size()) + " tokens",
                  "< llama.context_length = " + std::to_string(model.config().n_ctx));
  }
  config.budget = o.budget > 0 ? o.budget : eval::budget_for(o.keep, tokens.size(), config);
  config.validate();

  LlamaSession session(model, config, SessionOptions{o.chunk});
  Timer prefill_timer;
  session.prefill(tokens);
  const double prefill_s = prefill_timer.seconds();
  Timer write_timer;
  save_prompt_cache(o.out, session, tokens);
  const double write_s = write_timer.seconds();
  std::ifstream written(o.out, std::ios::binary | std::ios::ate);
  const auto file_bytes = static_cast<size_t>(written.tellg());
  const CacheStats stats = session.cache_stats();

  if (o.json) {
    nlohmann::json j;
    j["out"] = o.out;
    j["prompt_tokens"] = tokens.size();
    j["method"] = o.method;
    j["policy"] = to_string(config.policy);
    j["codec"] = to_string(config.codec);
    j["budget"] = config.budget;
    j["kept_rows"] = stats.tokens_kept;
    j["file_bytes"] = file_bytes;
    j["kv_bytes"] = stats.bytes_stored;
    j["kv_bytes_full_fp16"] = stats.bytes_full_fp16;
    j["prefill_s"] = prefill_s;
    j["write_s"] = write_s;
    std::cout << j.dump(1) << std::endl;
  } else {
    std::printf(
        "[compress] %s: %zu tokens, kept %zu rows/head (budget %zu), %s %s, file %zu bytes "
        "vs %zu for an fp16 cache of every token (%.1f%%), prefill %.2f s, write %.3f s\n",
        o.out.c_str(), tokens.size(), stats.tokens_kept, config.budget,
        std::string(to_string(config.policy)).c_str(), std::string(to_string(config.codec)).c_str(),
        file_bytes, stats.bytes_full_fp16,
        100.0 * static_cast<double>(file_bytes) /
            static_cast<double>(std::max<size_t>(stats.bytes_full_fp16, 1)),
        prefill_s, write_s);
  }
  return 0;
}

snapkv::cli::RegisterCommand reg{
    "compress", "Prefill a document once and write its compressed KV cache (.kvc)",
    [](CLI::App& sub) -> snapkv::cli::Action {
      auto o = std::make_shared<CompressOptions>();
      sub.footer(
          "Example:\n  snapkv compress --model models/snapkv-tiny4.gguf --prompt-file doc.txt \\\n"
          "      --method snapkv+kivi4 --keep 0.2 --out doc.kvc\n"
          "The document is compressed alone (question-agnostic, once at its end); ask questions\n"
          "with `snapkv ask --cache doc.kvc`. The file records the model's fingerprint and is\n"
          "refused for any other model.");
      sub.add_option("--model", o->model, "GGUF model file")->required();
      sub.add_option("--prompt-file", o->prompt_file, "The document (text)")->required();
      sub.add_option("--out", o->out, "The .kvc file to write (replaced atomically)")->required();
      sub.add_option("--method", o->method,
                     "<policy>[+<codec>]: full, snapkv, snapkv-proxy, streaming, chunkkv, knorm, "
                     "random, kivi2, kivi4, snapkv+kivi2, ...")
          ->capture_default_str();
      sub.add_option("--codec", o->codec, "fp16|kivi2|kivi4 (default: the method's)");
      auto* keep = sub.add_option("--keep", o->keep, "Kept fraction of the document's tokens")
                       ->capture_default_str();
      sub.add_option("--budget", o->budget, "Rows kept per KV head (instead of --keep)");
      sub.add_option("--window", o->window, "Observation window")->capture_default_str();
      sub.add_option("--sinks", o->sinks, "First positions always kept")->capture_default_str();
      sub.add_option("--pool", o->pool, "none|max|avg")->capture_default_str();
      sub.add_option("--kernel", o->kernel, "Pooling kernel (odd)")->capture_default_str();
      sub.add_flag("--no-keep-window", o->no_keep_window, "Let the window's rows compete");
      sub.add_option("--chunk", o->chunk, "Prefill chunk size in tokens")->capture_default_str();
      sub.add_option("--threads", o->threads, "Worker threads (0 = all cores)")
          ->capture_default_str();
      sub.add_flag("--json", o->json, "Print one JSON object");
      sub.add_flag("--quiet", o->quiet, "No log lines on stderr");
      return [o, keep] { return run_compress(*o, keep->count() > 0); };
    }};

}  // namespace
