// `snapkv eval`: accuracy, memory and speed of KV-cache methods on a real forward pass.
//
//   snapkv eval --model M.gguf --tasks niah_single,vt --context 2048 --n 100
//       --methods full,snapkv,snapkv-proxy,streaming,snapkv+kivi2,kivi2 --keep 0.1,0.2,0.5
//       [--question-agnostic] [--no-needle] [--no-share-prefill] [--seed S] [--json [out.json]]
//       [--plot out.png] [shared cache options: --window --pool --kernel ... --threads N]
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

#include "cache_options.h"
#include "command.h"
#include "progress.h"
#include "snapkv/eval/harness.h"
#include "snapkv/eval/perplexity.h"
#include "snapkv/eval/progress.h"
#include "snapkv/eval/report.h"
#include "snapkv/eval/tasks.h"
#include "snapkv/kv/core/method.h"
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
  snapkv::cli::CacheOptions cache;  // --methods, --keep LIST, window, pool, kernel, threads...
  bool question_agnostic = false;
  bool no_needle = false;
  bool no_share_prefill = false;
  uint64_t seed = 0;
  snapkv::cli::JsonOutput json;
  std::string plot;
  bool quiet = false;
  size_t answer_slack = 4;
  bool perplexity = false;
  std::string text;
  size_t continuation = 256;
  size_t windows = 4;
};

// Perplexity text files above this are refused while reading (a bound, not a use case).
constexpr size_t kMaxTextBytes = size_t{256} << 20;

