// `snapkv tasks gen`: writes RULER-style task samples as JSON lines (eval/tasks.h).
//
//   snapkv tasks gen --task niah_single --n 100 --context 1024 --seed 1 --out niah.jsonl
//
// Lengths are counted with the model's tokenizer (--tokenizer M.gguf), else with the documented
// words-to-tokens estimate (approx_token_count). `--split train` gives the training stream
// (disjoint from eval).
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "cache_options.h"
#include "command.h"
#include "snapkv/eval/tasks.h"
#include "snapkv/gguf/gguf.h"
#include "snapkv/model/tokenizer.h"
#include "snapkv/util/error.h"
#include "snapkv/util/output_file.h"

namespace {

struct TasksGenOptions {
  std::string task = "niah_single";
  size_t n = 100;
  size_t context = 1024;
  uint64_t seed = 0;
  std::string split = "eval";
  std::string out;
  std::string tokenizer;  // GGUF model whose tokenizer counts tokens; empty: estimate
  size_t needles = 4;
  size_t hops = 4;
  bool no_needle = false;
  bool quiet = false;
};

int run_tasks_gen(const TasksGenOptions& opts) {
  using namespace snapkv::eval;
  std::vector<Task> tasks;
  if (opts.task == "all") {
    tasks = all_tasks();
  } else {
    tasks.push_back(parse_task(opts.task));
  }
  TaskOptions options;
  options.context_tokens = opts.context;
  options.seed = opts.seed;
  options.split = parse_split(opts.split);
  options.remove_needles = opts.no_needle;
  options.n_needles = opts.needles;
  options.vt_hops = opts.hops;
  TokenCounter counter = [](std::string_view text) { return approx_token_count(text); };
  std::shared_ptr<snapkv::Tokenizer> tokenizer;
  if (!opts.tokenizer.empty()) {
    const auto file = snapkv::gguf::File::open(opts.tokenizer);
    tokenizer = std::make_shared<snapkv::Tokenizer>(snapkv::Tokenizer::from_gguf(file));
    counter = [tokenizer](std::string_view text) { return tokenizer->encode(text, false).size(); };
  }

  if (opts.n == 0) snapkv::throw_invalid("tasks", "--n", "0", ">= 1 sample per task");
  snapkv::cli::check_output("tasks", {opts.out, "--out"}, snapkv::Seek::optional,
                            {{opts.tokenizer, "--tokenizer"}});
  // util's one writer: a regular --out is written to a temporary file beside it and renamed into
  // place at the end (an interrupted run never leaves a partial file there); a device or FIFO is
  // written through.
  snapkv::OutputFile file;
  if (!opts.out.empty()) file = snapkv::OutputFile::open(opts.out, "tasks", "--out file");
  const bool progress = !opts.quiet && snapkv::cli::stderr_is_tty();
  const size_t total = tasks.size() * opts.n;
  size_t done = 0;
  for (Task task : tasks) {
    for (size_t i = 0; i < opts.n; ++i) {
      const std::string line =
          sample_to_json(task, i, generate_sample(task, options, i, counter)) + "\n";
      if (file.is_open()) {
        file.write(line);
      } else {
        snapkv::write_stdout(line, "tasks");
      }
      ++done;
      if (progress && (done % 50 == 0 || done == total)) {
        std::fprintf(stderr, "\r[tasks] %zu / %zu samples", done, total);
      }
    }
  }
  if (progress) std::fprintf(stderr, "\n");
  if (file.is_open()) file.commit();
  return 0;
}

snapkv::cli::RegisterCommand reg{
    "tasks", "Generate RULER-style long-context task samples (JSON lines)",
    [](CLI::App& sub) -> snapkv::cli::Action {
      sub.require_subcommand(1);
      CLI::App* gen = sub.add_subcommand("gen", "Write task samples as JSON lines");
      gen->footer(
          "Example: snapkv tasks gen --task niah_single --n 100 --context 1024 --seed 1 "
          "--out niah.jsonl\n"
          "Tasks: niah_single niah_multikey niah_multivalue niah_multiquery vt passkey (or all).\n"
          "Each line: {task,index,context,question,answer_prefix,answers,depths,prompt_tokens};\n"
          "the model reads context+question+answer_prefix and is scored with RULER\n"
          "string_match_all. Lengths use --tokenizer M.gguf, else a words-to-tokens estimate\n"
          "(one token per word, digit or punctuation mark). Eval and train streams (--split) never "
          "share a sample.");
      auto opts = std::make_shared<TasksGenOptions>();
      gen->add_option("--task", opts->task, "Task name, or 'all'")->capture_default_str();
      snapkv::cli::bounded(gen->add_option("--n", opts->n, "Samples per task"), 1,
                           snapkv::cli::kMaxSamples, "samples per task")
          ->capture_default_str();
      snapkv::cli::bounded(
          gen->add_option("--context", opts->context, "Token budget of prompt + answer"), 1,
          snapkv::cli::kMaxContextTokens, "tokens")
          ->capture_default_str();
      snapkv::cli::bounded(gen->add_option("--seed", opts->seed, "Seed (< 2^63)"), 0,
                           (uint64_t{1} << 63) - 1, "bit 63 tells eval from train streams")
          ->capture_default_str();
      gen->add_option("--split", opts->split, "train | eval")->capture_default_str();
      gen->add_option("--out", opts->out, "Output file (default: stdout)");
      gen->add_option("--tokenizer", opts->tokenizer,
                      "Count tokens with this GGUF model's tokenizer (default: estimate)");
      snapkv::cli::bounded(
          gen->add_option("--needles", opts->needles, "Needles for multikey/multivalue/multiquery"),
          1, snapkv::eval::kMaxNeedles, "needles per sample")
          ->capture_default_str();
      snapkv::cli::bounded(gen->add_option("--hops", opts->hops, "vt: assignment hops"), 1,
                           snapkv::eval::kMaxVtHops, "variable-tracking hops")
          ->capture_default_str();
      gen->add_flag("--no-needle", opts->no_needle, "Control: leave the needles out");
      gen->add_flag("--quiet", opts->quiet, "No progress output");
      return [opts] { return run_tasks_gen(*opts); };
    }};

}  // namespace
