// `snapkv bench --model`: the options of eval/model_bench.h from the parsed flags, and its table
// or JSON (cli/bench_model.h).
#include "bench_model.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "progress.h"
#include "snapkv/eval/model_bench.h"
#include "snapkv/kv/core/config.h"
#include "snapkv/kv/core/method.h"
#include "snapkv/model/llama.h"
#include "snapkv/ops/gemm.h"
#include "snapkv/util/error.h"

namespace snapkv::cli {
namespace {

constexpr const char* kComponent = "bench";

double mib(size_t bytes) {
  return static_cast<double>(bytes) / (1024.0 * 1024.0);
}

nlohmann::json summary_json(const eval::BenchSummary& s) {
  return {{"median", s.median}, {"min", s.min},       {"max", s.max},
          {"mean", s.mean},     {"stddev", s.stddev}, {"samples", s.samples}};
}

std::string type_of(const LlamaModel& m) {
  const LlamaWeights& w = m.weights();
  return w.layers.empty() ? to_string(w.token_embd.type) : to_string(w.layers.front().wq.type);
}

size_t file_bytes(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? static_cast<size_t>(st.st_size) : 0;
}

}  // namespace

std::vector<int> parse_thread_list(const std::string& text) {
  std::vector<int> out;
  for (const std::string& s : split_list(text)) {
    size_t used = 0;
    int v = 0;
    try {
      v = std::stoi(s, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != s.size()) {
      throw_invalid(kComponent, "--threads entry not an integer", "'" + s + "'",
                    "a comma-separated list of thread counts, e.g. 1,2");
    }
    out.push_back(v);
  }
  if (out.empty()) throw_invalid(kComponent, "--threads", "an empty list", "e.g. 1,2");
  return out;
}

int run_model_bench(const ModelBenchOptions& o) {
  const CacheOptions& cache = *o.cache;
  if (o.repetitions == 0) throw_invalid(kComponent, "-r/--repetitions", "0", ">= 1");
  const std::vector<Method> methods = cache.parsed_methods();
  const LlamaModel model = load_model(kComponent, o.model, o.progress);
  const LlamaConfig& c = model.config();
  eval::ModelBenchSpec spec;
  spec.n_prompt = o.n_prompt;
  spec.n_gen = o.n_gen;
  spec.threads = o.threads;
  spec.repetitions = o.repetitions;
  spec.warmup = o.warmup;
  spec.seed = o.seed;
  spec.prefill_chunk = cache.prefill_chunk;
  spec.methods = methods;
  spec.config_for = [&](const Method& m, size_t tokens) { return cache.config_for(m, tokens); };
  spec.set_threads = [](int threads) { apply_threads(kComponent, threads); };
  // Timed runs in all: per method, thread count and repetition, one per prompt length (and one
  // more per length with -n > 0: tg after the prompt) and one tg from an empty context.
  const size_t n_lengths = static_cast<size_t>(
      std::count_if(o.n_prompt.begin(), o.n_prompt.end(), [](size_t p) { return p > 0; }));
  const size_t total_runs = methods.size() * o.threads.size() * o.repetitions *
                            (n_lengths * (o.n_gen > 0 ? 2 : 1) + (o.n_gen > 0 ? 1 : 0));
  Progress progress("bench", o.progress);
  size_t runs_done = 0;
  if (!o.quiet) {
    spec.progress = [&](const std::string& method, const std::string& test, int used, size_t r,
                        double tps) {
      char line[256];
      std::snprintf(line, sizeof line, "[bench] %s %s %d threads run %zu/%zu: %.2f tok/s",
                    method.c_str(), test.c_str(), used, r + 1, o.repetitions, tps);
      progress.log(line);
      progress.update("runs", ++runs_done, total_runs);
    };
  }
  eval::check_model_bench(spec, c);
  for (const Method& m : methods) {
    for (size_t p : o.n_prompt) (void)cache.config_for(m, std::max<size_t>(p, 1));
  }
  if (o.json != nullptr) o.json->open(kComponent, {{o.model, "--model"}});

  const eval::ModelBenchReport report = eval::run_model_bench(model, spec);
  progress.done();
  const std::vector<eval::ModelBenchRow>& rows = report.rows;
  const size_t process_peak = report.process_peak_rss;

  if (o.json != nullptr && o.json->given()) {
    nlohmann::json j;
    j["mode"] = "model";
    j["model"] = {{"path", o.model},
                  {"arch", c.arch_name()},
                  {"name", c.name},
                  {"type", type_of(model)},
                  {"n_layers", c.n_layers},
                  {"n_embd", c.n_embd},
                  {"n_heads", c.n_heads},
                  {"n_kv_heads", c.n_kv_heads},
                  {"head_dim", c.head_dim},
                  {"n_ff", c.n_ff},
                  {"n_vocab", c.n_vocab},
                  {"n_ctx", c.n_ctx},
                  {"weight_bytes", model.weight_bytes()},
                  {"file_bytes", file_bytes(o.model)}};
    j["settings"] = {{"cache", cache.to_json()},
                     {"n_prompt", o.n_prompt},
                     {"n_gen", o.n_gen},
                     {"threads", o.threads},
                     {"repetitions", o.repetitions},
                     {"warmup", o.warmup},
                     {"seed", o.seed},
                     {"prefill_chunk", cache.prefill_chunk},
                     {"blas_allowed", blas_allowed()}};
    j["results"] = nlohmann::json::array();
    for (const eval::ModelBenchRow& r : rows) {
      j["results"].push_back({{"method", r.method},
                              {"test", r.test},
                              {"kind", eval::to_string(r.kind)},
                              {"n_prompt", r.n_prompt},
                              {"n_gen", r.n_gen},
                              {"threads_asked", r.threads_asked},
                              {"threads", r.threads},
                              {"tokens_per_s", summary_json(r.tps)},
                              {"scaling_vs_first_threads", r.scaling},
                              {"first_threads", o.threads.front()},
                              {"peak_rss_bytes", r.peak_rss},
                              {"rss_start_bytes", r.rss_start},
                              {"rss_growth_bytes", r.rss_growth},
                              {"peak_rss_is_phase", r.peak_is_phase},
                              {"cores_busy", r.cores_busy},
                              {"kv_bytes", r.kv_bytes},
                              {"kept_rows_per_head", r.kept}});
    }
    j["peak_rss_bytes"] = process_peak;
    o.json->write(j, kComponent);
    if (o.json->to_stdout()) return 0;
  }
  std::printf(
      "model: %s (%s, %s, %zu layers, embd %zu, %zu/%zu heads, ff %zu, vocab %zu, ctx %zu, "
      "%.1f MiB of weights)\n",
      o.model.c_str(), c.arch_name(), type_of(model).c_str(), c.n_layers, c.n_embd, c.n_heads,
      c.n_kv_heads, c.n_ff, c.n_vocab, c.n_ctx, mib(model.weight_bytes()));
  std::printf(
      "repetitions %zu (median, min, max tok/s), prefill chunk %zu; 'x t%d' = median / "
      "the same test's at --threads %d; 'cores' = CPU time / wall time of the phase (spinning "
      "counts as busy); peak RSS of the phase and its growth over the RSS at its start\n",
      o.repetitions, cache.prefill_chunk, o.threads.front(), o.threads.front());
  std::printf("%-14s %-14s %7s %10s %10s %10s %7s %6s %10s %10s %9s\n", "method", "test", "threads",
              "t/s", "min", "max", ("x t" + std::to_string(o.threads.front())).c_str(), "cores",
              "peak MiB", "+RSS MiB", "KV MiB");
  for (const eval::ModelBenchRow& r : rows) {
    std::printf("%-14s %-14s %7d %10.2f %10.2f %10.2f %7.2f %6.2f %10.1f %10.1f %9.2f\n",
                r.method.c_str(), r.test.c_str(), r.threads, r.tps.median, r.tps.min, r.tps.max,
                r.scaling, r.cores_busy, mib(r.peak_rss), mib(r.rss_growth), mib(r.kv_bytes));
  }
  std::printf("process peak RSS %.1f MiB%s\n", mib(process_peak),
              std::all_of(rows.begin(), rows.end(),
                          [](const eval::ModelBenchRow& r) { return r.peak_is_phase; })
                  ? ""
                  : " (per-phase peaks unavailable here: the columns show the process peak)");
  return 0;
}

}  // namespace snapkv::cli
