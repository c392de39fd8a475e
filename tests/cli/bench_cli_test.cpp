// `snapkv bench --model` (llama-bench-style timing of a GGUF file) and
// scripts/bench_vs_llamacpp.sh through the real binary, on the shipped tiny model: the tests and
// thread counts asked for are the rows produced, each with its repetitions, a median inside
// [min, max], thread scaling against the first count, and phase memory; bad values are named
// errors before any timing. Timings themselves are not checked (any positive rate passes).
#include <gtest/gtest.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>

#include "cli/cli_test_util.h"

namespace snapkv::clitest {
namespace {

using nlohmann::json;

const std::string kModel = std::string(SNAPKV_SOURCE_DIR) + "/models/snapkv-tiny4.gguf";

json bench_json(const std::string& args, const TempDir& dir) {
  const std::string out = dir.file("bench.json");
  const CliResult r =
      run_cli("bench --model " + kModel + " --quiet --json " + out + " " + args, dir);
  EXPECT_EQ(r.rc, 0) << args << "\n" << r.err;
  EXPECT_NE(r.out.find("process peak RSS"), std::string::npos) << r.out;  // the table too
  EXPECT_EQ(r.err, "");                                                   // --quiet
  return r.rc == 0 ? json::parse(read_text(out)) : json();
}

const json* find_row(const json& j, const std::string& method, const std::string& test,
                     int threads) {
  for (const json& row : j.at("results")) {
    if (row.at("method") == method && row.at("test") == test && row.at("threads") == threads) {
      return &row;
    }
  }
  return nullptr;
}

TEST(BenchCli, ModelModeRowsRepetitionsAndThreadScaling) {
  TempDir dir("bench");
  const json j = bench_json("-p 16,32 -n 4 --threads 1,2 -r 2", dir);
  ASSERT_FALSE(j.is_null());
  EXPECT_EQ(j.at("mode"), "model");
  EXPECT_EQ(j.at("model").at("n_layers"), 4);
  EXPECT_EQ(j.at("model").at("n_ctx"), 2048);
  EXPECT_EQ(j.at("results").size(), 10u);  // (pp16, tg4@d16, pp32, tg4@d32, tg4) x 2 counts
  for (const std::string test : {"pp16", "tg4@d16", "pp32", "tg4@d32", "tg4"}) {
    for (int threads : {1, 2}) {
      SCOPED_TRACE(test + " threads " + std::to_string(threads));
      const json* row = find_row(j, "full", test, threads);
      ASSERT_NE(row, nullptr);
      const json& tps = row->at("tokens_per_s");
      ASSERT_EQ(tps.at("samples").size(), 2u);
      const double median = tps.at("median"), lo = tps.at("min"), hi = tps.at("max");
      EXPECT_GT(lo, 0.0);
      EXPECT_LE(lo, median);
      EXPECT_LE(median, hi);
      EXPECT_DOUBLE_EQ(median, 0.5 * (lo + hi));  // two samples: the median is their mean
      const json* first = find_row(j, "full", test, 1);
      ASSERT_NE(first, nullptr);
      EXPECT_DOUBLE_EQ(row->at("scaling_vs_first_threads").get<double>(),
                       median / first->at("tokens_per_s").at("median").get<double>());
      EXPECT_GE(row->at("peak_rss_bytes").get<size_t>(), row->at("rss_start_bytes").get<size_t>());
      EXPECT_GT(row->at("peak_rss_bytes").get<size_t>(), 0u);
      EXPECT_GE(row->at("cores_busy").get<double>(), 0.0);
    }
  }
  EXPECT_EQ(find_row(j, "full", "pp16", 1)->at("n_prompt"), 16);
  EXPECT_EQ(find_row(j, "full", "tg4@d32", 2)->at("kind"), "tg_after_prompt");
  EXPECT_EQ(find_row(j, "full", "tg4", 2)->at("n_gen"), 4);
  EXPECT_GT(j.at("peak_rss_bytes").get<size_t>(), 0u);
}

TEST(BenchCli, ModelModeTableAndCacheMethods) {
  TempDir dir("bench");
  const CliResult r = run_cli("bench --model " + kModel +
                                  " -p 64 -n 2 -r 1 --threads 1 --methods full,snapkv --budget 24 "
                                  "--window 8 --quiet",
                              dir);
  ASSERT_EQ(r.rc, 0) << r.err;
  for (const std::string part : {"pp64", "tg2@d64", "tg2", "snapkv", "x t1", "cores", "peak MiB"}) {
    EXPECT_NE(r.out.find(part), std::string::npos) << part << "\n" << r.out;
  }
  const json j = bench_json(
      "-p 64 -n 2 -r 1 --threads 1 --methods full,snapkv --budget 24 "
      "--window 8 --prefill-chunk 16 --chunk-mode every_chunk",
      dir);
  ASSERT_FALSE(j.is_null());
  const json* full = find_row(j, "full", "pp64", 1);
  const json* snap = find_row(j, "snapkv", "pp64", 1);
  const json* snap_decode = find_row(j, "snapkv", "tg2@d64", 1);
  ASSERT_TRUE(full != nullptr && snap != nullptr && snap_decode != nullptr);
  EXPECT_EQ(full->at("kept_rows_per_head"), 64);
  EXPECT_EQ(snap->at("kept_rows_per_head"), 24);  // compressed to the budget after the prompt
  EXPECT_EQ(snap_decode->at("kept_rows_per_head"), 26);  // + the 2 decoded rows
  EXPECT_LT(snap->at("kv_bytes").get<size_t>(), full->at("kv_bytes").get<size_t>());
  EXPECT_EQ(j.at("settings").at("cache").at("chunk_mode"), "every_chunk");
  EXPECT_EQ(j.at("settings").at("prefill_chunk"), 16);
}

void expect_error(const std::string& args, int rc, const std::string& part, const TempDir& dir) {
  const CliResult r = run_cli(args, dir);
  EXPECT_EQ(r.rc, rc) << args << "\n" << r.err;
  EXPECT_EQ(r.out, "") << args;
  EXPECT_EQ(r.err.rfind("snapkv: error: ", 0), 0u) << args << "\n" << r.err;
  EXPECT_NE(r.err.find(part), std::string::npos) << args << "\n" << r.err;
}

TEST(BenchCli, ModelModeBadValuesAreNamedErrors) {
  TempDir dir("bench");
  const std::string b = "bench --model " + kModel + " ";
  expect_error(b + "-r 0", 2, "--repeats: out of range, got 0", dir);
  expect_error(b + "-p 5000", 2, "longer than the model's context", dir);
  expect_error(b + "-p 2000 -n 100", 2, "2000 + 100 = 2100", dir);
  expect_error(b + "-n 4096", 2, "-n/--n-gen longer than the model's context", dir);
  expect_error(b + "-p 0 -n 0", 2, "nothing to time", dir);
  expect_error(b + "-p 16,x", 2, "not a token count", dir);
  expect_error(b + "-p 99999999999999999999999", 2, "not a token count", dir);
  expect_error(b + "--threads 1,two", 2, "--threads entry not an integer", dir);
  expect_error(b + "--threads 1,100000", 2, "--threads out of range", dir);
  expect_error(b + "--types q8_0", 2, "--types with --model", dir);
  expect_error(b + "--layers 2", 2, "--layers with --model", dir);
  expect_error("bench --model " + dir.file("missing.gguf"), 1, "missing.gguf", dir);
  expect_error("bench --threads 1,2", 2, "--threads list without --model", dir);
}

TEST(BenchCli, ThreadsPinOpenBlasToOneThread) {
  TempDir dir("bench");
  const CliResult r = run_cli("bench --threads 2 --print-cache-config", dir);
  ASSERT_EQ(r.rc, 0) << r.err;
  const json j = json::parse(r.out);
  EXPECT_EQ(j.at("effective_threads").at("workers"), 2);
  EXPECT_EQ(j.at("effective_threads").at("openblas"), 1);  // one pool: ours
  EXPECT_EQ(j.at("threads"), 2);
  const CliResult list = run_cli("bench --threads 2,1 --print-cache-config", dir);
  ASSERT_EQ(list.rc, 0) << list.err;
  EXPECT_EQ(json::parse(list.out).at("effective_threads").at("workers"), 2);  // the first count
}

// The comparison script against a recorded llama-bench JSON (tests/cli/data, hand-written in
// `llama-bench -o json`'s layout): one row per test and thread count, ratio = ours / theirs.
TEST(BenchCli, CompareScriptPrintsRatiosAgainstLlamaBenchJson) {
  TempDir dir("bench");
  const std::string script = std::string(SNAPKV_SOURCE_DIR) + "/scripts/bench_vs_llamacpp.sh";
  const std::string sample =
      std::string(SNAPKV_SOURCE_DIR) + "/tests/cli/data/llama-bench-sample.json";
  const std::string out = dir.file("cmp");
  const std::string cmd = "'" + script + "' '" + kModel + "' -p 16 -n 4 -t 1,2 -r 2 --snapkv '" +
                          SNAPKV_CLI_PATH + "' --llama-json '" + sample + "' --out '" + out +
                          "' >'" + dir.file("o.txt") + "' 2>'" + dir.file("e.txt") + "'";
  const int status = std::system(cmd.c_str());
  ASSERT_EQ(WEXITSTATUS(status), 0) << read_text(dir.file("e.txt"));
  const std::string table = read_text(dir.file("o.txt"));
  EXPECT_EQ(table, read_text(out + "/table.txt"));
  const json ours = json::parse(read_text(out + "/snapkv.json"));
  // llama.cpp's medians in the sample: pp16 21000 / 39000, tg4 4100 / 7200 at 1 / 2 threads.
  const std::vector<std::tuple<std::string, int, double>> expected = {
      {"pp16", 1, 21000.0}, {"pp16", 2, 39000.0}, {"tg4", 1, 4100.0}, {"tg4", 2, 7200.0}};
  for (const auto& [test, threads, theirs] : expected) {
    const json* row = find_row(ours, "full", test, threads);
    ASSERT_NE(row, nullptr) << test;
    const double mine = row->at("tokens_per_s").at("median");
    char line[160];
    std::snprintf(line, sizeof line, "%-10s %7d %14.2f %11.2f %7.2f", test.c_str(), threads, theirs,
                  mine, mine / theirs);
    EXPECT_NE(table.find(line), std::string::npos) << line << "\n" << table;
  }
  // Without llama-bench (and no recorded JSON) the script stops with a clear message.
  const std::string missing = "'" + script + "' '" + kModel + "' --llama-build '" +
                              dir.file("nowhere") + "' --snapkv '" + SNAPKV_CLI_PATH + "' 2>'" +
                              dir.file("e2.txt") + "' >/dev/null";
  const int missing_status = std::system(missing.c_str());
  EXPECT_EQ(WEXITSTATUS(missing_status), 1);
  EXPECT_NE(read_text(dir.file("e2.txt")).find("llama-bench not found"), std::string::npos)
      << read_text(dir.file("e2.txt"));
}

}  // namespace
}  // namespace snapkv::clitest
