// `snapkv bench --model M.gguf`: any GGUF the engine loads, timed as llama.cpp's `llama-bench`
// times it (the tests and the figures: eval/model_bench.h), printed as a table (median, min, max
// tokens/s, scaling against the first thread count, cores busy, peak RSS of the phase and its
// growth, KV bytes) or written as JSON.
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
  bool progress = false;                // draw a progress line on stderr (cli/progress.h)
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
