// `snapkv coverage`: the synthetic attention-coverage harness (eval/coverage.h). A table on
// stdout, every number in --json FILE, progress on stderr only when it is a terminal.
//
//   snapkv coverage --lengths 1024,4096 --budgets 64,128,256,512 --json coverage.json
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cache_options.h"
#include "command.h"
#include "snapkv/eval/coverage.h"
#include "snapkv/util/error.h"
#include "snapkv/util/timer.h"

namespace {

struct CoverageCmdOptions {
  snapkv::eval::CoverageOptions run;
  snapkv::cli::JsonOutput json;
  bool quiet = false;
};

int run_coverage_cmd(CoverageCmdOptions& opts) {
  using namespace snapkv;
  opts.run.validate();  // usage errors before any work
  opts.json.open("coverage");
  const bool progress = !opts.quiet && cli::stderr_is_tty();
  const Timer timer;
  eval::CoverageProgress report_progress;
  if (progress) {
    report_progress = [&timer](size_t done, size_t total) {
      const double elapsed = timer.seconds();
      const double eta = elapsed / static_cast<double>(done) * static_cast<double>(total - done);
      std::fprintf(stderr, "\r[coverage] %zu / %zu runs, %.1f s, ETA %.1f s   ", done, total,
                   elapsed, eta);
      if (done == total) std::fprintf(stderr, "\n");
    };
  }
  const eval::CoverageReport report = eval::run_coverage(opts.run, report_progress);
  if (!opts.json.to_stdout()) {
    const std::string table = eval::coverage_table(report);
    std::fwrite(table.data(), 1, table.size(), stdout);
    std::fflush(stdout);
  }
  if (opts.json.given())
    opts.json.write(nlohmann::json::parse(eval::coverage_json(report)), "coverage");
  return 0;
}

snapkv::cli::RegisterCommand reg{
    "coverage", "Synthetic attention-coverage harness: SnapKV vs baselines at several budgets",
    [](CLI::App& sub) -> snapkv::cli::Action {
      auto opts = std::make_shared<CoverageCmdOptions>();
      snapkv::eval::CoverageOptions& o = opts->run;
      sub.add_option("--lengths", o.lengths, "prompt lengths S (comma-separated)")
          ->delimiter(',')
          ->capture_default_str();
      sub.add_option("--budgets", o.budgets, "rows kept per KV head (comma-separated)")
          ->delimiter(',')
          ->capture_default_str();
      sub.add_option("--window", o.spec.window, "observation window (query rows)")
          ->capture_default_str();
      sub.add_option("--sinks", o.n_sink, "first positions always kept by every policy")
          ->capture_default_str();
      sub.add_flag("--keep-window", o.keep_window, "policies always keep the window's rows");
      sub.add_option("--kv-heads", o.spec.n_kv_heads, "KV heads")->capture_default_str();
      sub.add_option("--group", o.spec.group, "query heads per KV head (GQA group)")
          ->capture_default_str();
      sub.add_option("--head-dim", o.spec.head_dim, "head dimension (multiple of 8, >= 16)")
          ->capture_default_str();
      sub.add_option("--needles", o.spec.n_needles, "planted needle spans per KV head")
          ->capture_default_str();
      sub.add_option("--seed", o.spec.seed, "generator and random-policy seed")
          ->capture_default_str();
      snapkv::cli::add_json_option(sub, opts->json, "every number and the configuration");
      sub.add_flag("--quiet", opts->quiet, "no progress on stderr");
      sub.footer(
          "Metric: for each length, method and budget, the fraction of the observation window's "
          "true attention (true queries over the FULL cache, softmax in double, mean over window "
          "rows and query heads) that lands on the rows the policy keeps; in parentheses the "
          "fraction of planted needle rows kept. Every policy runs through a LayerCache (one "
          "prefill update).\n"
          "Methods: snapkv (true window queries) and snapkv-proxy (last keys as queries), each "
          "with pooling none, max7 and avg7; streaming; knorm; chunkkv (chunks of 8); random.\n"
          "Synthetic keys (per KV head; details in include/snapkv/eval/coverage.h): a low-rank "
          "topic drifting along positions, token noise with per-token magnitude, a few "
          "high-magnitude outlier channels, sink-like first tokens every query attends to, needle "
          "spans at random depths (recall counts their first rows) whose direction the window's "
          "queries look for (more or less "
          "strongly per query head; the window keys hold a weak echo), a locality component, "
          "RoPE (base 500000, as Llama 3) at the true positions. Queries are correlated with, "
          "never equal to, the keys.\n"
          "Example:\n  snapkv coverage --lengths 1024,4096 --budgets 64,128,256,512 --json "
          "coverage.json");
      return [opts] { return run_coverage_cmd(*opts); };
    }};

}  // namespace
