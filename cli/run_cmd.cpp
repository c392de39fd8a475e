// `snapkv run`: generate text with the reference engine and a compressed KV cache.
//
//   snapkv run --model M.gguf --prompt "The pass key is 71432. ..." --method snapkv --budget 256
//
// Prints the generated text (streamed to stdout), then one stats line: prompt tokens, kept rows
// per layer (min/mean/max), KV bytes vs an fp16 cache of every token, prefill and decode tokens/s.
// --json prints one JSON object instead. Logs go to stderr. --chat renders the prompt as one user
// message (after an optional --system message) with the model's chat template and stops at any
// end-of-generation token; a model without a recognised template is an error naming the families.
// --verbose adds one stderr line: load / prefill / decode times, and the resident memory after the
// load, after the prefill and at its peak, next to the mapped weights and the KV cache's bytes
// (the weights are memory-mapped: RSS grows by the pages the forward touches, not by a copy).
#include <algorithm>
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
#include "generation_options.h"
#include "json_fields.h"
#include "progress.h"
#include "snapkv/kv/core/config.h"
#include "snapkv/kv/core/method.h"
#include "snapkv/model/chat_template.h"
#include "snapkv/model/generation.h"
#include "snapkv/model/llama.h"
#include "snapkv/model/sampler.h"
#include "snapkv/model/tokenizer.h"
#include "snapkv/ops/gemm.h"
#include "snapkv/util/error.h"
#include "snapkv/util/parallel.h"
#include "snapkv/util/rusage.h"
#include "snapkv/util/timer.h"

