// `snapkv eval`: accuracy, memory and speed of KV-cache methods on a real forward pass.
//
//   snapkv eval --model M.gguf --tasks niah_single,vt --context 2048 --n 100
//       --methods full,snapkv,snapkv-proxy,streaming,snapkv+kivi2,kivi2 --keep 0.1,0.2,0.5
//       [--question-agnostic] [--no-needle] [--no-share-prefill] [--seed S] [--json out.json]
//       [--plot out.png]
//       [--threads N]
//   snapkv eval --model M.gguf --perplexity [--text FILE] --context 1024 --windows 4 ...
//
// Summary table on stdout, progress bar with ETA on stderr (terminal only, not with --quiet).
// The work is in eval/harness.h, eval/perplexity.h and eval/report.h.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "command.h"
#include "snapkv/eval/harness.h"
#include "snapkv/eval/methods.h"
#include "snapkv/eval/perplexity.h"
#include "snapkv/eval/progress.h"
#include "snapkv/eval/report.h"
#include "snapkv/eval/tasks.h"
#include "snapkv/model/llama.h"
#include "snapkv/model/tokenizer.h"
#include "snapkv/util/error.h"
#include "snapkv/util/parallel.h"

namespace {

using namespace snapkv;
using namespace snapkv::eval;

constexpr const char* kDefaultMethods =
    "full,snapkv,snapkv-proxy,streaming,chunkkv,knorm,random,kivi2,snapkv+kivi2";

struct EvalCliOptions {
  std::string model;
  std::string tasks = "all";
  size_t context = 2048;
  size_t n = 100;
  std::string methods = kDefaultMethods;
  std::string keep = "0.1,0.2,0.5";
  bool question_agnostic = false;
  bool no_needle = false;
  bool no_share_prefill = false;
  uint64_t seed = 0;
  std::string json;
  std::string plot;
  int threads = 0;
  bool quiet = false;
  size_t window = 32;
  size_t sinks = 4;
  std::string pool = "max";
  size_t kernel = 7;
  bool no_keep_window = false;
  std::string chunk_mode = "end_of_prompt";
  size_t prefill_chunk = 512;
  size_t answer_slack = 4;
  bool perplexity = false;
  std::string text;
  size_t continuation = 256;
  size_t windows = 4;
  size_t decode_budget = 0;
  size_t decode_interval = 16;
};

std::string command_line(const EvalCliOptions& o) {
  std::ostringstream s;
  s << "snapkv eval --model " << o.model;
  if (o.perplexity) {
    s << " --perplexity";
    if (!o.text.empty()) s << " --text " << o.text;
    s << " --continuation " << o.continuation << " --windows " << o.windows;
  } else {
    s << " --tasks " << o.tasks << " --n " << o.n
      << (o.question_agnostic ? " --question-agnostic" : "") << (o.no_needle ? " --no-needle" : "");
  }
  if (o.no_share_prefill) s << " --no-share-prefill";
  s << " --context " << o.context << " --methods " << o.methods << " --keep " << o.keep
    << " --seed " << o.seed << " --window " << o.window << " --sinks " << o.sinks << " --pool "
    << o.pool << " --kernel " << o.kernel << (o.no_keep_window ? " --no-keep-window" : "")
    << " --chunk-mode " << o.chunk_mode << " --prefill-chunk " << o.prefill_chunk;
  if (o.decode_budget > 0) {
    s << " --decode-budget " << o.decode_budget << " --decode-interval " << o.decode_interval;
  }
  if (o.threads > 0) s << " --threads " << o.threads;
  return s.str();
}

void write_json(const nlohmann::json& j, const std::string& path) {
  std::ofstream out(path);
  if (!out) throw_runtime("eval", "cannot open JSON output", path, "a writable path");
  out << j.dump(1) << "\n";
  if (!out) throw_runtime("eval", "write failed", path, "the whole JSON written");
}

int run_eval_cmd(const EvalCliOptions& o) {
  if (o.threads < 0) throw_invalid("eval", "--threads", std::to_string(o.threads), ">= 0");
  if (o.threads > 0) set_num_threads(o.threads);
  MethodDefaults defaults;
  defaults.window = o.window;
  defaults.n_sink = o.sinks;
  defaults.pool = parse_pool(o.pool);
  defaults.kernel = o.kernel;
  defaults.keep_window = !o.no_keep_window;
  defaults.chunk_mode = parse_chunk_mode(o.chunk_mode);
  defaults.seed = o.seed;
  defaults.decode_budget = o.decode_budget;
  defaults.decode_interval = o.decode_interval;
  const std::vector<Method> methods = parse_methods(o.methods, defaults);
  const std::vector<double> keeps = parse_keeps(o.keep);
  if (!o.plot.empty()) find_gnuplot();  // fail before hours of work, not after

  const LlamaModel model = LlamaModel::load(o.model);
  const Tokenizer tokenizer = Tokenizer::from_gguf(model.file());
  const bool progress_on = !o.quiet && cli::stderr_is_tty();
  ProgressBar bar("eval", progress_on);
  const ProgressFn progress = [&bar](size_t done, size_t total) { bar.update(done, total); };
  const std::string command = command_line(o);

  if (o.perplexity) {
    PerplexityOptions po;
    po.prefix = o.context;
    po.continuation = o.continuation;
    po.n_windows = o.windows;
    po.methods = methods;
    po.keeps = keeps;
    po.prefill_chunk = o.prefill_chunk;
    po.defaults = defaults;
    po.share_prefill = !o.no_share_prefill;
    std::string text;
    if (!o.text.empty()) {
      std::ifstream in(o.text, std::ios::binary);
      if (!in) throw_runtime("eval", "cannot read --text file", o.text, "a readable text file");
      std::ostringstream buffer;
      buffer << in.rdbuf();
      text = buffer.str();
      po.text_source = o.text;
    } else {
      text = filler_text(tokenizer, o.windows * (o.context - 1 + o.continuation), o.seed);
      po.text_source = "filler:seed=" + std::to_string(o.seed);
    }
    const PerplexityResults results = run_perplexity(model, tokenizer, text, po, progress);
    bar.finish();
    std::cout << format_table(results) << std::flush;
    if (!o.json.empty() || !o.plot.empty()) {
      const RunInfo info = collect_run_info(o.model, num_threads(), command);
      if (!o.json.empty()) write_json(to_json(results, model, info), o.json);
      if (!o.plot.empty()) plot_results(results, o.plot);
    }
    return 0;
  }

  EvalOptions eo;
  if (o.tasks == "all") {
    eo.tasks = all_tasks();
  } else {
    for (const std::string& t : split_list(o.tasks)) eo.tasks.push_back(parse_task(t));
  }
  eo.context = o.context;
  eo.n = o.n;
  eo.methods = methods;
  eo.keeps = keeps;
  eo.protocol = o.question_agnostic ? Protocol::question_agnostic : Protocol::query_aware;
  eo.seed = o.seed;
  eo.remove_needles = o.no_needle;
  eo.share_prefill = !o.no_share_prefill;
  eo.prefill_chunk = o.prefill_chunk;
  eo.answer_slack = o.answer_slack;
  eo.defaults = defaults;
  const EvalResults results = run_eval(model, tokenizer, eo, progress);
  bar.finish();
  std::cout << format_table(results) << std::flush;
  if (!o.json.empty() || !o.plot.empty()) {
    const RunInfo info = collect_run_info(o.model, num_threads(), command);
    if (!o.json.empty()) write_json(to_json(results, model, info), o.json);
    if (!o.plot.empty()) plot_results(results, o.plot);
  }
  return 0;
}

snapkv::cli::RegisterCommand reg{
    "eval", "Accuracy, KV memory and speed of cache methods on tasks or perplexity",
    [](CLI::App& sub) -> snapkv::cli::Action {
      sub.footer(
          "Examples:\n"
          "  snapkv eval --model M.gguf --tasks niah_single,vt --context 2048 --n 100 \\\n"
          "      --methods full,snapkv,snapkv-proxy,streaming,snapkv+kivi2 --keep 0.1,0.2,0.5 \\\n"
          "      --json results.json --plot results.png\n"
          "  snapkv eval --model M.gguf --perplexity --context 1024 --windows 4 --keep 0.1,0.5\n"
          "Methods: full, snapkv (true queries), snapkv-proxy (keys as queries), streaming,\n"
          "chunkkv, knorm, random, kvzip (context-reconstruction scores: one extra forward over\n"
          "the context), kivi2, kivi4 (full cache + codec), <policy>+<codec>.\n"
          "Budget per sample = max(ceil(keep * compressed tokens), sinks + window) (sinks + 1\n"
          "with --no-keep-window); compressed tokens = the whole prompt, or the context alone\n"
          "with --question-agnostic (the question is then appended uncompressed). full/kivi*\n"
          "ignore --keep: run once, reported under every keep. Accuracy = RULER\n"
          "string_match_all x 100 of greedy answers. --plot X.png also writes X_bytes.png.\n"
          "Perplexity mode: --context is the compressed prefix (BOS included); the next\n"
          "--continuation tokens are scored; text = --text FILE, else seeded filler sentences.");
      auto o = std::make_shared<EvalCliOptions>();
      sub.add_option("--model", o->model, "GGUF model file")->required();
      sub.add_option("--tasks", o->tasks, "Comma-separated tasks, or 'all'")->capture_default_str();
      sub.add_option("--context", o->context, "Tokens of prompt + answer (perplexity: prefix)")
          ->capture_default_str();
      sub.add_option("--n", o->n, "Samples per task")->capture_default_str();
      sub.add_option("--methods", o->methods, "Comma-separated methods")->capture_default_str();
      sub.add_option("--keep", o->keep, "Comma-separated kept fractions in (0, 1]")
          ->capture_default_str();
      sub.add_flag("--question-agnostic", o->question_agnostic,
                   "Compress the context alone, then append the question uncompressed");
      sub.add_flag("--no-needle", o->no_needle,
                   "Control: the same prompts with the needles left out (accuracy near chance)");
      sub.add_flag("--no-share-prefill", o->no_share_prefill,
                   "Prefill every method and keep separately (slower; the default prefills each "
                   "sample once per codec and forks the caches, with identical results)");
      sub.add_option("--seed", o->seed, "Task seed (< 2^63); also the random policy's seed")
          ->capture_default_str();
      sub.add_option("--json", o->json, "Write every number to this JSON file");
      sub.add_option("--plot", o->plot, "Write PNG plots (gnuplot) to this path");
      sub.add_option("--threads", o->threads, "Worker threads (0 = all cores)")
          ->capture_default_str();
      sub.add_flag("--quiet", o->quiet, "No progress bar");
      sub.add_option("--window", o->window, "Observation window")->capture_default_str();
      sub.add_option("--sinks", o->sinks, "First positions always kept")->capture_default_str();
      sub.add_option("--pool", o->pool, "Score pooling: none | max | avg")->capture_default_str();
      sub.add_option("--kernel", o->kernel, "Pooling kernel (odd)")->capture_default_str();
      sub.add_flag("--no-keep-window", o->no_keep_window,
                   "Let the window's own rows compete instead of always keeping them");
      sub.add_option("--chunk-mode", o->chunk_mode, "end_of_prompt | every_chunk")
          ->capture_default_str();
      sub.add_option("--prefill-chunk", o->prefill_chunk, "Tokens per prefill forward")
          ->capture_default_str();
      sub.add_option("--answer-slack", o->answer_slack,
                     "Extra decode steps beyond the reference answer's tokens")
          ->capture_default_str();
      sub.add_option("--decode-budget", o->decode_budget,
                     "Rows per KV head kept during generation (0 = no decode-time eviction)")
          ->capture_default_str();
      sub.add_option("--decode-interval", o->decode_interval,
                     "Decode steps between re-selections under --decode-budget")
          ->capture_default_str();
      sub.add_flag("--perplexity", o->perplexity, "Perplexity mode instead of tasks");
      sub.add_option("--text", o->text, "Perplexity: natural text file (default: filler)");
      sub.add_option("--continuation", o->continuation, "Perplexity: tokens scored")
          ->capture_default_str();
      sub.add_option("--windows", o->windows, "Perplexity: disjoint windows of the text")
          ->capture_default_str();
      return [o] { return run_eval_cmd(*o); };
    }};

}  // namespace
