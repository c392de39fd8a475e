// Reports of `snapkv eval`: the JSON record (every number + model, config, commit, machine, date),
// the summary table for people, and gnuplot PNGs.
//
// Promises:
//  - JSON "schema": "snapkv-eval/1"; "mode": "tasks" | "perplexity"; "model" {path, bytes, sha256,
//    name, hyper-parameters}; "config" (every option and the budget rule); "git" {commit, dirty};
//    "machine" {nproc, cpu_model, threads}; "date" (UTC, ISO 8601); "seconds"; "results" (one
//    object per task x method x keep, or per method x keep for perplexity) and, for tasks,
//    "summary" (averaged over tasks) and per-sample records inside each result;
//  - plots: gnuplot (Debian gnuplot-nox) is invoked as a program; a missing binary is a
//    snapkv::RuntimeError naming it. Tasks: PNG 1 = accuracy (mean over tasks) vs kept fraction,
//    one line per method; PNG 2 = accuracy vs KV bytes as % of a full fp16 cache. Perplexity:
//    perplexity vs kept fraction, and perplexity vs KV bytes. PNG 2 is written next to PNG 1 as
//    <stem>_bytes.png.
// Leaves out: running anything (harness.h, perplexity.h), progress output (progress.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <span>
#include <string>

#include "snapkv/eval/harness.h"
#include "snapkv/eval/perplexity.h"
#include "snapkv/model/llama.h"

namespace snapkv::eval {

struct RunInfo {
  std::string model_path;
  uint64_t model_bytes = 0;
  std::string model_sha256;  // hex, "" when not computed
  std::string git_commit = "unknown";
  bool git_dirty = false;
  size_t nproc = 0;
  std::string cpu_model = "unknown";
  int threads = 0;
  std::string date;     // UTC ISO 8601
  std::string command;  // the command line, for the record
};

// Reads the file size and sha256 of the model, the git commit the binary was built from (and
// whether tracked files differed from it then; cmake/git_info.cmake), /proc/cpuinfo's model
// name, nproc, and the date.
// Missing pieces become "unknown"; only an unreadable model file throws RuntimeError.
RunInfo collect_run_info(const std::string& model_path, int threads, const std::string& command);

// SHA-256 (FIPS 180-4) as lower-case hex.
std::string sha256_hex(std::span<const uint8_t> bytes);
// Streams the file; throws snapkv::RuntimeError when it cannot be read.
std::string sha256_file(const std::string& path);

nlohmann::json model_json(const LlamaModel& model, const RunInfo& info);
nlohmann::json to_json(const EvalResults& results, const LlamaModel& model, const RunInfo& info);
nlohmann::json to_json(const PerplexityResults& results, const LlamaModel& model,
                       const RunInfo& info);

// Summary tables (stdout). Keep-independent methods print one row with keep "-".
std::string format_table(const EvalResults& results);
std::string format_table(const PerplexityResults& results);

// "<dir>/<stem>_bytes.png" for "<dir>/<stem>.png".
std::string second_plot_path(const std::string& png_path);
// Absolute path of the gnuplot binary found on PATH; throws snapkv::RuntimeError when absent.
std::string find_gnuplot();
void plot_results(const EvalResults& results, const std::string& png_path);
void plot_results(const PerplexityResults& results, const std::string& png_path);

}  // namespace snapkv::eval
