// `snapkv compress`: prefill a document once, compress its KV cache question-agnostically (the
// prompt is compressed alone, at its end), and write a .kvc prompt-cache file for `snapkv ask`.
//
//   snapkv compress --model M.gguf --prompt-file doc.txt --method snapkv+kivi4 --keep 0.2
//       --out doc.kvc
//
// Prints one line (or --json one object): tokens, kept rows, file bytes vs an fp16 cache of every
// token, prefill and write seconds. Cache options are the shared ones (cli/cache_options.h);
// the default method is kvzip at keep 0.2, the best question-agnostic method measured.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "cache_options.h"
#include "command.h"
#include "json_fields.h"
#include "progress.h"
#include "snapkv/kv/core/method.h"
#include "snapkv/model/kvzip.h"
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
  snapkv::cli::CacheOptions cache;  // --method (default kvzip), --keep (default 0.2) | --budget
  snapkv::cli::JsonOutput json;
  bool quiet = false;
  snapkv::cli::ProgressFlag progress;
};

int run_compress(CompressOptions& o) {
  using namespace snapkv;
  snapkv::cli::apply_threads("compress", o.cache.threads);
  // Question-agnostic: the document is compressed alone (by default once, at its end).
  const snapkv::cli::CacheOptions& cache_options = o.cache;
  const Method method = cache_options.single_method();
  (void)cache_options.config_for(method, 4096);  // bad settings fail before the model loads
  snapkv::cli::check_output("compress", {o.out, "--out"}, snapkv::Seek::required,
                            {{o.model, "--model"}, {o.prompt_file, "--prompt-file"}});
  o.json.open("compress",
              {{o.model, "--model"}, {o.prompt_file, "--prompt-file"}, {o.out, "--out"}});

  const std::string text = snapkv::cli::read_text_file("compress", o.prompt_file, size_t{64} << 20);
  const LlamaModel model =
      snapkv::cli::load_model("compress", o.model, o.progress.enabled(o.quiet));
  const Tokenizer tokenizer = Tokenizer::from_gguf(model.file());
  const std::vector<int32_t> tokens = tokenizer.encode(text);
  if (tokens.empty()) throw_invalid("compress", "empty document", "0 tokens", ">= 1 token");
  // An evicting cache in every_chunk mode goes past the context (positions re-indexed within
  // it); the loaded cache then answers from positions inside the context too.
  const bool long_prompt =
      prefill_plan(cache_options.config_for(method, model.config().n_ctx)).long_prompt;
  if (tokens.size() >= model.config().n_ctx && !long_prompt) {
    throw_invalid("compress", "document leaves no room for a question",
                  std::to_string(tokens.size()) + " tokens",
                  "< llama.context_length = " + std::to_string(model.config().n_ctx));
  }
  const CacheConfig config = cache_options.config_for(method, tokens.size());
  snapkv::cli::Progress progress("compress", o.progress.enabled(o.quiet));
  SessionOptions session_options{o.cache.prefill_chunk,
                                 ReconstructionOptions{kvzip_repeat_prompt(tokenizer)}};
  session_options.progress = progress.callback();
  LlamaSession session(model, config, std::move(session_options));
  Timer prefill_timer;
  session.prefill(tokens);
  const double prefill_s = prefill_timer.seconds();
  progress.done();
  Timer write_timer;
  save_prompt_cache(o.out, session, tokens);
  const double write_s = write_timer.seconds();
  std::ifstream written(o.out, std::ios::binary | std::ios::ate);
  const auto file_bytes = static_cast<size_t>(written.tellg());
  const CacheStats stats = session.cache_stats();

  if (o.json.given()) {
    nlohmann::json j;
    j["cache_file"] = o.out;
    j["prompt_tokens"] = tokens.size();
    j["method"] = method.name;
    j["policy"] = to_string(config.policy);
    j["codec"] = to_string(config.codec);
    j["budget"] = config.budget;
    j["file_bytes"] = file_bytes;
    snapkv::cli::add_kv_stats(j, session);
    j["prefill_s"] = prefill_s;
    j["write_s"] = write_s;
    j["config"] = snapkv::cli::config_json(
        snapkv::cli::cache_config_json(cache_options, method, config), nullptr);
    o.json.write(j, "compress");
  }
  if (!o.quiet) {  // the product is the file: the summary is a log line
    std::fprintf(
        stderr,

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
          "with `snapkv ask --cache doc.kvc`. The file records the model's fingerprint (its GGUF\n"
          "metadata, tensor table and a sample of every tensor's bytes) and is refused for other\n"
          "models.");
      sub.add_option("--model,-m", o->model, "GGUF model file")->required();
      sub.add_option("--prompt-file,-f,--file", o->prompt_file,
                     "The document (text; - = standard input)")
          ->required();
      sub.add_option("--out,-o", o->out, "The .kvc file to write (replaced atomically)")
          ->required();
      snapkv::cli::add_cache_options(sub, o->cache, snapkv::cli::document_cache_spec());
      snapkv::cli::add_json_option(sub, o->json, "tokens, kept rows, file bytes and timings");
      sub.add_flag("--quiet", o->quiet, "No log lines on stderr");
      snapkv::cli::add_progress_flags(sub, o->progress);
      return [o] { return run_compress(*o); };
    }};

}  // namespace
