// `snapkv bench --model M.gguf`: times any GGUF the engine loads the way llama.cpp's `llama-bench`
// does, so that the two can be set side by side (scripts/bench_vs_llamacpp.sh).
//
// Tests, per cache method and thread count (llama-bench's names):
//   pp<P>        prefill of P random tokens into an empty context (tokens/s of the prompt)
//   tg<N>        N tokens generated one at a time from an empty context (the first is a one-token
//                prompt, every one a single-token forward)
//   tg<N>@d<P>   N decode steps right after the pp<P> prefill of the same session (llama-bench's
//                `-d P`): the decode speed a cache method leaves after compressing a P-token prompt
// Each test runs `repetitions` times in fresh sessions; the table reports the median, min and max
// tokens/s, the ratio to the same test at the first thread count of the list (thread scaling),
// the cores kept busy (process CPU time / wall time: threads that spin count as busy, so a
// thread count whose cores rise without its speed shows wasted work), and the peak resident set
// size of the phase (prefill or generation: reset before each run where
// Linux allows it) with its growth over the RSS at the start of the run.
//
// Leaves out: the random-model mode (cli/bench_cmd.cpp) and flag parsing (bench registers the
// flags; this file gets the parsed values).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "cache_options.h"

namespace snapkv::cli {

struct ModelBenchOptions {
  std::string model;             // GGUF path
  std::vector<size_t> n_prompt;  // -p list; 0 = no prompt tests
  size_t n_gen = 128;            // -n; 0 = no generation tests
  std::vector<int> threads;      // --threads list (0 = all cores)
  size_t repetitions = 3;        // -r (>= 1)
  bool warmup = true;            // one untimed short run per thread count first
  uint64_t seed = 1;             // prompt tokens
  bool quiet = false;
  const CacheOptions* cache = nullptr;  // methods, budget/keep, window, prefill chunk...
  JsonOutput* json = nullptr;
};

// Parses a comma-separated --threads list ("1,2"; each entry an integer, range checked later by
// apply_threads). Throws std::invalid_argument naming the bad entry.
std::vector<int> parse_thread_list(const std::string& text);

// Runs the benchmark and prints the table (or JSON). Throws std::invalid_argument for bad values
// (before any timing), snapkv::RuntimeError for an unreadable model file.
int run_model_bench(const ModelBenchOptions& o);

}  // namespace snapkv::cli
