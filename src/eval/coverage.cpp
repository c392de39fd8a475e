// Coverage harness: reference attention mass (double), methods run through LayerCache, the
// coverage / needle-recall figures and their table and JSON reports (eval/coverage.h).
#include "snapkv/eval/coverage.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>

#include "snapkv/kv/core/layer_cache.h"
#include "snapkv/util/error.h"
#include "snapkv/util/parallel.h"
#include "snapkv/util/text.h"
#include "snapkv/util/timer.h"

namespace snapkv::eval {
namespace {

std::string pool_suffix(PoolKind pool, size_t kernel) {
  if (pool == PoolKind::none) return "";
  return std::string("/") + std::string(to_string(pool)) + num(kernel);
}

}  // namespace

std::vector<std::vector<double>> window_attention_mass(const SyntheticData& data, bool causal) {
  const SyntheticSpec& spec = data.spec;
  const size_t S = spec.length, d = spec.head_dim, w = spec.window, G = spec.group;
  SNAPKV_CHECK(data.keys.size() == spec.n_kv_heads * S * d);
  SNAPKV_CHECK(data.queries.size() == spec.n_kv_heads * G * w * d);
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  // One accumulator per query head, summed per KV head afterwards (no shared writes).
  std::vector<std::vector<double>> per_head(spec.n_kv_heads * G, std::vector<double>(S, 0.0));
  parallel_for(spec.n_kv_heads * G, [&](size_t head) {
    const size_t kv = head / G;
    const float* keys = data.keys.data() + kv * S * d;          // [S][d]
    const float* queries = data.queries.data() + head * w * d;  // [w][d]
    std::vector<double> logits(S);
    std::vector<double>& acc = per_head[head];
    for (size_t r = 0; r < w; ++r) {
      const float* q = queries + r * d;
      const size_t visible = causal ? S - w + r + 1 : S;
      double max_logit = -std::numeric_limits<double>::infinity();
      for (size_t j = 0; j < visible; ++j) {
        double s = 0.0;
        const float* k = keys + j * d;
        for (size_t c = 0; c < d; ++c) s += static_cast<double>(q[c]) * static_cast<double>(k[c]);
        logits[j] = s * scale;
        max_logit = std::max(max_logit, logits[j]);
      }
      double sum = 0.0;
      for (size_t j = 0; j < visible; ++j) {
        logits[j] = std::exp(logits[j] - max_logit);
        sum += logits[j];
      }
      for (size_t j = 0; j < visible; ++j) acc[j] += logits[j] / sum;
    }
  });
  std::vector<std::vector<double>> mass(spec.n_kv_heads, std::vector<double>(S, 0.0));
  const double inv = 1.0 / static_cast<double>(G * w);
  for (size_t kv = 0; kv < spec.n_kv_heads; ++kv) {
    for (size_t g = 0; g < G; ++g) {
      const std::vector<double>& acc = per_head[kv * G + g];
      for (size_t j = 0; j < S; ++j) mass[kv][j] += acc[j] * inv;
    }
  }
  return mass;
}

std::vector<CoverageMethod> standard_methods(const CacheConfig& base) {
  std::vector<CoverageMethod> methods;
  const auto add = [&](std::string name, PolicyKind policy, QuerySource source, PoolKind pool,
                       size_t kernel) {
    CoverageMethod m;
    m.config = base;
    m.config.policy = policy;
    m.config.query_source = source;
    m.config.pool = pool;
    m.config.kernel = kernel;
    m.uses_queries = source == QuerySource::queries;
    m.name = std::move(name) + pool_suffix(pool, kernel);
    methods.push_back(std::move(m));
  };
  for (const auto& [name, source] :
       {std::pair{"snapkv", QuerySource::queries}, std::pair{"snapkv-proxy", QuerySource::keys}}) {
    add(name, PolicyKind::snapkv, source, PoolKind::none, 1);
    add(name, PolicyKind::snapkv, source, PoolKind::max, 7);
    add(name, PolicyKind::snapkv, source, PoolKind::avg, 7);
  }
  add("streaming", PolicyKind::streaming, QuerySource::keys, PoolKind::none, 1);
  add("knorm", PolicyKind::knorm, QuerySource::keys, PoolKind::none, 1);
  add("chunkkv", PolicyKind::chunkkv, QuerySource::queries, PoolKind::none, 1);
  add("random", PolicyKind::random, QuerySource::keys, PoolKind::none, 1);
  return methods;
}

CoverageResult evaluate_method(const SyntheticData& data,
                               const std::vector<std::vector<double>>& mass,
                               const CoverageMethod& method, size_t budget) {
  const SyntheticSpec& spec = data.spec;
  const size_t S = spec.length, d = spec.head_dim;
  if (mass.size() != spec.n_kv_heads) {
    throw_invalid("coverage", "mass has the wrong number of KV heads", num(mass.size()),
                  num(spec.n_kv_heads));
  }
  CacheConfig config = method.config;
  config.budget = budget;
  config.window = spec.window;
  LayerCache cache(CacheDims{spec.n_kv_heads * spec.group, spec.n_kv_heads, d}, config);
  const Tensor3 k{data.keys.data(), spec.n_kv_heads, S, d};
  const Tensor3 q{data.queries.data(), spec.n_kv_heads * spec.group, spec.window, d};
  cache.update(k, k, method.uses_queries ? &q : nullptr, UpdateKind::prefill);

  CoverageResult result;
  result.method = method.name;
  result.length = S;
  result.budget = budget;
  result.kept = cache.stats().tokens_kept;  // mean rows per KV head
  size_t needles_total = 0, needles_kept = 0;
  for (size_t h = 0; h < spec.n_kv_heads; ++h) {
    const auto positions = cache.positions(h);
    double covered = 0.0;
    for (const int64_t p : positions) covered += mass[h][static_cast<size_t>(p)];
    result.coverage_per_head.push_back(covered);
    result.coverage += covered / static_cast<double>(spec.n_kv_heads);
    for (const int64_t needle : data.needles[h]) {
      ++needles_total;
      needles_kept += std::binary_search(positions.begin(), positions.end(), needle) ? 1 : 0;
    }
  }
  result.needle_recall =
      needles_total == 0 ? 1.0
                         : static_cast<double>(needles_kept) / static_cast<double>(needles_total);
  return result;
}

void CoverageOptions::validate() const {
  if (lengths.empty()) throw_invalid("coverage", "no lengths", "an empty list", ">= 1 length");
  if (budgets.empty()) throw_invalid("coverage", "no budgets", "an empty list", ">= 1 budget");
  const size_t floor = n_sink + (keep_window ? spec.window : 0) + 1;
  for (const size_t budget : budgets) {
    if (budget < floor) {
      throw_invalid(
          "coverage",
          "budget too small for the sinks" + std::string(keep_window ? " and the kept window" : ""),
          num(budget), ">= " + num(floor));
    }
  }
  if (chunk_size == 0) throw_invalid("coverage", "chunk_size must be positive", "0", ">= 1");
  for (const size_t length : lengths) {
    SyntheticSpec s = spec;
    s.length = length;
    s.validate();
  }
}

CoverageReport run_coverage(const CoverageOptions& options, const CoverageProgress& progress) {
  options.validate();
  const Timer timer;
  CacheConfig base;
  base.window = options.spec.window;
  base.n_sink = options.n_sink;
  base.keep_window = options.keep_window;
  base.causal = options.causal;
  base.seed = options.spec.seed;
  base.chunk_size = options.chunk_size;
  base.chunk_mode = ChunkMode::every_chunk;  // one prefill update: both modes compress once
  const std::vector<CoverageMethod> methods = standard_methods(base);

  CoverageReport report;
  report.options = options;
  for (const CoverageMethod& m : methods) report.methods.push_back(m.name);
  const size_t total = options.lengths.size() * methods.size() * options.budgets.size();
  size_t done = 0;
  for (const size_t length : options.lengths) {
    SyntheticSpec spec = options.spec;
    spec.length = length;
    const SyntheticData data = make_synthetic(spec);
    const std::vector<std::vector<double>> mass = window_attention_mass(data, options.causal);
    for (const CoverageMethod& method : methods) {
      for (const size_t budget : options.budgets) {
        report.results.push_back(evaluate_method(data, mass, method, budget));
        ++done;
        if (progress) progress(done, total);
      }
    }
  }
  report.seconds = timer.seconds();
  return report;
}

std::string coverage_table(const CoverageReport& report) {
  const CoverageOptions& o = report.options;
  std::string out;
  char buf[256];
  for (const size_t length : o.lengths) {
    std::snprintf(buf, sizeof(buf),
                  "length %zu: attention coverage of the kept rows (needle recall); kv heads %zu x "
                  "group %zu, head_dim %zu, window %zu, sinks %zu%s\n",
                  length, o.spec.n_kv_heads, o.spec.group, o.spec.head_dim, o.spec.window, o.n_sink,
                  o.keep_window ? ", window kept" : "");
    out += buf;
    std::snprintf(buf, sizeof(buf), "%-20s", "method \\ budget");
    out += buf;
    for (const size_t budget : o.budgets) {
      std::snprintf(buf, sizeof(buf), " %14zu", budget);
      out += buf;
    }
    out += "\n";
    for (const std::string& method : report.methods) {
      std::snprintf(buf, sizeof(buf), "%-20s", method.c_str());
      out += buf;
      for (const size_t budget : o.budgets) {
        for (const CoverageResult& r : report.results) {
          if (r.length == length && r.budget == budget && r.method == method) {
            char cell[64];
            std::snprintf(cell, sizeof(cell), "%.3f (%.2f)", r.coverage, r.needle_recall);
            std::snprintf(buf, sizeof(buf), " %14s", cell);
            out += buf;
          }
        }
      }
      out += "\n";
    }
    out += "\n";
  }
  return out;
}

std::string coverage_json(const CoverageReport& report) {
  const CoverageOptions& o = report.options;
  nlohmann::json j;
  j["harness"] = "snapkv coverage (synthetic keys, see include/snapkv/eval/coverage.h)";
  j["config"] = {
      {"lengths", o.lengths},       {"budgets", o.budgets},         {"window", o.spec.window},
      {"sinks", o.n_sink},          {"keep_window", o.keep_window}, {"causal", o.causal},
      {"chunk_size", o.chunk_size}, {"seed", o.spec.seed},
  };
  j["generator"] = {
      {"n_kv_heads", o.spec.n_kv_heads},
      {"group", o.spec.group},
      {"n_heads", o.spec.n_kv_heads * o.spec.group},
      {"head_dim", o.spec.head_dim},
      {"window", o.spec.window},
      {"n_sink_tokens", o.spec.n_sink_tokens},
      {"n_needles", o.spec.n_needles},
      {"needle_span", o.spec.needle_span},
      {"topic_rank", o.spec.topic_rank},
      {"topic_corr", o.spec.topic_corr},
      {"n_outlier", o.spec.n_outlier},
      {"rope_base", o.spec.rope_base},
      {"seed", o.spec.seed},
  };
  j["metric"] =
      "coverage: fraction of the window's attention mass (true queries over the full cache, mean "
      "over window rows and query heads) on the kept rows; needle_recall: fraction of planted "
      "needle rows kept";
  j["methods"] = report.methods;
  nlohmann::json results = nlohmann::json::array();
  for (const CoverageResult& r : report.results) {
    results.push_back({{"method", r.method},
                       {"length", r.length},
                       {"budget", r.budget},
                       {"kept", r.kept},
                       {"coverage", r.coverage},
                       {"coverage_per_kv_head", r.coverage_per_head},
                       {"needle_recall", r.needle_recall}});
  }
  j["results"] = std::move(results);
  j["seconds"] = report.seconds;
  return j.dump(2) + "\n";
}

}  // namespace snapkv::eval