namespace {

struct RunOptions {
  std::string model;
  std::string prompt;
  std::string prompt_file;
  snapkv::cli::CacheOptions cache;
  snapkv::cli::GenerationOptions gen;
  snapkv::cli::JsonOutput json;
  bool quiet = false;
  bool verbose = false;  // also log the load / prefill / decode times and RSS after each phase
  snapkv::cli::ProgressFlag progress;
  bool chat = false;   // render the prompt as one user message with the model's chat template
  std::string system;  // --system (with --chat)
};

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

int run_generate(RunOptions& o) {
  using namespace snapkv;
  if (o.prompt.empty() == o.prompt_file.empty()) {
    throw_invalid("run", "prompt source", o.prompt.empty() ? "none" : "both",
                  "exactly one of --prompt or --prompt-file");
  }
  if (!o.system.empty() && !o.chat) {
    throw_invalid("run", "--system without --chat", "--system", "--chat --system TEXT");
  }
  snapkv::cli::apply_threads("run", o.cache.threads);
  snapkv::cli::CacheOptions cache_options = o.cache;
  GenerationConfig generation = o.gen.config();  // bad values fail before the model loads
  cache_options.knobs.seed = generation.sampler.seed;
  const Method method = cache_options.single_method();
  // Validated now with the --budget value so bad settings fail before the model loads; the
  // budget from --keep is applied once the prompt is tokenized.
  (void)cache_options.config_for(method, std::max<size_t>(cache_options.budget, 1));

  o.json.open("run", {{o.model, "--model"}, {o.prompt_file, "--prompt-file"}});
  Timer load_timer;
  const LlamaModel model = snapkv::cli::load_model("run", o.model, o.progress.enabled(o.quiet));
  const Tokenizer tokenizer = Tokenizer::from_gguf(model.file());
  const LlamaConfig& mc = model.config();
  const double load_s = load_timer.seconds();
  const size_t rss_after_load = current_rss_bytes();
  if (!o.quiet) {
    // The weights are memory-mapped, not copied: RSS after the load stays far below their size.
    std::fprintf(stderr,
                 "[run] %s (%s): %zu layers, %zu embd, %zu/%zu heads, head_dim %zu, vocab %zu, "
                 "ctx %zu, %s weights mapped (loaded in %.2f s, RSS %s)\n",
                 mc.name.empty() ? o.model.c_str() : mc.name.c_str(), mc.arch_name(), mc.n_layers,
                 mc.n_embd, mc.n_heads, mc.n_kv_heads, mc.head_dim, mc.n_vocab, mc.n_ctx,
                 mib(model.weight_bytes()).c_str(), load_s, mib(rss_after_load).c_str());
  }
  // An evicting cache in every_chunk mode runs past the model's context (its positions are
  // re-indexed within it, model/llama.h); the policy and the chunk mode decide, not the budget.
  const bool long_prompt = prefill_plan(cache_options.config_for(method, mc.n_ctx)).long_prompt;
  // Otherwise a prompt file longer than n_ctx x the longest token's bytes cannot fit: refuse it
  // while reading instead of tokenizing megabytes first.
  size_t longest_piece = 1;
  for (const std::string& piece : tokenizer.vocab().tokens) {
    longest_piece = std::max(longest_piece, piece.size());
  }
  const size_t max_bytes = long_prompt ? size_t{64} << 20 : mc.n_ctx * longest_piece;
  const std::string text = o.prompt_file.empty()
                               ? o.prompt
                               : snapkv::cli::read_text_file("run", o.prompt_file, max_bytes);
  std::vector<int32_t> prompt;
  if (o.chat) {
    // One user message (after --system) rendered with the model's template and the generation
    // prompt; the render carries the special-token texts (and BOS where the template writes it):
    // parsed, nothing added, as llama.cpp tokenizes templated text.
    const ChatTemplate chat_template = [&] {
      try {
        return ChatTemplate::from_gguf(model.file());
      } catch (const RuntimeError& e) {
        throw RuntimeError(std::string(e.what()) + " (drop --chat to use the prompt as raw text)");
      }
    }();
    std::vector<ChatMessage> messages;
    if (!o.system.empty()) messages.push_back({"system", o.system});
    messages.push_back({"user", text});
    prompt = tokenizer.encode(chat_template.render(messages), /*add_special=*/false,
                              /*parse_special=*/true);
  } else {
    prompt = tokenizer.encode(text);
  }
  if (prompt.empty()) throw_invalid("run", "empty prompt", "0 tokens", ">= 1 token");
  const size_t n_ctx = o.gen.context_limit("run", mc.n_ctx, mc.arch_name());
  if (prompt.size() > n_ctx && !(long_prompt && n_ctx == mc.n_ctx)) {
    throw_invalid("run", "prompt longer than the context",
                  std::to_string(prompt.size()) + " tokens",
                  "<= " +
                      (n_ctx == mc.n_ctx ? std::string(mc.arch_name()) + ".context_length = "
                                         : std::string("--ctx-size ")) +
                      std::to_string(n_ctx));
  }

  const CacheConfig config = cache_options.config_for(method, prompt.size());
  snapkv::cli::Progress progress("run", o.progress.enabled(o.quiet));
  SessionOptions session_options{o.cache.prefill_chunk,
                                 ReconstructionOptions{kvzip_repeat_prompt(tokenizer)}};
  session_options.progress = progress.callback();
  LlamaSession session(model, config, std::move(session_options));
  Timer prefill_timer;
  std::vector<float> logits = session.prefill(prompt);
  const double prefill_s = prefill_timer.seconds();
  progress.done();
  const size_t rss_after_prefill = current_rss_bytes();

  const GenerationResult result = generate(
      session, std::move(logits), tokenizer, generation, prompt, [&](const GenerationPiece& piece) {
        if (!o.json.to_stdout()) {
          std::fwrite(piece.text.data(), 1, piece.text.size(), stdout);
          std::fflush(stdout);
        }
        return true;
      });
  const std::vector<int32_t>& generated = result.tokens;
  const std::string& out_text = result.text;
  const size_t decode_steps = result.decode_steps;
  const double decode_s = result.decode_s;

  const CacheStats stats = session.cache_stats();
  std::vector<size_t> kept;
  // Mean retained rows per KV head of each layer (heads differ under AdaKV).
  for (const LayerCache& cache : session.caches()) kept.push_back(cache.stats().tokens_kept);
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

  if (o.verbose && !o.quiet) {
    std::fprintf(
        stderr,
        "[run] times: load %.3f s, prefill %.3f s (%zu tokens), decode %.3f s (%zu steps); "
        "RSS: after load %s, after prefill %s, peak %s; weights %s mapped (file %s), KV "
        "%s\n",
        load_s, prefill_s, prompt.size(), decode_s, decode_steps, mib(rss_after_load).c_str(),
        mib(rss_after_prefill).c_str(), mib(peak_rss_bytes()).c_str(),
        mib(model.weight_bytes()).c_str(), mib(model.file().size()).c_str(),
        mib(stats.bytes_stored).c_str());
  }
  if (o.json.given()) {
    nlohmann::json j;
    j["text"] = out_text;
    j["tokens"] = generated;
    j["prompt_tokens"] = prompt.size();
    j["generated_tokens"] = generated.size();
    j["finish_reason"] = to_string(result.finish);
    j["method"] = method.name;
    j["policy"] = to_string(config.policy);
    j["codec"] = to_string(config.codec);
    j["budget"] = config.budget;
    snapkv::cli::add_kv_stats(j, session);
    j["kept_rows_per_layer"] = kept;  // mean rows per KV head of each layer
    j["prefill_s"] = prefill_s;
    if (session.reconstruction() != nullptr) {
      j["kvzip_pass_s"] = session.reconstruction()->seconds;  // part of prefill_s
    }
    j["decode_s"] = decode_s;
    j["decode_steps"] = decode_steps;
    j["prefill_tokens_per_s"] = prefill_tps;
    j["decode_tokens_per_s"] = decode_tps;
    j["arch"] = mc.arch_name();
    j["load_s"] = load_s;
    j["rss_after_load_bytes"] = rss_after_load;
    j["rss_after_prefill_bytes"] = rss_after_prefill;
    j["peak_rss_bytes"] = peak_rss_bytes();
    j["config"] =
        snapkv::cli::config_json(snapkv::cli::cache_config_json(cache_options, method, config),
                                 snapkv::cli::to_json(generation));
    // Generated bytes need not be valid UTF-8 (byte tokens): invalid sequences in "text" are
    // replaced when writing.
    o.json.write(j, "run");
  }
  if (!o.json.to_stdout()) std::printf("\n");  // the text ends its line; stdout holds only it
  if (!o.json.to_stdout() && !o.quiet) {  // the figures go to stderr, as llama.cpp's timings do
    std::fflush(stdout);
    std::fprintf(
        stderr,
        "[stats] prompt %zu tokens | generated %zu | kept rows/layer min %zu mean %.1f max %zu | "
        "KV %s vs %s full fp16 (%.1f%%) | prefill %.1f tok/s | decode %.1f tok/s | peak RSS "
        "%s\n",
        prompt.size(), generated.size(), kept_min, kept_mean, kept_max,
        mib(stats.bytes_stored).c_str(), mib(stats.bytes_full_fp16).c_str(), 100.0 * kv_ratio,
        prefill_tps, decode_tps, mib(peak_rss_bytes()).c_str());
  }
  return 0;
}

snapkv::cli::RegisterCommand reg{
    "run", "Generate text with the reference Llama engine and a compressed KV cache",
    [](CLI::App& sub) -> snapkv::cli::Action {
      auto o = std::make_shared<RunOptions>();
      sub.footer(
          "Example:\n  snapkv run --model models/tiny.gguf --prompt \"Once upon a time\" \\\n"
          "      --method snapkv --keep 0.2 --max-tokens 32\n"
          "Prints the text, then: prompt tokens, kept rows per layer (min/mean/max), KV bytes vs\n"
          "an fp16 cache of every token, prefill and decode tokens/s. A prompt longer than the\n"
          "model's context needs an evicting --method with --chunk-mode every_chunk (positions\n"
          "are then re-indexed within the cache). The last prefill chunk always holds the last\n"
          "--window positions (the SnapKV observation window's real queries).");
      sub.add_option("--model,-m", o->model,
                     "GGUF model file (general.architecture llama, qwen2 or qwen3)")
          ->required();
      sub.add_option("--prompt,-p", o->prompt, "Prompt text");
      sub.add_option("--prompt-file,-f,--file", o->prompt_file,
                     "Read the prompt from this file (- = standard input)");
      snapkv::cli::add_cache_options(sub, o->cache, snapkv::cli::query_aware_cache_spec());
      snapkv::cli::add_generation_options(sub, o->gen);
      snapkv::cli::add_json_option(sub, o->json, "the text, tokens and cache statistics");
      auto* quiet = sub.add_flag("--quiet", o->quiet, "No log lines on stderr");
      sub.add_flag("--verbose", o->verbose,
                   "Also log load / prefill / decode times and RSS after load, after prefill and "
                   "at peak")
          ->excludes(quiet);
      sub.add_flag("--chat", o->chat,
                   "Render --prompt as one user message with the model's chat template "
                   "(tokenizer.chat_template: Llama 3, ChatML / Qwen, Mistral [INST])");
      sub.add_option("--system", o->system, "System message (with --chat)");
      snapkv::cli::add_progress_flags(sub, o->progress);
      return [o] { return run_generate(*o); };
    }};

}  // namespace
