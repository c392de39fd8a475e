// The task generator alone, as a static program for training machines that lack the engine's
// libraries (OpenBLAS, OpenSSL, PCRE2): it answers `tasks gen` exactly as `snapkv tasks gen` does
// with the words-to-tokens estimate (the only mode train.py uses), so SNAPKV=taskgen works.
//
//   g++ -O2 -std=c++20 -static -Iinclude -Isrc training/taskgen.cpp src/eval/tasks.cpp \
//       src/eval/filler.cpp src/util/error.cpp -o taskgen
//   ./taskgen tasks gen --task niah_single --n 10 --context 1024 --seed 1 --split train
#include <cstdio>
#include <exception>
#include <iostream>
#include <string>

#include "snapkv/eval/tasks.h"

namespace {

int usage(const char* what) {
  std::fprintf(stderr,
               "taskgen: %s\nusage: taskgen tasks gen --task T --n N --context C --seed S "
               "--split train|eval [--needles K] [--hops H] [--quiet]\n",
               what);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace snapkv::eval;
  if (argc < 3 || std::string(argv[1]) != "tasks" || std::string(argv[2]) != "gen") {
    return usage("expected the subcommand 'tasks gen'");
  }
  std::string task = "niah_single", split = "eval";
  size_t n = 100, context = 1024, needles = 4, hops = 4;
  uint64_t seed = 0;
  try {
    for (int i = 3; i < argc; ++i) {
      const std::string arg = argv[i];
      if (arg == "--quiet") continue;
      if (i + 1 >= argc) return usage(("missing the value of " + arg).c_str());
      const std::string value = argv[++i];
      if (arg == "--task")
        task = value;
      else if (arg == "--split")
        split = value;
      else if (arg == "--n")
        n = std::stoull(value);
      else if (arg == "--context")
        context = std::stoull(value);
      else if (arg == "--seed")
        seed = std::stoull(value);
      else if (arg == "--needles")
        needles = std::stoull(value);
      else if (arg == "--hops")
        hops = std::stoull(value);
      else
        return usage(("unknown option " + arg).c_str());
    }
    TaskOptions options;
    options.context_tokens = context;
    options.seed = seed;
    options.split = parse_split(split);
    options.n_needles = needles;
    options.vt_hops = hops;
    const Task t = parse_task(task);
    const TokenCounter counter = [](std::string_view text) { return approx_token_count(text); };
    for (size_t i = 0; i < n; ++i) {
      std::cout << sample_to_json(t, i, generate_sample(t, options, i, counter)) << '\n';
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "taskgen: error: %s\n", e.what());
    return 1;
  }
  return std::cout.good() ? 0 : 1;
}
