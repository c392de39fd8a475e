// `snapkv bench --model`: llama-bench-style timing of a GGUF file (cli/bench_model.h).
#include "bench_model.h"

#include <sys/resource.h>
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "snapkv/eval/methods.h"
#include "snapkv/kv/core/config.h"
#include "snapkv/model/llama.h"
#include "snapkv/model/sampler.h"
#include "snapkv/ops/gemm.h"
#include "snapkv/util/error.h"
#include "snapkv/util/parallel.h"
#include "snapkv/util/rusage.h"
#include "snapkv/util/text.h"
#include "snapkv/util/timer.h"

namespace snapkv::cli {
namespace {

constexpr const char* kComponent = "bench";

double mib(size_t bytes) {
  return static_cast<double>(bytes) / (1024.0 * 1024.0);
}

// Tokens/s of the repetitions of one test.
struct Summary {
  std::vector<double> samples;
  double median = 0, min = 0, max = 0, mean = 0, stddev = 0;
};

Summary summarize(std::vector<double> v) {
  Summary s;
  s.samples = v;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  s.median = n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  s.min = v.front();
  s.max = v.back();
  double sum = 0;
  for (double x : v) sum += x;
  s.mean = sum / static_cast<double>(n);
  double sq = 0;
  for (double x : v) sq += (x - s.mean) * (x - s.mean);
  s.stddev = n > 1 ? std::sqrt(sq / static_cast<double>(n - 1)) : 0.0;  // as llama-bench
  return s;
}

// User + system CPU seconds of the whole process so far (every thread).
double process_cpu_seconds() {
  struct rusage u {};
  if (getrusage(RUSAGE_SELF, &u) != 0) return 0.0;
  auto sec = [](const timeval& t) {
    return static_cast<double>(t.tv_sec) + 1e-6 * static_cast<double>(t.tv_usec);
  };
  return sec(u.ru_utime) + sec(u.ru_stime);
}

// The peak resident set size (reset before the phase, read after it) and the CPU time of one
// phase.
struct PhaseMemory {
  bool reset = false;             // false: the figure is the process peak so far
  size_t start = 0;               // RSS when the phase began
  size_t peak = 0;                // peak RSS during the phase
  double cpu_start = 0, cpu = 0;  // process CPU seconds at the start, spent in the phase
  void begin() {
    reset = reset_peak_rss();
    start = current_rss_bytes();
    cpu_start = process_cpu_seconds();
  }
  void end() {
    cpu = process_cpu_seconds() - cpu_start;
    // The mark and the current RSS come from different kernel counters (the mark is updated
    // lazily): the phase's peak is at least what was resident at its start and end.
    const size_t hwm = peak_rss_since_reset_bytes();
    peak = std::max({hwm > 0 ? hwm : peak_rss_bytes(), start, current_rss_bytes()});
  }
  size_t growth() const { return peak > start ? peak - start : 0; }
};

enum class TestKind { pp, tg, tg_after_prompt };

const char* kind_name(TestKind k) {
  switch (k) {
    case TestKind::pp:
      return "pp";
    case TestKind::tg:
      return "tg";
    case TestKind::tg_after_prompt:
      return "tg_after_prompt";
  }
  return "?";
}

struct Row {
  size_t method_index = 0, test_index = 0, threads_index = 0;  // table order
  std::string method, test;
  TestKind kind = TestKind::pp;
  size_t n_prompt = 0, n_gen = 0;
  int threads_asked = 0, threads = 0;  // as given (0 = all cores), as used
  Summary tps;
  double scaling = 0;     // median / the same test's median at the first thread count
  double cores_busy = 0;  // median of CPU seconds / wall seconds over the repetitions
  size_t peak_rss = 0, rss_growth = 0, rss_start = 0;
  bool peak_is_phase = false;  // reset_peak_rss() worked for every repetition
  size_t kv_bytes = 0, kept = 0;
};

// Accumulates the repetitions of one test.
struct Collector {
  std::vector<double> tps, busy;
  size_t peak = 0, growth = 0, start = 0;
  bool phase = true;
  void add(double tokens, double seconds, const PhaseMemory& m) {
    tps.push_back(seconds > 0 ? tokens / seconds : 0.0);
    busy.push_back(seconds > 0 ? m.cpu / seconds : 0.0);
    peak = std::max(peak, m.peak);
    growth = std::max(growth, m.growth());
    start = std::max(start, m.start);
    phase = phase && m.reset;
  }
};

std::vector<int32_t> random_tokens(size_t n, size_t n_vocab, uint64_t seed) {
  std::vector<int32_t> out(n);
  uint64_t state = seed * 0x9E3779B97F4A7C15ull + n;
  for (int32_t& t : out) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    t = static_cast<int32_t>((state >> 33) % n_vocab);
  }
  return out;
}

void check_options(const ModelBenchOptions& o, const LlamaConfig& c) {
  if (o.repetitions == 0) throw_invalid(kComponent, "-r/--repetitions", "0", ">= 1");
  if (o.threads.empty()) throw_invalid(kComponent, "--threads", "an empty list", "e.g. 1,2");
  if (o.n_prompt.empty()) throw_invalid(kComponent, "-p/--n-prompt", "an empty list", "e.g. 512");
  const bool any_prompt =
      std::any_of(o.n_prompt.begin(), o.n_prompt.end(), [](size_t p) { return p > 0; });
  if (!any_prompt && o.n_gen == 0) {
    throw_invalid(kComponent, "nothing to time", "-p 0 and -n 0", "a prompt length or -n >= 1");
  }
  const std::string ctx = "<= " + std::string(c.arch_name()) + ".context_length = " + num(c.n_ctx);
  if (o.n_gen > c.n_ctx) {
    throw_invalid(kComponent, "-n/--n-gen longer than the model's context", num(o.n_gen), ctx);
  }
  for (size_t p : o.n_prompt) {
    if (p > c.n_ctx) {
      throw_invalid(kComponent, "-p/--n-prompt longer than the model's context", num(p), ctx);
    }
    if (p > 0 && p + o.n_gen > c.n_ctx) {
      throw_invalid(kComponent,
                    "-p + -n (the decode after the prompt) longer than the model's context",
                    num(p) + " + " + num(o.n_gen) + " = " + num(p + o.n_gen), ctx);
    }
  }
  for (int t : o.threads) apply_threads(kComponent, t);  // range check of every entry
}

nlohmann::json summary_json(const Summary& s) {
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
  for (const std::string& s : eval::split_list(text)) {
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
  const std::vector<eval::Method> methods = cache.parsed_methods();
  const LlamaModel model = LlamaModel::load(o.model);
  const LlamaConfig& c = model.config();
  check_options(o, c);
  for (const eval::Method& m : methods) {
    for (size_t p : o.n_prompt) (void)cache.config_for(m, std::max<size_t>(p, 1));
  }
  if (o.json != nullptr) o.json->open(kComponent);

  std::vector<Row> rows;
  const SessionOptions session_options{cache.prefill_chunk};
  for (size_t mi = 0; mi < methods.size(); ++mi) {
    const eval::Method& method = methods[mi];
    for (size_t ti = 0; ti < o.threads.size(); ++ti) {
      apply_threads(kComponent, o.threads[ti]);
      const int used = num_threads();
      auto progress = [&](const std::string& test, size_t r, double tps) {
        if (o.quiet) return;
        std::fprintf(stderr, "[bench] %s %s %d threads run %zu/%zu: %.2f tok/s\n",
                     method.name.c_str(), test.c_str(), used, r + 1, o.repetitions, tps);
      };
      if (o.warmup) {  // pages the weights in, starts the thread pools, sizes the allocators
        const size_t w = std::max<size_t>(1, std::min<size_t>(16, c.n_ctx - 1));
        LlamaSession session(model, cache.config_for(method, w), session_options);
        const std::vector<float> logits = session.prefill(random_tokens(w, c.n_vocab, o.seed + 1));
        if (w < c.n_ctx) (void)session.decode(argmax(logits));
      }
      size_t test_index = 0;
      for (size_t p : o.n_prompt) {
        if (p == 0) continue;
        const CacheConfig config = cache.config_for(method, p);
        const std::vector<int32_t> prompt = random_tokens(p, c.n_vocab, o.seed);
        Collector pp, tgd;
        CacheStats after_prefill, after_decode;  // of the last repetition
        for (size_t r = 0; r < o.repetitions; ++r) {
          PhaseMemory mem;
          mem.begin();
          LlamaSession session(model, config, session_options);
          Timer t_prefill;
          std::vector<float> logits = session.prefill(prompt);
          const double prefill_s = t_prefill.seconds();
          mem.end();
          pp.add(static_cast<double>(p), prefill_s, mem);
          progress("pp" + num(p), r, pp.tps.back());
          after_prefill = session.cache_stats();
          if (o.n_gen > 0) {
            PhaseMemory dmem;
            dmem.begin();
            Timer t_decode;
            for (size_t s = 0; s < o.n_gen; ++s) logits = session.decode(argmax(logits));
            const double decode_s = t_decode.seconds();
            dmem.end();
            tgd.add(static_cast<double>(o.n_gen), decode_s, dmem);
            progress("tg" + num(o.n_gen) + "@d" + num(p), r, tgd.tps.back());
          }
          after_decode = session.cache_stats();
        }
        auto add_row = [&](const Collector& col, TestKind kind, const std::string& test,
                           const CacheStats& st) {
          Row row;
          row.method_index = mi;
          row.test_index = test_index++;
          row.threads_index = ti;
          row.method = method.name;
          row.test = test;
          row.kind = kind;
          row.n_prompt = p;
          row.n_gen = kind == TestKind::pp ? 0 : o.n_gen;
          row.threads_asked = o.threads[ti];
          row.threads = used;
          row.tps = summarize(col.tps);
          row.peak_rss = col.peak;
          row.rss_growth = col.growth;
          row.rss_start = col.start;
          row.peak_is_phase = col.phase;
          row.cores_busy = summarize(col.busy).median;
          row.kv_bytes = st.bytes_stored;
          row.kept = st.tokens_kept;
          rows.push_back(row);
        };
        add_row(pp, TestKind::pp, "pp" + num(p), after_prefill);
        if (o.n_gen > 0) {
          add_row(tgd, TestKind::tg_after_prompt, "tg" + num(o.n_gen) + "@d" + num(p),
                  after_decode);
        }
      }
      if (o.n_gen > 0) {  // generation from an empty context, as llama-bench's tg test
        const CacheConfig config = cache.config_for(method, o.n_gen);
        const std::vector<int32_t> first = random_tokens(1, c.n_vocab, o.seed);
        Collector tg;
        size_t kv_bytes = 0, kept = 0;
        for (size_t r = 0; r < o.repetitions; ++r) {
          PhaseMemory mem;
          mem.begin();
          LlamaSession session(model, config, session_options);
          Timer t;
          std::vector<float> logits = session.prefill(first);
          for (size_t s = 1; s < o.n_gen; ++s) logits = session.decode(argmax(logits));
          const double seconds = t.seconds();
          mem.end();
          tg.add(static_cast<double>(o.n_gen), seconds, mem);
          progress("tg" + num(o.n_gen), r, tg.tps.back());
          const CacheStats st = session.cache_stats();
          kv_bytes = st.bytes_stored;
          kept = st.tokens_kept;
        }
        Row row;
        row.method_index = mi;
        row.test_index = test_index++;
        row.threads_index = ti;
        row.method = method.name;
        row.test = "tg" + num(o.n_gen);
        row.kind = TestKind::tg;
        row.n_gen = o.n_gen;
        row.threads_asked = o.threads[ti];
        row.threads = used;
        row.tps = summarize(tg.tps);
        row.peak_rss = tg.peak;
        row.rss_growth = tg.growth;
        row.rss_start = tg.start;
        row.peak_is_phase = tg.phase;
        row.cores_busy = summarize(tg.busy).median;
        row.kv_bytes = kv_bytes;
        row.kept = kept;
        rows.push_back(row);
      }
    }
  }
  // Table order: method, test, thread count; scaling against the first thread count.
  std::sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) {
    if (a.method_index != b.method_index) return a.method_index < b.method_index;
    if (a.test_index != b.test_index) return a.test_index < b.test_index;
    return a.threads_index < b.threads_index;
  });
  std::map<std::pair<size_t, size_t>, double> base;  // (method, test) -> median at threads[0]
  for (const Row& r : rows) {
    if (r.threads_index == 0) base[{r.method_index, r.test_index}] = r.tps.median;
  }
  for (Row& r : rows) {
    const double b = base[{r.method_index, r.test_index}];
    r.scaling = b > 0 ? r.tps.median / b : 0.0;
  }
  // The resets lower the kernel's process-wide mark too: the run's peak is the largest seen.
  size_t process_peak = std::max(peak_rss_bytes(), peak_rss_since_reset_bytes());
  for (const Row& r : rows) process_peak = std::max(process_peak, r.peak_rss);

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
    for (const Row& r : rows) {
      j["results"].push_back({{"method", r.method},
                              {"test", r.test},
                              {"kind", kind_name(r.kind)},
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
  for (const Row& r : rows) {
    std::printf("%-14s %-14s %7d %10.2f %10.2f %10.2f %7.2f %6.2f %10.1f %10.1f %9.2f\n",
                r.method.c_str(), r.test.c_str(), r.threads, r.tps.median, r.tps.min, r.tps.max,
                r.scaling, r.cores_busy, mib(r.peak_rss), mib(r.rss_growth), mib(r.kv_bytes));
  }
  std::printf("process peak RSS %.1f MiB%s\n", mib(process_peak),
              std::all_of(rows.begin(), rows.end(), [](const Row& r) { return r.peak_is_phase; })
                  ? ""
                  : " (per-phase peaks unavailable here: the columns show the process peak)");
  return 0;
}

}  // namespace snapkv::cli
