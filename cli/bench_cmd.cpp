// `snapkv bench`: prefill and decode speed of the reference engine, in two modes.
//
// With --model M.gguf: any GGUF the engine loads, timed as llama.cpp's llama-bench times it
// (cli/bench_model.h: pp<P>, tg<N>, tg<N>@d<P>, thread scaling, peak RSS per phase):
//
//   snapkv bench --model M.gguf -p 512 -n 128 --threads 1,2 -r 3 --json out.json
//
// Without it: a random-weight model of a realistic shape, full cache vs SnapKV, at several
// prompt lengths:
//
//   snapkv bench --types f16,q8_0 --lengths 1024,4096,16384 --budget 1024 --repeats 3
//
// For each weight type, prompt length and method: `repeats` fresh sessions, each a timed prefill
// of random tokens then `decode-tokens` timed greedy decode steps; the table reports medians and
// the ratios method / full measured in the same run (method names as in `snapkv eval`: snapkv,
// snapkv-proxy, streaming, kivi2, snapkv+kivi2, ...). Shape flags shrink the model for small
// machines.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench_model.h"
#include "cache_options.h"
#include "command.h"
#include "json_fields.h"
#include "progress.h"
#include "snapkv/eval/model_bench.h"
#include "snapkv/kv/core/config.h"
#include "snapkv/kv/core/method.h"
#include "snapkv/model/llama.h"
#include "snapkv/model/random_model.h"
#include "snapkv/model/sampler.h"
#include "snapkv/ops/gemm.h"
#include "snapkv/util/error.h"
#include "snapkv/util/parallel.h"
#include "snapkv/util/timer.h"

