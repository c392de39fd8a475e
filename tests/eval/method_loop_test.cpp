// eval/method_loop.h and eval/run_metrics.h: the method x keep loop run_eval and run_perplexity
// share (order, budget rule, which runs fork a shared prefill and how many prefills are built)
// and the per-cell sums and averages.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "eval/tiny_model.h"
#include "snapkv/eval/method_loop.h"
#include "snapkv/eval/run_metrics.h"

namespace snapkv::eval {
namespace {

using test::tiny_model;

struct Seen {
  size_t m, k, budget;
  const SharedPrefill* shared;
};

std::vector<Method> grid_methods() {
  CacheConfig defaults;
  defaults.window = 8;
  std::vector<Method> methods = parse_methods("full,snapkv,kivi2,snapkv+kivi2", defaults);
  Method every = parse_method("knorm", defaults);
  every.name = "knorm-every-chunk";
  every.config.chunk_mode = ChunkMode::every_chunk;
  methods.push_back(every);
  return methods;
}

// Runs the loop over a 60-token prompt of the tiny model; counts the shared prefills built.
std::vector<Seen> run_loop(const std::vector<Method>& methods, const std::vector<double>& keeps,
                           bool share, size_t* prefills) {
  const auto& tiny = tiny_model();
  std::vector<int32_t> tokens{tiny.tokenizer.bos()};
  for (int32_t t = 10; t < 69; ++t) tokens.push_back(t);
  *prefills = 0;
  std::vector<Seen> seen;
  for_each_method_run(
      methods, keeps, tokens.size(), share,
      [&](const CacheConfig& config) {
        ++*prefills;
        return std::make_unique<SharedPrefill>(tiny.model, tokens, config, SessionOptions{});
      },
      [&](size_t m, size_t k, const CacheConfig& config, const SharedPrefill* shared) {
        if (shared != nullptr) {
          double seconds = 0.0;
          // The loop hands out only prefills the run can fork.
          EXPECT_NO_THROW((void)shared->fork(config, &seconds)) << methods[m].name;
        }
        seen.push_back({m, k, config.budget, shared});
      });
  return seen;
}

TEST(MethodLoop, OrderBudgetsAndSharedPrefills) {
  const std::vector<Method> methods = grid_methods();
  const std::vector<double> keeps{0.1, 0.5};
  EXPECT_EQ(runs_per_item(methods, keeps.size()), 8u);
  ASSERT_TRUE(full_method_index(methods).has_value());
  EXPECT_EQ(*full_method_index(methods), 0u);

  size_t prefills = 0;
  const std::vector<Seen> seen = run_loop(methods, keeps, true, &prefills);
  ASSERT_EQ(seen.size(), 8u);
  const std::vector<std::pair<size_t, size_t>> order{{0, 0}, {1, 0}, {1, 1}, {2, 0},
                                                     {3, 0}, {3, 1}, {4, 0}, {4, 1}};
  for (size_t i = 0; i < seen.size(); ++i) {
    EXPECT_EQ(seen[i].m, order[i].first) << i;
    EXPECT_EQ(seen[i].k, order[i].second) << i;
    const Method& method = methods[seen[i].m];
    const size_t expected = method.uses_keep ? budget_for(keeps[seen[i].k], 60, method.config)
                                             : std::max<size_t>(60, method.config.budget);
    EXPECT_EQ(seen[i].budget, expected) << i;
  }
  // fp16 (full, snapkv x 2) and kivi2 (kivi2, snapkv+kivi2 x 2) each share one prefill; the
  // every_chunk runs have no fork key.
  EXPECT_EQ(prefills, 2u);
  for (const size_t i : {0u, 1u, 2u}) EXPECT_EQ(seen[i].shared, seen[0].shared) << i;
  for (const size_t i : {3u, 4u, 5u}) EXPECT_EQ(seen[i].shared, seen[3].shared) << i;
  EXPECT_NE(seen[0].shared, nullptr);
  EXPECT_NE(seen[3].shared, nullptr);
  EXPECT_NE(seen[0].shared, seen[3].shared);
  EXPECT_EQ(seen[6].shared, nullptr);
  EXPECT_EQ(seen[7].shared, nullptr);

  // Without sharing every run is dedicated and nothing is prefilled ahead.
  for (const Seen& s : run_loop(methods, keeps, false, &prefills)) EXPECT_EQ(s.shared, nullptr);
  EXPECT_EQ(prefills, 0u);
  // A key with a single run is not worth a shared prefill.
  const std::vector<Method> single{methods[1], methods[2]};
  for (const Seen& s : run_loop(single, {0.5}, true, &prefills)) EXPECT_EQ(s.shared, nullptr);
  EXPECT_EQ(prefills, 0u);
}

TEST(MethodLoop, FullIndexIsTheLastFullMethod) {
  CacheConfig defaults;
  EXPECT_FALSE(full_method_index(parse_methods("snapkv,kivi2", defaults)).has_value());
  std::vector<Method> methods = parse_methods("snapkv,full", defaults);
  EXPECT_EQ(full_method_index(methods), std::optional<size_t>(1));
}

TEST(RunMetrics, AddsAndAverages) {
  RunMetrics r;
  EXPECT_EQ(r.mean_budget(), 0.0);  // no runs: zeros, no division by zero
  EXPECT_EQ(r.kv_fraction(), 0.0);
  EXPECT_EQ(r.prefill_tok_s(), 0.0);
  CacheStats prompt1, end1, prompt2, end2;
  prompt1.tokens_kept = 10;
  prompt1.bytes_stored = 100;
  prompt1.bytes_full_fp16 = 400;
  end1.bytes_stored = 150;
  end1.bytes_full_fp16 = 500;
  prompt2.tokens_kept = 20;
  prompt2.bytes_stored = 300;
  prompt2.bytes_full_fp16 = 400;
  end2.bytes_stored = 350;
  end2.bytes_full_fp16 = 500;
  r.add(12, prompt1, end1, 0.5, 40);
  r.add(24, prompt2, end2, 1.5, 60);
  EXPECT_EQ(r.runs, 2u);
  EXPECT_EQ(r.mean_budget(), 18.0);
  EXPECT_EQ(r.mean_kept_rows(), 15.0);
  EXPECT_EQ(r.mean_kv_bytes(), 250.0);
  EXPECT_EQ(r.mean_kv_bytes_full_fp16(), 500.0);
  EXPECT_EQ(r.mean_kv_bytes_prompt(), 200.0);
  EXPECT_EQ(r.mean_kv_bytes_full_fp16_prompt(), 400.0);
  EXPECT_EQ(r.kv_fraction(), 0.5);         // sum / sum, not a mean of ratios
  EXPECT_EQ(r.kv_fraction_prompt(), 0.5);  // (100 + 300) / 800
  EXPECT_EQ(r.prefill_tok_s(), 50.0);      // 100 tokens / 2 s
}

}  // namespace
}  // namespace snapkv::eval
