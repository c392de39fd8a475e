// `snapkv run`: generate text with the reference engine and a compressed KV cache.
//
//   snapkv run --model M.gguf --prompt "The pass key is 71432. ..." --method snapkv --budget 256
//
// Prints the generated text (streamed to stdout), then one stats line: prompt tokens, kept rows
// per layer (min/mean/max), KV bytes vs an fp16 cache of every token, prefill and decode tokens/s.
// --json prints one JSON object instead. Logs go to stderr.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "command.h"
#include "snapkv/kv/config.h"
#include "snapkv/model/llama.h"
#include "snapkv/model/sampler.h"
#include "snapkv/model/tokenizer.h"
#include "snapkv/ops/gemm.h"
#include "snapkv/util/error.h"
#include "snapkv/util/parallel.h"
#include "snapkv/util/timer.h"

namespace {

struct RunOptions {
  std::string model;
  std::string prompt;
  std::string prompt_file;
  std::string method = "full";
  size_t budget = 512;
  size_t window = 32;
  size_t sinks = 4;
  std::string pool = "none";
  size_t kernel = 1;
  bool keep_window = false;
  std::string query_source = "auto";
  std::string chunk_mode = "every_chunk";
  std::string codec = "fp16";
  size_t max_tokens = 64;
  float temperature = 0.0f;
  float top_p = 1.0f;
  uint64_t seed = 0;
  int threads = 0;
  size_t chunk = 512;
  bool json = false;
  bool quiet = false;
  size_t decode_budget = 0;
  size_t decode_interval = 16;
};

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) snapkv::throw_runtime("run", "cannot read prompt file", path, "a readable text file");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// "12.34 MiB", or KiB below one MiB.
std::string mib(size_t bytes) {
  char buf[32];
  const double b = static_cast<double>(bytes);
  if (b < 1024.0 * 1024.0) {
    std::snprintf(buf, sizeof buf, "%.1f KiB", b / 1024.0);
  } else {
    std::snprintf(buf, sizeof buf, "%.2f MiB", b / (1024.0 * 1024.0));
  }
  return buf;
}

