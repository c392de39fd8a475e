// The llama-bench-style timing of a GGUF file (eval/model_bench.h).
#include "snapkv/eval/model_bench.h"

#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "snapkv/model/sampler.h"
#include "snapkv/util/error.h"
#include "snapkv/util/parallel.h"
#include "snapkv/util/rusage.h"
#include "snapkv/util/text.h"
#include "snapkv/util/timer.h"

namespace snapkv::eval {
namespace {

constexpr const char* kComponent = "bench";

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

// The prompt of n tokens for `seed`.
std::vector<int32_t> prompt_tokens(size_t n, size_t n_vocab, uint64_t seed) {
  return random_tokens(n, n_vocab, seed * 0x9E3779B97F4A7C15ull + n);
}

}  // namespace

const char* to_string(BenchTestKind kind) {
  switch (kind) {
    case BenchTestKind::pp:
      return "pp";
    case BenchTestKind::tg:
      return "tg";
    case BenchTestKind::tg_after_prompt:
      return "tg_after_prompt";
  }
  return "?";
}

BenchSummary summarize(std::vector<double> v) {
  BenchSummary s;
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

std::vector<int32_t> random_tokens(size_t n, size_t n_vocab, uint64_t state) {
  std::vector<int32_t> out(n);
  for (int32_t& t : out) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    t = static_cast<int32_t>((state >> 33) % n_vocab);
  }
  return out;
}

void check_model_bench(const ModelBenchSpec& o, const LlamaConfig& c) {
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
  for (int t : o.threads) o.set_threads(t);  // range check of every entry
}

ModelBenchReport run_model_bench(const LlamaModel& model, const ModelBenchSpec& o) {
  const LlamaConfig& c = model.config();
  check_model_bench(o, c);
  std::vector<ModelBenchRow> rows;
  const SessionOptions session_options{o.prefill_chunk};
  for (size_t mi = 0; mi < o.methods.size(); ++mi) {
    const Method& method = o.methods[mi];
    for (size_t ti = 0; ti < o.threads.size(); ++ti) {
      o.set_threads(o.threads[ti]);
      const int used = num_threads();
      auto progress = [&](const std::string& test, size_t r, double tps) {
        if (o.progress) o.progress(method.name, test, used, r, tps);
      };
      if (o.warmup) {  // pages the weights in, starts the thread pools, sizes the allocators
        const size_t w = std::max<size_t>(1, std::min<size_t>(16, c.n_ctx - 1));
        LlamaSession session(model, o.config_for(method, w), session_options);
        const std::vector<float> logits = session.prefill(prompt_tokens(w, c.n_vocab, o.seed + 1));
        if (w < c.n_ctx) (void)session.decode(argmax(logits));
      }
      size_t test_index = 0;
      for (size_t p : o.n_prompt) {
        if (p == 0) continue;
        const CacheConfig config = o.config_for(method, p);
        const std::vector<int32_t> prompt = prompt_tokens(p, c.n_vocab, o.seed);
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
        auto add_row = [&](const Collector& col, BenchTestKind kind, const std::string& test,
                           const CacheStats& st) {
          ModelBenchRow row;
          row.method_index = mi;
          row.test_index = test_index++;
          row.threads_index = ti;
          row.method = method.name;
          row.test = test;
          row.kind = kind;
          row.n_prompt = p;
          row.n_gen = kind == BenchTestKind::pp ? 0 : o.n_gen;
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
        add_row(pp, BenchTestKind::pp, "pp" + num(p), after_prefill);
        if (o.n_gen > 0) {
          add_row(tgd, BenchTestKind::tg_after_prompt, "tg" + num(o.n_gen) + "@d" + num(p),
                  after_decode);
        }
      }
      if (o.n_gen > 0) {  // generation from an empty context, as llama-bench's tg test
        const CacheConfig config = o.config_for(method, o.n_gen);
        const std::vector<int32_t> first = prompt_tokens(1, c.n_vocab, o.seed);
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
        ModelBenchRow row;
        row.method_index = mi;
        row.test_index = test_index++;
        row.threads_index = ti;
        row.method = method.name;
        row.test = "tg" + num(o.n_gen);
        row.kind = BenchTestKind::tg;
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
  std::sort(rows.begin(), rows.end(), [](const ModelBenchRow& a, const ModelBenchRow& b) {
    if (a.method_index != b.method_index) return a.method_index < b.method_index;
    if (a.test_index != b.test_index) return a.test_index < b.test_index;
    return a.threads_index < b.threads_index;
  });
  std::map<std::pair<size_t, size_t>, double> base;  // (method, test) -> median at threads[0]
  for (const ModelBenchRow& r : rows) {
    if (r.threads_index == 0) base[{r.method_index, r.test_index}] = r.tps.median;
  }
  for (ModelBenchRow& r : rows) {
    const double b = base[{r.method_index, r.test_index}];
    r.scaling = b > 0 ? r.tps.median / b : 0.0;
  }
  ModelBenchReport report;
  // The resets lower the kernel's process-wide mark too: the run's peak is the largest seen.
  report.process_peak_rss = std::max(peak_rss_bytes(), peak_rss_since_reset_bytes());
  for (const ModelBenchRow& r : rows) {
    report.process_peak_rss = std::max(report.process_peak_rss, r.peak_rss);
  }
  report.rows = std::move(rows);
  return report;
}

}  // namespace snapkv::eval