int run_eval_cmd(EvalCliOptions& o) {
  snapkv::cli::apply_threads("eval", o.cache.threads);
  if (o.n == 0) throw_invalid("eval", "--n", "0", ">= 1 sample per task");
  snapkv::cli::CacheOptions cache_options = o.cache;
  cache_options.knobs.seed = o.seed;
  const CacheConfig defaults = cache_options.knobs;
  const std::vector<Method> methods = parse_methods(cache_options.methods, defaults);
  const std::vector<double> keeps = parse_keeps(cache_options.keep);
  // Outputs are checked before hours of work, not after.
  if (!o.plot.empty()) {
    find_gnuplot();
    const std::vector<NamedPath> inputs = {
        {o.model, "--model"}, {o.text, "--text"}, {o.json.path, "--json"}};
    snapkv::cli::check_output("eval", {o.plot, "--plot"}, Seek::optional, inputs);
    snapkv::cli::check_output("eval", {second_plot_path(o.plot), "--plot (its _bytes image)"},
                              Seek::optional, inputs);
  }
  o.json.open("eval",
              {{o.model, "--model"},
               {o.text, "--text"},
               {o.plot, "--plot"},
               {o.plot.empty() ? "" : second_plot_path(o.plot), "--plot (its _bytes image)"}});

  const bool progress_on = !o.quiet && cli::stderr_is_tty();
  const LlamaModel model = snapkv::cli::load_model("eval", o.model, progress_on);
  const Tokenizer tokenizer = Tokenizer::from_gguf(model.file());
  ProgressBar bar("eval", progress_on);
  const ProgressFn progress = [&bar](size_t done, size_t total) { bar.update(done, total); };
  const std::string command = snapkv::cli::invocation();

  if (o.perplexity) {
    PerplexityOptions po;
    po.prefix = o.context;
    po.continuation = o.continuation;
    po.n_windows = o.windows;
    po.methods = methods;
    po.keeps = keeps;
    po.prefill_chunk = o.cache.prefill_chunk;
    po.defaults = defaults;
    po.share_prefill = !o.no_share_prefill;
    check_perplexity_options(po, model.config().n_ctx);  // before building any text
    std::string text;
    if (!o.text.empty()) {
      text = snapkv::cli::read_text_file("eval", o.text, kMaxTextBytes);
      po.text_source = o.text;
    } else {
      text = filler_text(tokenizer, o.windows * (o.context - 1 + o.continuation), o.seed);
      po.text_source = "filler:seed=" + std::to_string(o.seed);
    }
    const PerplexityResults results = run_perplexity(model, tokenizer, text, po, progress);
    bar.finish();
    if (!o.json.to_stdout()) std::cout << format_table(results) << std::flush;
    if (o.json.given() || !o.plot.empty()) {
      const RunInfo info = collect_run_info(o.model, num_threads(), command);
      if (o.json.given()) o.json.write(to_json(results, model, info), "eval");
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
  eo.prefill_chunk = o.cache.prefill_chunk;
  eo.answer_slack = o.answer_slack;
  eo.defaults = defaults;
  const EvalResults results = run_eval(model, tokenizer, eo, progress);
  bar.finish();
  if (!o.json.to_stdout()) std::cout << format_table(results) << std::flush;
  if (o.json.given() || !o.plot.empty()) {
    const RunInfo info = collect_run_info(o.model, num_threads(), command);
    if (o.json.given()) o.json.write(to_json(results, model, info), "eval");
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
          "chunkkv, knorm, random, kvzip (context reconstruction: one extra forward over the "
          "context),\n"
          "kvzip_plus (KVzip+: kvzip normalised by value and residual norms),\n"
          "kvzap (kvzip's scores predicted from the keys: snapkv train-scorer),\n"
          "keydiff, expected_attention (true window queries),\n"
          "expected_attention-proxy, kivi2, kivi4, kivi2r, kivi4r (Hadamard-rotated KIVI),\n"
          "kitty (kivi2 + fp16 key channels), zipcache, gear, zipcacher (zipcache with rotated\n"
          "values), kivi42 (4-bit keys, 2-bit values), kivi24 (the mirror), kivi42r (kivi42\n"
          "with rotated values), kivi32 (3-bit keys, 2-bit values), kivimix (2/4-bit key\n"
          "channels per block, 2-bit values) (full cache + codec), "
          "<policy>+<codec>;\n"
          "prefixes ada- (AdaKV across KV heads), pyramid- (PyramidKV across layers),\n"
          "ada-pyramid-: ada-snapkv, pyramid-keydiff, ada-expected_attention+kivi2.\n"
          "Budget per sample = max(ceil(keep * compressed tokens), sinks + window) (sinks + 1\n"
          "with --no-keep-window); compressed tokens = the whole prompt, or the context alone\n"
          "with --question-agnostic (the question is then appended uncompressed). Codec-only\n"
          "methods ignore --keep: run once, reported under every keep. Accuracy = RULER\n"
          "string_match_all x 100 of greedy answers. --plot X.png also writes X_bytes.png.\n"
          "Perplexity mode: --context is the compressed prefix (BOS included); the next\n"
          "--continuation tokens are scored; text = --text FILE, else seeded filler sentences.");
      auto o = std::make_shared<EvalCliOptions>();
      sub.add_option("--model,-m", o->model, "GGUF model file")->required();
      sub.add_option("--tasks", o->tasks, "Comma-separated tasks, or 'all'")->capture_default_str();
      snapkv::cli::bounded(
          sub.add_option("--context", o->context, "Tokens of prompt + answer (perplexity: prefix)"),
          1, snapkv::cli::kMaxContextTokens, "tokens; also <= the model's context")
          ->capture_default_str();
      snapkv::cli::bounded(sub.add_option("--n", o->n, "Samples per task"), 1,
                           snapkv::cli::kMaxSamples, "samples per task")
          ->capture_default_str();
      sub.add_flag("--question-agnostic", o->question_agnostic,
                   "Compress the context alone, then append the question uncompressed");
      sub.add_flag("--no-needle", o->no_needle,
                   "Control: the same prompts with the needles left out (accuracy near chance)");
      sub.add_flag("--no-share-prefill", o->no_share_prefill,
                   "Prefill every method and keep separately (slower; the default prefills each "
                   "sample once per codec and forks the caches, with identical results)");
      sub.add_option("--seed,-s", o->seed, "Task seed (< 2^63); also the random policy's seed")
          ->capture_default_str();
      snapkv::cli::add_json_option(sub, o->json, "every number, the configuration and the run");
      sub.add_option("--plot", o->plot, "Write PNG plots (gnuplot) to this path");
      sub.add_flag("--quiet", o->quiet, "No progress bar");
      snapkv::cli::CacheOptionSpec spec;
      spec.methods = snapkv::cli::MethodArity::list;
      spec.budget = snapkv::cli::BudgetStyle::keep_list;
      spec.default_methods = kDefaultMethods;
      spec.default_keep = "0.1,0.2,0.5";
      snapkv::cli::add_cache_options(sub, o->cache, spec);
      sub.add_option("--answer-slack", o->answer_slack,
                     "Extra decode steps beyond the reference answer's tokens")
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