int run_generate(const RunOptions& o) {
  using namespace snapkv;
  if (o.prompt.empty() == o.prompt_file.empty()) {
    throw_invalid("run", "prompt source", o.prompt.empty() ? "none" : "both",
                  "exactly one of --prompt or --prompt-file");
  }
  if (o.threads > 0) {
    set_num_threads(o.threads);
    set_blas_threads(o.threads);
  }
  CacheConfig config;
  config.policy = parse_policy(o.method);
  config.budget = o.budget;
  config.window = o.window;
  config.n_sink = o.sinks;
  config.pool = parse_pool(o.pool);
  config.kernel = o.kernel;
  config.keep_window = o.keep_window;
  config.query_source = parse_query_source(o.query_source);
  config.chunk_mode = parse_chunk_mode(o.chunk_mode);
  config.codec = parse_codec(o.codec);
  config.seed = o.seed;
  config.decode_budget = o.decode_budget;
  config.decode_interval = o.decode_interval;
  config.validate();
  SamplerConfig sampler_config{o.temperature, o.top_p, o.seed};
  sampler_config.validate();

  const std::string text = o.prompt_file.empty() ? o.prompt : read_text_file(o.prompt_file);
  Timer load_timer;
  const LlamaModel model = LlamaModel::load(o.model);
  const Tokenizer tokenizer = Tokenizer::from_gguf(model.file());
  const LlamaConfig& mc = model.config();
  if (!o.quiet) {
    std::fprintf(stderr,
                 "[run] %s: %zu layers, %zu embd, %zu/%zu heads, vocab %zu, ctx %zu, %s weights "
                 "(loaded in %.2f s)\n",
                 mc.name.empty() ? o.model.c_str() : mc.name.c_str(), mc.n_layers, mc.n_embd,
                 mc.n_heads, mc.n_kv_heads, mc.n_vocab, mc.n_ctx, mib(model.weight_bytes()).c_str(),
                 load_timer.seconds());
  }
  const std::vector<int32_t> prompt = tokenizer.encode(text);
  if (prompt.empty()) throw_invalid("run", "empty prompt", "0 tokens", ">= 1 token");
  if (prompt.size() > mc.n_ctx) {
    throw_invalid("run", "prompt longer than the model's context",
                  std::to_string(prompt.size()) + " tokens",
                  "<= llama.context_length = " + std::to_string(mc.n_ctx));
  }

  LlamaSession session(
      model, config,
      SessionOptions{o.chunk, ReconstructionOptions{kvzip_repeat_prompt(tokenizer)}});
  Sampler sampler(sampler_config);
  Timer prefill_timer;
  std::vector<float> logits = session.prefill(prompt);
  const double prefill_s = prefill_timer.seconds();

  std::vector<int32_t> generated;
  size_t decode_steps = 0;
  Timer decode_timer;
  std::string out_text;
  while (generated.size() < o.max_tokens) {
    const int32_t token = sampler.sample(logits);
    if (token == tokenizer.eos()) break;
    generated.push_back(token);
    const std::string piece = tokenizer.token_to_piece(token);
    out_text += piece;
    if (!o.json) {
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
    }
    if (generated.size() == o.max_tokens || session.n_past() >= mc.n_ctx) break;
    logits = session.decode(token);
    ++decode_steps;
  }
  const double decode_s = decode_timer.seconds();

  const CacheStats stats = session.cache_stats();
  std::vector<size_t> kept;
  for (const LayerCache& cache : session.caches()) kept.push_back(cache.size());
  const size_t kept_min = *std::min_element(kept.begin(), kept.end());
  const size_t kept_max = *std::max_element(kept.begin(), kept.end());
  double kept_mean = 0.0;
  for (size_t k : kept) kept_mean += static_cast<double>(k);
  kept_mean /= static_cast<double>(kept.size());
  const double prefill_tps = static_cast<double>(prompt.size()) / std::max(prefill_s, 1e-9);
  const double decode_tps =
      decode_steps > 0 ? static_cast<double>(decode_steps) / std::max(decode_s, 1e-9) : 0.0;
  const double kv_ratio = stats.bytes_full_fp16 > 0 ? static_cast<double>(stats.bytes_stored) /
                                                          static_cast<double>(stats.bytes_full_fp16)
                                                    : 1.0;

  if (o.json) {
    nlohmann::json j;
    j["text"] = out_text;
    j["tokens"] = generated;
    j["prompt_tokens"] = prompt.size();
    j["generated_tokens"] = generated.size();
    j["method"] = to_string(config.policy);
    j["codec"] = to_string(config.codec);
    j["budget"] = config.budget;
    j["kept_rows"] = {
        {"min", kept_min}, {"mean", kept_mean}, {"max", kept_max}, {"per_layer", kept}};
    j["kv_bytes"] = stats.bytes_stored;
    j["kv_bytes_full_fp16"] = stats.bytes_full_fp16;
    j["kv_ratio"] = kv_ratio;
    j["prefill_s"] = prefill_s;
    if (session.reconstruction() != nullptr) {
      j["kvzip_pass_s"] = session.reconstruction()->seconds;  // part of prefill_s
    }
    j["decode_s"] = decode_s;
    j["decode_steps"] = decode_steps;
    j["prefill_tokens_per_s"] = prefill_tps;
    j["decode_tokens_per_s"] = decode_tps;
    // Generated bytes need not be valid UTF-8 (byte tokens): replace invalid sequences in "text".
    std::cout << j.dump(1, ' ', false, nlohmann::json::error_handler_t::replace) << std::endl;
  } else {
    std::printf(
        "\n[stats] prompt %zu tokens | generated %zu | kept rows/layer min %zu mean %.1f max %zu | "
        "KV %s vs %s full fp16 (%.1f%%) | prefill %.1f tok/s | decode %.1f tok/s\n",
        prompt.size(), generated.size(), kept_min, kept_mean, kept_max,
        mib(stats.bytes_stored).c_str(), mib(stats.bytes_full_fp16).c_str(), 100.0 * kv_ratio,
        prefill_tps, decode_tps);
  }
  return 0;
}

