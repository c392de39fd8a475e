// Tests of the coverage harness: the generator's promises (shapes, determinism, planted structure
// present), the reference mass against kv's independent double-precision scorer, the coverage
// figures against direct computations (full budget, streaming, the top-mass oracle), the reports.
#include "snapkv/eval/coverage.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "plain_config.h"
#include "snapkv/kv/core/snapkv_score.h"

namespace snapkv::eval {
namespace {

SyntheticSpec small_spec(uint64_t seed = 3) {
  SyntheticSpec s;
  s.length = 512;
  s.n_kv_heads = 2;
  s.group = 2;
  s.head_dim = 32;
  s.window = 16;
  s.seed = seed;
  return s;
}

const CoverageMethod& find_method(const std::vector<CoverageMethod>& methods,
                                  const std::string& name) {
  for (const CoverageMethod& m : methods) {
    if (m.name == name) return m;
  }
  throw std::logic_error("no method " + name);
}

CacheConfig base_config(const SyntheticSpec& spec, size_t n_sink = 4) {
  CacheConfig c = test::plain_config();
  c.window = spec.window;
  c.n_sink = n_sink;
  return c;
}

TEST(CoverageSpec, RejectsBadFieldsNamingThem) {
  const auto expect_invalid = [](SyntheticSpec s, const std::string& field) {
    try {
      s.validate();
      ADD_FAILURE() << "no exception for " << field;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("[coverage]"), std::string::npos) << e.what();
    }
  };
  SyntheticSpec s = small_spec();
  s.head_dim = 20;
  expect_invalid(s, "head_dim");
  s = small_spec();
  s.n_outlier = 3;
  expect_invalid(s, "n_outlier");
  s = small_spec();
  s.length = 40;
  expect_invalid(s, "length");
  s = small_spec();
  s.window = 0;
  expect_invalid(s, "window");
  s = small_spec();
  s.group = 0;
  expect_invalid(s, "group");
  EXPECT_NO_THROW(small_spec().validate());
}

TEST(CoverageGenerator, ShapesNeedlesAndDeterminism) {
  const SyntheticSpec spec = small_spec();
  const SyntheticData a = make_synthetic(spec);
  const SyntheticData b = make_synthetic(spec);
  ASSERT_EQ(a.keys.size(), spec.n_kv_heads * spec.length * spec.head_dim);
  ASSERT_EQ(a.queries.size(), spec.n_kv_heads * spec.group * spec.window * spec.head_dim);
  EXPECT_EQ(a.keys, b.keys);  // bit-identical
  EXPECT_EQ(a.queries, b.queries);
  EXPECT_EQ(a.needles, b.needles);
  for (float x : a.keys) ASSERT_TRUE(std::isfinite(x));
  for (float x : a.queries) ASSERT_TRUE(std::isfinite(x));

  ASSERT_EQ(a.needles.size(), spec.n_kv_heads);
  for (const auto& starts : a.needles) {
    ASSERT_EQ(starts.size(), spec.n_needles);
    for (size_t i = 0; i < starts.size(); ++i) {
      EXPECT_GT(starts[i], static_cast<int64_t>(spec.n_sink_tokens));
      EXPECT_LE(starts[i] + static_cast<int64_t>(spec.needle_span),
                static_cast<int64_t>(spec.length - spec.window));
      if (i > 0) {
        EXPECT_GT(starts[i], starts[i - 1] + static_cast<int64_t>(spec.needle_span));
      }
    }
  }
  const SyntheticData c = make_synthetic(small_spec(4));
  EXPECT_NE(a.keys, c.keys);
  SyntheticSpec longer = spec;
  longer.length = 1024;
  EXPECT_NE(make_synthetic(longer).needles, a.needles);  // lengths draw their own data
}

// Random keys would give every row about 1/S of the mass; planted rows get many times that.
TEST(CoverageGenerator, PlantedStructureDrawsAttention) {
  for (const uint64_t seed : {1u, 2u, 3u}) {
    const SyntheticData data = make_synthetic(small_spec(seed));
    const auto mass = window_attention_mass(data);
    const double uniform = 1.0 / static_cast<double>(data.spec.length);
    for (size_t h = 0; h < data.spec.n_kv_heads; ++h) {
      EXPECT_GT(mass[h][0], 8 * uniform) << "sink, seed " << seed << " head " << h;
      double needle_mass = 0.0;
      for (const int64_t p : data.needles[h]) needle_mass += mass[h][static_cast<size_t>(p)];
      EXPECT_GT(needle_mass / static_cast<double>(data.needles[h].size()), 8 * uniform)
          << "needles, seed " << seed << " head " << h;
    }
  }
}

TEST(CoverageMass, MatchesKvDoubleReferenceAndSumsToOne) {
  const SyntheticData data = make_synthetic(small_spec());
  const SyntheticSpec& s = data.spec;
  for (const bool causal : {true, false}) {
    const auto mass = window_attention_mass(data, causal);
    ASSERT_EQ(mass.size(), s.n_kv_heads);
    for (size_t h = 0; h < s.n_kv_heads; ++h) {
      std::vector<double> ref(s.length);
      window_scores_ref(ref.data(), data.keys.data() + h * s.length * s.head_dim, s.length,
                        s.head_dim, data.queries.data() + h * s.group * s.window * s.head_dim,
                        s.group, s.window, causal);
      double sum = 0.0;
      for (size_t j = 0; j < s.length; ++j) {
        // Two double computations of the same sums: agreement to a few hundred ulps of 1.
        EXPECT_NEAR(mass[h][j], ref[j], 1e-13) << "head " << h << " row " << j;
        EXPECT_GE(mass[h][j], 0.0);
        sum += mass[h][j];
      }
      EXPECT_NEAR(sum, 1.0, 1e-12);
      if (causal) {
        // The first window row sees only keys <= S - w: later keys get mass only from later rows.
        EXPECT_GT(mass[h][s.length - 1], 0.0);
      }
    }
  }
}

TEST(CoverageEvaluate, FullBudgetCoversEverything) {
  const SyntheticData data = make_synthetic(small_spec());
  const auto mass = window_attention_mass(data);
  for (const CoverageMethod& m : standard_methods(base_config(data.spec))) {
    const CoverageResult r = evaluate_method(data, mass, m, data.spec.length + 7);
    EXPECT_EQ(r.kept, data.spec.length) << m.name;
    EXPECT_NEAR(r.coverage, 1.0, 1e-12) << m.name;
    EXPECT_EQ(r.needle_recall, 1.0) << m.name;
    ASSERT_EQ(r.coverage_per_head.size(), data.spec.n_kv_heads);
  }
}

TEST(CoverageEvaluate, StreamingMatchesDirectSumAndGrowsWithBudget) {
  const SyntheticData data = make_synthetic(small_spec());
  const auto mass = window_attention_mass(data);
  const size_t n_sink = 4, S = data.spec.length;
  const std::vector<CoverageMethod> methods = standard_methods(base_config(data.spec));
  const CoverageMethod& streaming = find_method(methods, "streaming");
  double previous = 0.0;
  for (const size_t budget : {8u, 32u, 100u, 300u}) {
    const CoverageResult r = evaluate_method(data, mass, streaming, budget);
    double expected = 0.0;
    for (size_t h = 0; h < data.spec.n_kv_heads; ++h) {
      double head = 0.0;
      for (size_t j = 0; j < n_sink; ++j) head += mass[h][j];
      for (size_t j = S - (budget - n_sink); j < S; ++j) head += mass[h][j];
      EXPECT_NEAR(r.coverage_per_head[h], head, 1e-12);
      expected += head / static_cast<double>(data.spec.n_kv_heads);
    }
    EXPECT_NEAR(r.coverage, expected, 1e-12);
    EXPECT_GE(r.coverage, previous);
    previous = r.coverage;
    EXPECT_EQ(r.kept, budget);
  }
}

// With true queries, no pooling and no forced window, SnapKV's scores ARE the window's mean
// attention (computed in fp32 on fp16-stored keys), so its kept set is the top-mass oracle's up to
// near-ties: it must cover at least as much as every other method and match the oracle closely.
TEST(CoverageEvaluate, SnapkvWithQueriesMatchesTheTopMassOracle) {
  const SyntheticData data = make_synthetic(small_spec());
  const auto mass = window_attention_mass(data);
  const std::vector<CoverageMethod> methods = standard_methods(base_config(data.spec));
  const size_t n_sink = 4;
  for (const size_t budget : {16u, 64u, 128u}) {
    const CoverageResult snap = evaluate_method(data, mass, find_method(methods, "snapkv"), budget);
    double oracle = 0.0;
    for (size_t h = 0; h < data.spec.n_kv_heads; ++h) {
      std::vector<size_t> order(data.spec.length - n_sink);
      std::iota(order.begin(), order.end(), n_sink);
      std::sort(order.begin(), order.end(),
                [&](size_t a, size_t b) { return mass[h][a] > mass[h][b]; });
      double head = 0.0;
      for (size_t j = 0; j < n_sink; ++j) head += mass[h][j];
      for (size_t i = 0; i < budget - n_sink; ++i) head += mass[h][order[i]];
      oracle += head / static_cast<double>(data.spec.n_kv_heads);
    }
    EXPECT_LE(snap.coverage, oracle + 1e-12);
    // fp16 keys and fp32 scores can swap near-ties only; each swap moves a tiny amount of mass.
    EXPECT_GE(snap.coverage, oracle - 2e-3) << "budget " << budget;
    for (const CoverageMethod& m : methods) {
      EXPECT_GE(snap.coverage + 2e-3, evaluate_method(data, mass, m, budget).coverage)
          << m.name << " at budget " << budget;
    }
    EXPECT_EQ(snap.needle_recall, 1.0) << "planted needles must be findable with true queries";
  }
}

TEST(CoverageRun, ReportTableAndJsonCarryEveryNumber) {
  CoverageOptions o;
  o.lengths = {256, 512};
  o.budgets = {32, 64};
  o.spec = small_spec();
  size_t calls = 0, last_total = 0;
  const CoverageReport report = run_coverage(o, [&](size_t done, size_t total) {
    ++calls;
    EXPECT_EQ(done, calls);
    last_total = total;
  });
  const std::vector<std::string> expected_methods = {"snapkv",
                                                     "snapkv/max7",
                                                     "snapkv/avg7",
                                                     "snapkv-proxy",
                                                     "snapkv-proxy/max7",
                                                     "snapkv-proxy/avg7",
                                                     "streaming",
                                                     "knorm",
                                                     "chunkkv",
                                                     "random"};
  EXPECT_EQ(report.methods, expected_methods);
  ASSERT_EQ(report.results.size(), 2 * 10 * 2u);
  EXPECT_EQ(calls, report.results.size());
  EXPECT_EQ(last_total, report.results.size());
  for (const CoverageResult& r : report.results) {
    EXPECT_GE(r.coverage, 0.0);
    EXPECT_LE(r.coverage, 1.0 + 1e-12);
    EXPECT_GE(r.needle_recall, 0.0);
    EXPECT_LE(r.needle_recall, 1.0);
    EXPECT_EQ(r.kept, r.budget);
  }

  const std::string table = coverage_table(report);
  for (const std::string& m : expected_methods) {
    EXPECT_NE(table.find("\n" + m + " "), std::string::npos) << m;
  }
  EXPECT_NE(table.find("length 256"), std::string::npos);
  EXPECT_NE(table.find("length 512"), std::string::npos);

  const nlohmann::json j = nlohmann::json::parse(coverage_json(report));
  EXPECT_EQ(j["config"]["lengths"], nlohmann::json({256, 512}));
  EXPECT_EQ(j["config"]["budgets"], nlohmann::json({32, 64}));
  EXPECT_EQ(j["config"]["window"], 16);
  EXPECT_EQ(j["generator"]["head_dim"], 32);
  EXPECT_EQ(j["generator"]["seed"], 3);
  ASSERT_EQ(j["results"].size(), report.results.size());
  const nlohmann::json& first = j["results"][0];
  EXPECT_EQ(first["method"], report.results[0].method);
  EXPECT_EQ(first["coverage"].get<double>(), report.results[0].coverage);
  EXPECT_EQ(first["coverage_per_kv_head"].size(), 2u);
  EXPECT_TRUE(first.contains("needle_recall"));
}

TEST(CoverageRun, RejectsBudgetsThatCannotHoldTheSinks) {
  CoverageOptions o;
  o.spec = small_spec();
  o.lengths = {512};
  o.budgets = {4};
  EXPECT_THROW(o.validate(), std::invalid_argument);
  o.budgets = {16};
  o.keep_window = true;  // sinks 4 + window 16 + 1
  EXPECT_THROW(o.validate(), std::invalid_argument);
  o.budgets = {21};
  EXPECT_NO_THROW(o.validate());
  o.lengths = {};
  EXPECT_THROW(o.validate(), std::invalid_argument);
  o.lengths = {30};  // too short for the planted structure
  EXPECT_THROW(o.validate(), std::invalid_argument);
}

}  // namespace
}  // namespace snapkv::eval
