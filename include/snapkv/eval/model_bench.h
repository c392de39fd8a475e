// The harness behind `snapkv bench --model M.gguf`: times any GGUF the engine loads the way
// llama.cpp's `llama-bench` does, so that the two can be set side by side
// (scripts/bench_vs_llamacpp.sh).
//
// Tests, per cache method and thread count (llama-bench's names):
//   pp<P>        prefill of P random tokens into an empty context (tokens/s of the prompt)
//   tg<N>        N tokens generated one at a time from an empty context (the first is a one-token
//                prompt, every one a single-token forward)
//   tg<N>@d<P>   N decode steps right after the pp<P> prefill of the same session (llama-bench's
//                `-d P`): the decode speed a cache method leaves after compressing a P-token prompt
// Each test runs `repetitions` times in fresh sessions; a row holds the median, min, max, mean and
// standard deviation of the tokens/s, the ratio of its median to the same test's at the first
// thread count of the list (thread scaling), the cores kept busy (process CPU time / wall time:
// threads that spin count as busy, so a thread count whose cores rise without its speed shows
// wasted work), and the peak resident set size of the phase (prefill or generation: reset before
// each run where Linux allows it) with its growth over the RSS at the start of the run.
//
// Leaves out: option parsing, the table and the JSON file (cli/bench_model.cpp), the random-weight
// mode (cli/bench_cmd.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "snapkv/kv/core/config.h"
#include "snapkv/kv/core/method.h"
#include "snapkv/model/llama.h"

namespace snapkv::eval {

struct ModelBenchSpec {
  std::vector<size_t> n_prompt;  // prompt lengths; 0 = no prompt test
  size_t n_gen = 128;            // 0 = no generation tests
  std::vector<int> threads;      // thread counts (0 = all cores), in table order
  size_t repetitions = 3;        // >= 1
  bool warmup = true;            // one untimed short run per method and thread count first
  uint64_t seed = 1;             // prompt tokens
  size_t prefill_chunk = 512;    // tokens per prefill forward
  std::vector<Method> methods;
  // The cache of method m for a prompt of `tokens` tokens (the caller's budget rule).
  std::function<CacheConfig(const Method& m, size_t tokens)> config_for;
  // Applies a thread count; throws std::invalid_argument for one out of range.
  std::function<void(int threads)> set_threads;
  // Called after each timed repetition r (0-based) of a test; may be empty.
  std::function<void(const std::string& method, const std::string& test, int threads, size_t r,
                     double tokens_per_s)>
      progress;
};

enum class BenchTestKind { pp, tg, tg_after_prompt };
const char* to_string(BenchTestKind kind);  // "pp", "tg", "tg_after_prompt"

// Tokens/s of the repetitions of one test.
struct BenchSummary {
  std::vector<double> samples;                                // in run order
  double median = 0, min = 0, max = 0, mean = 0, stddev = 0;  // stddev: n - 1, as llama-bench
};
BenchSummary summarize(std::vector<double> samples);

struct ModelBenchRow {
  size_t method_index = 0, test_index = 0, threads_index = 0;  // table order
  std::string method, test;
  BenchTestKind kind = BenchTestKind::pp;
  size_t n_prompt = 0, n_gen = 0;
  int threads_asked = 0, threads = 0;  // as given (0 = all cores), as used
  BenchSummary tps;
  double scaling = 0;     // median / the same test's median at the first thread count
  double cores_busy = 0;  // median of CPU seconds / wall seconds over the repetitions
  size_t peak_rss = 0, rss_growth = 0, rss_start = 0;
  bool peak_is_phase = false;     // reset_peak_rss() worked for every repetition
  size_t kv_bytes = 0, kept = 0;  // the cache after the last repetition
};

struct ModelBenchReport {
  std::vector<ModelBenchRow> rows;  // by method, test, thread count
  size_t process_peak_rss = 0;      // the largest peak seen in the run
};

// Throws std::invalid_argument, before any timing, for repetitions 0, an empty thread or prompt
// list, nothing to time, a prompt or generation past the model's context, or a thread count
// set_threads refuses.
void check_model_bench(const ModelBenchSpec& spec, const LlamaConfig& config);

// Runs every test of the file comment (check_model_bench first).
ModelBenchReport run_model_bench(const LlamaModel& model, const ModelBenchSpec& spec);

// n token ids below n_vocab from a 64-bit LCG started at `state`.
std::vector<int32_t> random_tokens(size_t n, size_t n_vocab, uint64_t state);

}  // namespace snapkv::eval