namespace {

struct BenchOptions {
  size_t layers = 16, embd = 2048, heads = 32, kv_heads = 8, ff = 5632, vocab = 32000;
  std::string types = "f16,q8_0";
  std::string lengths = "1024,4096,16384";
  snapkv::cli::CacheOptions cache;  // --methods, --budget | --keep, window, pool, threads...
  size_t decode_tokens = 32;
  size_t repeats = 3;
  uint64_t seed = 1;
  snapkv::cli::JsonOutput json;
  bool quiet = false;
  snapkv::cli::ProgressFlag progress;
  // --model mode (cli/bench_model.h) and the flags both modes share under llama-bench's names.
  std::string model;
  std::string threads = "0";  // comma list in --model mode, one count otherwise
  bool no_warmup = false;
  CLI::Option* lengths_option = nullptr;
  CLI::Option* decode_option = nullptr;
  CLI::Option* methods_option = nullptr;
  std::vector<CLI::Option*> random_only;  // shape and --types: meaningless with --model
};

using snapkv::split_list;

struct Measurement {
  std::string type, method;
  size_t prompt = 0;
  double prefill_tps = 0, decode_tps = 0;
  size_t kv_bytes = 0, kv_full_bytes = 0, kept = 0;
  nlohmann::json kv_stats;                     // cli/json_fields.h add_kv_stats
  double prefill_ratio = 1, decode_ratio = 1;  // vs full, same type and length
};

int run_model_mode(BenchOptions& o) {
  using namespace snapkv;
  for (const CLI::Option* opt : o.random_only) {
    if (opt->count() > 0) {
      throw_invalid("bench", opt->get_name() + " with --model",
                    opt->get_name() + " " + opt->as<std::string>(),
                    "no shape or --types flags: the GGUF file fixes the model");
    }
  }
  cli::ModelBenchOptions m;
  m.model = o.model;
  const bool lengths_given = o.lengths_option->count() > 0;
  for (const std::string& s : split_list(lengths_given ? o.lengths : std::string("512"))) {
    size_t used = 0;
    unsigned long long v = 0;
    try {
      v = std::stoull(s, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != s.size() || s.front() == '-') {
      throw_invalid("bench", "-p/--n-prompt entry not a token count", "'" + s + "'",
                    "comma-separated counts, e.g. 512,1024 (0 = no prompt test)");
    }
    m.n_prompt.push_back(static_cast<size_t>(v));
  }
  m.n_gen = o.decode_option->count() > 0 ? o.decode_tokens : 128;
  m.threads = cli::parse_thread_list(o.threads);
  m.repetitions = o.repeats;
  m.warmup = !o.no_warmup;
  m.seed = o.seed;
  m.quiet = o.quiet;
  m.progress = o.progress.enabled(o.quiet);
  o.cache.knobs.seed = o.seed;
  if (o.methods_option->count() == 0) o.cache.methods = "full";  // llama-bench's only cache
  m.cache = &o.cache;
  m.json = &o.json;
  return cli::run_model_bench(m);
}

int run_bench(BenchOptions& o) {
  using namespace snapkv;
  if (!o.model.empty()) return run_model_mode(o);
  if (cli::parse_thread_list(o.threads).size() != 1) {
    throw_invalid("bench", "--threads list without --model", o.threads,
                  "one count (thread lists are for --model runs)");
  }
  cli::apply_threads("bench", o.cache.threads);
  if (o.repeats == 0) throw_invalid("bench", "--repeats", "0", ">= 1");
  std::vector<size_t> lengths;
  for (const std::string& s : split_list(o.lengths)) {
    try {
      lengths.push_back(std::stoul(s));
    } catch (const std::exception&) {
      throw_invalid("bench", "--lengths entry not a number", s, "comma-separated token counts");
    }
    if (lengths.back() == 0) throw_invalid("bench", "--lengths entry", "0", ">= 1");
  }
  if (lengths.empty()) throw_invalid("bench", "--lengths", "empty", "at least one length");
  // Method names and their CacheConfig come from the shared cache options (eval's grammar).
  cli::CacheOptions cache_options = o.cache;
  cache_options.knobs.seed = o.seed;
  const std::vector<Method> methods = cache_options.parsed_methods();
  for (size_t length : lengths) {
    for (const Method& m : methods) (void)cache_options.config_for(m, length);
  }
  o.json.open("bench", {{o.model, "--model"}});

  std::vector<Measurement> results;
  nlohmann::json json_models = nlohmann::json::array();
  const std::vector<std::string> types = split_list(o.types);
  cli::Progress progress("bench", o.progress.enabled(o.quiet));
  const size_t total_runs = types.size() * lengths.size() * methods.size() * o.repeats;
  size_t runs_done = 0;
  for (const std::string& type_name : types) {
    const auto type = gguf::tensor_type_from_name(type_name);
    if (!type) throw_invalid("bench", "--types entry", type_name, "f32, f16 or q8_0");
    RandomModelSpec spec;
    spec.n_layers = o.layers;
    spec.n_embd = o.embd;
    spec.n_heads = o.heads;
    spec.n_kv_heads = o.kv_heads;
    spec.n_ff = o.ff;
    spec.n_vocab = o.vocab;
    spec.n_ctx = *std::max_element(lengths.begin(), lengths.end()) + o.decode_tokens + 1;
    spec.type = *type;
    spec.seed = o.seed;
    spec.validate();
    snapkv::cli::check_fits_memory("bench", "random model weights", spec.weight_bytes());
    Timer build_timer;
    char line[256];
    if (!o.quiet) {
      std::snprintf(line, sizeof line, "[bench] building random %s model (%.1f MiB)...",
                    type_name.c_str(),
                    static_cast<double>(spec.weight_bytes()) / (1024.0 * 1024.0));
      progress.log(line);
    }
    const LlamaModel model(make_random_model(spec));
    if (!o.quiet) {
      std::snprintf(line, sizeof line, "[bench] built in %.1f s", build_timer.seconds());
      progress.log(line);
    }
    json_models.push_back({{"type", type_name}, {"weight_bytes", model.weight_bytes()}});

    for (size_t length : lengths) {
      const std::vector<int32_t> prompt =
          eval::random_tokens(length, o.vocab, o.seed * 7919 + length);
      Measurement full_m;
      for (const Method& method : methods) {
        const CacheConfig config = cache_options.config_for(method, length);
        std::vector<double> prefill_tps, decode_tps;
        Measurement m;
        m.type = type_name;
        m.method = method.name;
        m.prompt = length;
        for (size_t r = 0; r < o.repeats; ++r) {
          LlamaSession session(model, config, SessionOptions{o.cache.prefill_chunk});
          Timer t_prefill;
          std::vector<float> logits = session.prefill(prompt);
          const double prefill_s = t_prefill.seconds();
          Timer t_decode;
          for (size_t s = 0; s < o.decode_tokens; ++s) logits = session.decode(argmax(logits));
          const double decode_s = t_decode.seconds();
          prefill_tps.push_back(static_cast<double>(length) / prefill_s);
          if (o.decode_tokens > 0) {
            decode_tps.push_back(static_cast<double>(o.decode_tokens) / decode_s);
          }
          const CacheStats st = session.cache_stats();
          m.kv_bytes = st.bytes_stored;
          m.kv_full_bytes = st.bytes_full_fp16;
          m.kept = st.tokens_kept;
          m.kv_stats = nlohmann::json::object();
          snapkv::cli::add_kv_stats(m.kv_stats, session);
          if (!o.quiet) {
            std::snprintf(line, sizeof line,
                          "[bench] %s %zu %s run %zu/%zu: prefill %.1f tok/s, decode %.2f tok/s",
                          type_name.c_str(), length, m.method.c_str(), r + 1, o.repeats,
                          prefill_tps.back(), decode_tps.empty() ? 0.0 : decode_tps.back());
            progress.log(line);
          }
          progress.update("runs", ++runs_done, total_runs);
        }
        m.prefill_tps = eval::summarize(prefill_tps).median;
        m.decode_tps = decode_tps.empty() ? 0.0 : eval::summarize(decode_tps).median;
        if (method.name == "full") full_m = m;
        if (full_m.prefill_tps > 0) {
          m.prefill_ratio = m.prefill_tps / full_m.prefill_tps;
          m.decode_ratio = full_m.decode_tps > 0 ? m.decode_tps / full_m.decode_tps : 0.0;
        }
        results.push_back(m);
      }
    }
  }
  progress.done();

  if (o.json.given()) {
    nlohmann::json j;
    j["model"] = {{"layers", o.layers},     {"embd", o.embd}, {"heads", o.heads},
                  {"kv_heads", o.kv_heads}, {"ff", o.ff},     {"vocab", o.vocab}};
    j["models"] = json_models;
    j["settings"] = {{"cache", cache_options.to_json()},
                     {"decode_tokens", o.decode_tokens},
                     {"repeats", o.repeats},
                     {"threads", num_threads()}};
    j["results"] = nlohmann::json::array();
    for (const Measurement& m : results) {
      j["results"].push_back({{"type", m.type},
                              {"prompt", m.prompt},
                              {"method", m.method},
                              {"prefill_tokens_per_s", m.prefill_tps},
                              {"decode_tokens_per_s", m.decode_tps},
                              {"kv_bytes", m.kv_bytes},
                              {"kv_bytes_full_fp16", m.kv_full_bytes},
                              {"kept_rows", m.kv_stats.value("kept_rows", nlohmann::json())},
                              {"kv_ratio", m.kv_stats.value("kv_ratio", nlohmann::json())},
                              {"prefill_ratio_vs_full", m.prefill_ratio},
                              {"decode_ratio_vs_full", m.decode_ratio}});
    }
    o.json.write(j, "bench");
    if (o.json.to_stdout()) return 0;
  }
  std::printf(
      "model: %zu layers, %zu embd, %zu/%zu heads (head_dim %zu), ff %zu, vocab %zu; "
      "%zu threads; medians of %zu runs, %zu decode steps\n",
      o.layers, o.embd, o.heads, o.kv_heads, o.embd / o.heads, o.ff, o.vocab,
      static_cast<size_t>(num_threads()), o.repeats, o.decode_tokens);
  std::printf("%-5s %7s %-13s %12s %12s %10s %9s %8s %8s\n", "type", "prompt", "method",
              "prefill t/s", "decode t/s", "KV MiB", "kept/head", "pre x", "dec x");
  for (const Measurement& m : results) {
    std::printf("%-5s %7zu %-13s %12.1f %12.2f %10.1f %9zu %8.2f %8.2f\n", m.type.c_str(), m.prompt,
                m.method.c_str(), m.prefill_tps, m.decode_tps,
                static_cast<double>(m.kv_bytes) / (1024.0 * 1024.0), m.kept, m.prefill_ratio,
                m.decode_ratio);
  }
  return 0;
}

snapkv::cli::RegisterCommand reg{
    "bench",
    "Prefill/decode speed: any GGUF as llama-bench times it (--model), or a random-weight "
    "model, full cache vs SnapKV",
    [](CLI::App& sub) -> snapkv::cli::Action {
      auto o = std::make_shared<BenchOptions>();
      sub.footer(
          "Example, a GGUF file as llama-bench times it (thread scaling 1 -> 2):\n"
          "  snapkv bench --model M.gguf -p 512 -n 128 --threads 1,2 -r 3 --json out.json\n"
          "  tests: pp512 = 512-token prefill, tg128 = 128 tokens generated from an empty "
          "context,\n"
          "  tg128@d512 = 128 decode steps after the 512-token prompt; --methods full,snapkv\n"
          "  --budget 256 times cache methods; scripts/bench_vs_llamacpp.sh runs llama-bench\n"
          "  beside it. Defaults with --model: -p 512, -n 128, --methods full.\n"
          "  Peak memory of a chunked prefill ('peak MiB', '+RSS MiB' of the pp rows):\n"
          "  snapkv bench --model M.gguf -p 16384 -n 32 --methods full,snapkv --budget 1024 \\\n"
          "      --chunk-mode every_chunk --prefill-chunk 512\n"
          "Example, random weights (small machine):\n  snapkv bench --layers 4 --embd 512 "
          "--heads 8 --kv-heads 2 --ff 1408 --vocab 4096 \\\n      --lengths 1024,4096 --repeats "
          "3\n"
          "Defaults are a 16-layer, 2048-wide model (32/8 heads, head_dim 64): several GB of\n"
          "memory and minutes per 16K prefill on a few cores. 'pre x' / 'dec x' are tokens/s\n"
          "ratios vs the full cache at the same type and prompt length.");
      sub.add_option("--model,-m", o->model,
                     "GGUF file to time as llama-bench does (else a random-weight model)");
      o->random_only = {
          snapkv::cli::bounded(sub.add_option("--layers", o->layers, "Layers (random model)"), 1,
                               snapkv::cli::kMaxBenchLayers, "layers of the random model")
              ->capture_default_str(),
          sub.add_option("--embd", o->embd, "Embedding width (random model)")
              ->capture_default_str(),
          sub.add_option("--heads", o->heads, "Query heads (random model)")->capture_default_str(),
          sub.add_option("--kv-heads", o->kv_heads, "KV heads (random model)")
              ->capture_default_str(),
          sub.add_option("--ff", o->ff, "Feed-forward width (random model)")->capture_default_str(),
          sub.add_option("--vocab", o->vocab, "Vocabulary size (random model)")
              ->capture_default_str(),
          sub.add_option("--types", o->types,
                         "Comma-separated weight types (f32,f16,q8_0; random model)")
              ->capture_default_str()};
      o->lengths_option =
          sub.add_option("--lengths,-p,--n-prompt", o->lengths,
                         "Comma-separated prompt lengths (--model: default 512; 0 = no prompt "
                         "test)")
              ->capture_default_str();
      snapkv::cli::CacheOptionSpec spec;
      spec.methods = snapkv::cli::MethodArity::list;
      spec.default_methods = "full,snapkv";
      spec.threads = false;  // bench's --threads takes a list (below)
      snapkv::cli::add_cache_options(sub, o->cache, spec);
      o->methods_option = sub.get_option("--methods");
      sub.add_option("--threads,-t", o->threads,
                     "Worker threads (0 = all cores; at most " +
                         std::to_string(snapkv::cli::max_threads()) +
                         "); with --model a comma-separated list, e.g. 1,2, for thread scaling")
          ->capture_default_str()
          ->group("Cache options (the same in run, chat, eval, bench, demo, select, compress)")
          ->check(CLI::Validator(
              [o](std::string& v) -> std::string {
                try {  // the first count is the one --print-cache-config applies
                  o->cache.threads = snapkv::cli::parse_thread_list(v).front();
                } catch (const std::exception& e) {
                  return e.what();
                }
                return std::string();
              },
              "LIST", "thread counts"));
      o->decode_option =
          snapkv::cli::bounded(
              sub.add_option("--decode-tokens,-n,--n-gen", o->decode_tokens,
                             "Decode steps timed per run (--model: default 128; 0 = no generation "
                             "test)"),
              0, snapkv::cli::kMaxContextTokens, "decode steps")
              ->capture_default_str();
      snapkv::cli::bounded(
          sub.add_option("--repeats,-r,--repetitions", o->repeats, "Runs per measurement (median)"),
          1, snapkv::cli::kMaxRepeats, "runs per measurement")
          ->capture_default_str();
      sub.add_flag("--no-warmup", o->no_warmup, "--model: no untimed warm-up run per thread count");
      sub.add_option("--seed", o->seed, "Weights and prompt seed")->capture_default_str();
      snapkv::cli::add_json_option(sub, o->json, "every measurement and the settings");
      snapkv::cli::add_progress_flags(sub, o->progress);
      sub.add_flag("--quiet", o->quiet, "No progress lines on stderr");
      return [o] { return run_bench(*o); };
    }};

}  // namespace
