// eval/model_bench.h, the llama-bench-style harness, on the tiny model: the summary statistics
// against hand-computed values, the prompt tokens' LCG, one row per method, test and thread count
// in table order with every repetition reported, and the checks made before any timing. Speeds
// themselves are not checked (any positive rate passes).
#include <gtest/gtest.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "eval/tiny_model.h"
#include "snapkv/eval/model_bench.h"
#include "snapkv/util/parallel.h"

namespace snapkv::eval {
namespace {

using test::tiny_model;

TEST(ModelBench, SummaryIsMedianMinMaxMeanAndSampleStddev) {
  const BenchSummary odd = summarize({5.0, 1.0, 3.0});
  EXPECT_EQ(odd.samples, (std::vector<double>{5.0, 1.0, 3.0}));  // run order kept
  EXPECT_EQ(odd.median, 3.0);
  EXPECT_EQ(odd.min, 1.0);
  EXPECT_EQ(odd.max, 5.0);
  EXPECT_EQ(odd.mean, 3.0);
  EXPECT_EQ(odd.stddev, 2.0);  // sqrt(((5-3)^2 + (1-3)^2 + 0) / (3 - 1))
  const BenchSummary even = summarize({4.0, 1.0, 2.0, 8.0});
  EXPECT_EQ(even.median, 3.0);  // (2 + 4) / 2
  EXPECT_EQ(summarize({7.0}).stddev, 0.0);
  EXPECT_TRUE(summarize({}).samples.empty());
}

TEST(ModelBench, RandomTokensFollowTheLcg) {
  const std::vector<int32_t> t = random_tokens(3, 1000, 42);
  uint64_t s = 42;
  for (size_t i = 0; i < t.size(); ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    EXPECT_EQ(t[i], static_cast<int32_t>((s >> 33) % 1000)) << i;
  }
  EXPECT_EQ(random_tokens(3, 1000, 42), t);
  EXPECT_NE(random_tokens(3, 1000, 43), t);
}

ModelBenchSpec small_spec() {
  ModelBenchSpec spec;
  spec.n_prompt = {0, 24};  // 0: no prompt test
  spec.n_gen = 4;
  spec.threads = {1, 2};
  spec.repetitions = 2;
  spec.warmup = false;
  spec.prefill_chunk = 16;
  CacheConfig defaults;
  defaults.window = 8;
  spec.methods = parse_methods("full,snapkv", defaults);
  spec.config_for = [](const Method& m, size_t tokens) {
    CacheConfig c = m.config;
    c.budget = m.uses_keep ? budget_for(0.5, tokens, c) : std::max(tokens, c.budget);
    return c;
  };
  spec.set_threads = [](int threads) {
    if (threads < 0) throw std::invalid_argument("threads");
    set_num_threads(threads);
  };
  return spec;
}

TEST(ModelBench, OneRowPerMethodTestAndThreadCountInTableOrder) {
  ModelBenchSpec spec = small_spec();
  size_t reported = 0;
  spec.progress = [&](const std::string&, const std::string&, int, size_t r, double tps) {
    EXPECT_LT(r, 2u);
    EXPECT_GT(tps, 0.0);
    ++reported;
  };
  const ModelBenchReport report = run_model_bench(tiny_model().model, spec);
  // per method and thread count: pp24 and tg4@d24 (2 repetitions each, the latter reported per
  // repetition too) and tg4
  ASSERT_EQ(report.rows.size(), 2u * 3u * 2u);
  EXPECT_EQ(reported, 2u * 2u * 3u * 2u);
  const char* tests[] = {"pp24", "tg4@d24", "tg4"};
  const BenchTestKind kinds[] = {BenchTestKind::pp, BenchTestKind::tg_after_prompt,
                                 BenchTestKind::tg};
  size_t i = 0;
  for (const char* method : {"full", "snapkv"}) {
    for (size_t t = 0; t < 3; ++t) {
      for (int threads : {1, 2}) {
        const ModelBenchRow& r = report.rows[i++];
        EXPECT_EQ(r.method, method);
        EXPECT_EQ(r.test, tests[t]);
        EXPECT_EQ(r.kind, kinds[t]);
        EXPECT_EQ(r.threads_asked, threads);
        EXPECT_EQ(r.tps.samples.size(), 2u);
        EXPECT_LE(r.tps.min, r.tps.median);
        EXPECT_LE(r.tps.median, r.tps.max);
        EXPECT_GT(r.kv_bytes, 0u);
        EXPECT_LE(r.peak_rss, report.process_peak_rss);
        if (threads == 1) {
          EXPECT_EQ(r.scaling, 1.0);  // its own first-count median
        }
      }
    }
  }
  EXPECT_EQ(std::string(to_string(BenchTestKind::tg_after_prompt)), "tg_after_prompt");
}

TEST(ModelBench, BadSpecsAreRefusedBeforeAnyTiming) {
  const LlamaConfig& c = tiny_model().model.config();
  const auto error_of = [&](auto&& change) -> std::string {
    ModelBenchSpec spec = small_spec();
    change(spec);
    try {
      check_model_bench(spec, c);
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_EQ(error_of([](ModelBenchSpec&) {}), "");
  EXPECT_NE(error_of([](ModelBenchSpec& s) { s.repetitions = 0; }).find("-r/--repetitions"),
            std::string::npos);
  EXPECT_NE(error_of([](ModelBenchSpec& s) { s.threads.clear(); }).find("--threads"),
            std::string::npos);
  EXPECT_NE(error_of([](ModelBenchSpec& s) {
              s.n_prompt = {0};
              s.n_gen = 0;
            }).find("nothing to time"),
            std::string::npos);
  EXPECT_NE(error_of([&](ModelBenchSpec& s) {
              s.n_prompt = {c.n_ctx};
            }).find("the decode after the prompt"),
            std::string::npos);
  EXPECT_NE(error_of([&](ModelBenchSpec& s) { s.n_gen = c.n_ctx + 1; }).find("-n/--n-gen"),
            std::string::npos);
  EXPECT_NE(error_of([](ModelBenchSpec& s) { s.threads = {1, -1}; }), "");
}

}  // namespace
}  // namespace snapkv::eval