snapkv::cli::RegisterCommand reg{
    "run", "Generate text with the reference Llama engine and a compressed KV cache",
    [](CLI::App& sub) -> snapkv::cli::Action {
      auto o = std::make_shared<RunOptions>();
      sub.footer(
          "Example:\n  snapkv run --model models/tiny.gguf --prompt \"Once upon a time\" \\\n"
          "      --method snapkv --budget 256 --window 32 --pool max --kernel 7 --max-tokens 32\n"
          "Prints the text, then: prompt tokens, kept rows per layer (min/mean/max), KV bytes vs\n"
          "an fp16 cache of every token, prefill and decode tokens/s. A prompt longer than the\n"
          "model's context is an error. The last prefill chunk always holds the prompt's last\n"
          "--window positions (the SnapKV observation window's real queries).");
      sub.add_option("--model", o->model, "GGUF model file (general.architecture = llama)")
          ->required();
      sub.add_option("--prompt", o->prompt, "Prompt text");
      sub.add_option("--prompt-file", o->prompt_file, "Read the prompt from this file");
      sub.add_option("--method", o->method,
                     "full|snapkv|streaming|random|knorm|chunkkv|kvzip (kvzip needs --chunk-mode "
                     "end_of_prompt)")
          ->capture_default_str();
      sub.add_option("--budget", o->budget, "Rows kept per KV head after prefill")
          ->capture_default_str();
      sub.add_option("--window", o->window, "Observation window (queries)")->capture_default_str();
      sub.add_option("--sinks", o->sinks, "First positions always kept")->capture_default_str();
      sub.add_option("--pool", o->pool, "none|max|avg pooling of the scores")
          ->capture_default_str();
      sub.add_option("--kernel", o->kernel, "Pooling kernel (odd)")->capture_default_str();
      sub.add_flag("--keep-window", o->keep_window, "Always keep the window's own rows (paper)");
      sub.add_option("--query-source", o->query_source,
                     "auto|queries|keys (keys: last window keys as proxy queries)")
          ->capture_default_str();
      sub.add_option("--chunk-mode", o->chunk_mode, "every_chunk|end_of_prompt")
          ->capture_default_str();
      sub.add_option("--codec", o->codec, "fp16|kivi2|kivi4 storage of kept rows")
          ->capture_default_str();
      sub.add_option("--max-tokens", o->max_tokens, "Tokens to generate (stops at EOS)")
          ->capture_default_str();
      sub.add_option("--temperature", o->temperature, "0 = greedy")->capture_default_str();
      sub.add_option("--top-p", o->top_p, "Nucleus mass in (0, 1]")->capture_default_str();
      sub.add_option("--seed", o->seed, "Sampler and random-policy seed")->capture_default_str();
      sub.add_option("--threads", o->threads, "Worker threads (0 = all cores)")
          ->capture_default_str();
      sub.add_option("--chunk", o->chunk, "Prefill chunk size in tokens")->capture_default_str();
      sub.add_option("--decode-budget", o->decode_budget,
                     "Rows per KV head kept during generation (0 = no decode-time eviction)")
          ->capture_default_str();
      sub.add_option("--decode-interval", o->decode_interval,
                     "Decode steps between re-selections under --decode-budget")
          ->capture_default_str();
      sub.add_flag("--json", o->json, "Print one JSON object instead of text + stats");
      sub.add_flag("--quiet", o->quiet, "No log lines on stderr");
      return [o] { return run_generate(*o); };
    }};

}  // namespace
