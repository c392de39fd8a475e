// `snapkv select` end to end: the binary reads .npy files and prints JSON whose scores agree with
// kv's double-precision reference (bound derived from the data), whose kept sets honour the
// selection rules, and whose errors use exit codes 1 (bad file/data) and 2 (bad usage).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/cli_test_util.h"
#include "snapkv/kv/core/config.h"
#include "snapkv/kv/core/method.h"
#include "snapkv/kv/core/snapkv_score.h"
#include "snapkv/util/fp16.h"
#include "snapkv/util/npy.h"

namespace snapkv::clitest {
namespace {

using nlohmann::json;

// The plain scoring the references below compute (the defaults pool and keep the window).
const std::string kPlain = " --pool none --kernel 1 --no-keep-window";

struct Inputs {
  size_t n_kv = 2, S = 96, d = 16, n_heads = 4, w = 8;
  std::vector<float> k;  // [n_kv][S][d]
  std::vector<float> q;  // [n_heads][w][d]
};

// Keys with a few strongly attended rows, queries that look for them.
Inputs make_inputs(uint64_t seed) {
  Inputs in;
  uint64_t state = seed * 0x9E3779B97F4A7C15ull + 1;
  auto uniform = [&state]() {  // [-1, 1)
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<float>(static_cast<double>(state >> 11) * 0x1.0p-52 - 1.0);
  };
  in.k.resize(in.n_kv * in.S * in.d);
  in.q.resize(in.n_heads * in.w * in.d);
  for (float& x : in.k) x = uniform();
  for (float& x : in.q) x = uniform();
  for (size_t h = 0; h < in.n_kv; ++h) {
    for (const size_t p : {size_t{17}, size_t{40 + 5 * h}, size_t{61}}) {
      for (size_t c = 0; c < 4; ++c) in.k[(h * in.S + p) * in.d + c] = 3.0f;
    }
  }
  for (size_t g = 0; g < in.n_heads; ++g) {
    for (size_t r = 0; r < in.w; ++r) {
      for (size_t c = 0; c < 4; ++c) in.q[(g * in.w + r) * in.d + c] += 1.5f;
    }
  }
  return in;
}

struct Files {
  std::string k, q;
};

Files write_inputs(const Inputs& in, const TempDir& dir) {
  Files f{dir.file("K.npy"), dir.file("Q.npy")};
  const std::vector<size_t> ks = {in.n_kv, in.S, in.d}, qs = {in.n_heads, in.w, in.d};
  write_npy(f.k, in.k, ks);
  write_npy(f.q, in.q, qs);
  return f;
}

json parse_ok(const CliResult& r) {
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.err, "");
  return json::parse(r.out);
}

std::vector<double> head_scores(const json& j, size_t h) {
  return j["scores"][h].get<std::vector<double>>();
}

// Reference scores of one KV head in double (keys rounded to fp16 as the cache stores them) and
// the relative error bound of the fp32 computation: twice the largest logit error
// (d * eps * max sum|q_i k_i| / sqrt(d)) plus the rounding of exp and of an S-term sum.
struct Reference {
  std::vector<double> scores;
  double rel_tol = 0;
};

Reference reference(const Inputs& in, size_t h, bool with_queries, bool causal) {
  std::vector<float> keys(in.S * in.d);
  for (size_t i = 0; i < keys.size(); ++i) {
    keys[i] = fp16_to_fp32(fp32_to_fp16(in.k[h * in.S * in.d + i]));
  }
  const size_t group = with_queries ? in.n_heads / in.n_kv : 1;
  std::vector<float> queries;
  if (with_queries) {
    queries.assign(in.q.begin() + static_cast<long>(h * group * in.w * in.d),
                   in.q.begin() + static_cast<long>((h + 1) * group * in.w * in.d));
  } else {
    queries.assign(keys.end() - static_cast<long>(in.w * in.d), keys.end());
  }
  Reference ref;
  ref.scores.resize(in.S);
  if (with_queries) {
    window_scores_ref(ref.scores.data(), keys.data(), in.S, in.d, queries.data(), group, in.w,
                      causal);
  } else {
    // Proxy keys score only the rows before the window; the window's rows score 1
    // (proxy_candidate_scores). The causal mask cannot matter there.
    const size_t before = in.S - in.w;
    window_scores_ref(ref.scores.data(), keys.data(), before, in.d, queries.data(), 1, in.w, false);
    std::fill(ref.scores.begin() + static_cast<long>(before), ref.scores.end(), 1.0);
  }
  double max_abs_dot = 0.0;
  for (size_t r = 0; r < group * in.w; ++r) {
    for (size_t j = 0; j < in.S; ++j) {
      double s = 0.0;
      for (size_t c = 0; c < in.d; ++c) {
        s += std::fabs(static_cast<double>(queries[r * in.d + c]) * keys[j * in.d + c]);
      }
      max_abs_dot = std::max(max_abs_dot, s);
    }
  }
  const double eps = std::numeric_limits<float>::epsilon();
  const double d = static_cast<double>(in.d);
  ref.rel_tol = 2.0 * d * eps * max_abs_dot / std::sqrt(d) + static_cast<double>(in.S + 16) * eps;
  return ref;
}

void expect_scores_near(const std::vector<double>& got, const std::vector<double>& want,
                        double rel_tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_LE(std::fabs(got[i] - want[i]), rel_tol * want[i] + 1e-30)
        << what << " position " << i << ": " << got[i] << " vs " << want[i];
  }
}

std::vector<double> max_pool_ref(const std::vector<double>& x, size_t kernel) {
  std::vector<double> out(x.size());
  const long half = static_cast<long>(kernel / 2), n = static_cast<long>(x.size());
  for (long i = 0; i < n; ++i) {
    double m = -std::numeric_limits<double>::infinity();
    for (long j = std::max(0L, i - half); j <= std::min(n - 1, i + half); ++j)
      m = std::max(m, x[j]);
    out[static_cast<size_t>(i)] = m;
  }
  return out;
}

TEST(SelectCli, QueriesModeJsonShapeScoresAndSelection) {
  TempDir dir("select");
  const Inputs in = make_inputs(1);
  const Files f = write_inputs(in, dir);
  const json j = parse_ok(run_cli(
      "select --keys " + f.k + " --queries " + f.q + " --budget 12 --sinks 3 --json" + kPlain,
      dir));
  ASSERT_EQ(j.size(), 2u);  // exactly "kept" and "scores"
  ASSERT_EQ(j["kept"].size(), in.n_kv);
  ASSERT_EQ(j["scores"].size(), in.n_kv);
  for (size_t h = 0; h < in.n_kv; ++h) {
    const auto kept = j["kept"][h].get<std::vector<int64_t>>();
    const auto scores = head_scores(j, h);
    ASSERT_EQ(kept.size(), 12u);
    EXPECT_TRUE(std::is_sorted(kept.begin(), kept.end()));
    EXPECT_EQ(std::adjacent_find(kept.begin(), kept.end()), kept.end());
    for (int64_t s = 0; s < 3; ++s) EXPECT_EQ(kept[static_cast<size_t>(s)], s) << "sink " << s;
    const Reference ref = reference(in, h, true, true);
    expect_scores_near(scores, ref.scores, ref.rel_tol, "head " + std::to_string(h));
    double sum = 0.0;
    for (double s : scores) sum += s;
    EXPECT_NEAR(sum, 1.0, 1e-4);
    // The planted rows are the most attended non-sink rows: all of them are kept.
    for (const int64_t p : {int64_t{17}, static_cast<int64_t>(40 + 5 * h), int64_t{61}}) {
      EXPECT_TRUE(std::binary_search(kept.begin(), kept.end(), p)) << "row " << p;
    }
    // Every kept non-sink row scores at least as high as every dropped one.
    double min_kept = 1e9, max_dropped = -1e9;
    for (size_t i = 3; i < in.S; ++i) {
      if (std::binary_search(kept.begin(), kept.end(), static_cast<int64_t>(i))) {
        min_kept = std::min(min_kept, scores[i]);
      } else {
        max_dropped = std::max(max_dropped, scores[i]);
      }
    }
    EXPECT_GE(min_kept, max_dropped);
  }
}

TEST(SelectCli, ProxyModeMatchesReferenceCausalOrNot) {
  TempDir dir("select");
  const Inputs in = make_inputs(2);
  const Files f = write_inputs(in, dir);
  const std::string common = "select --keys " + f.k + " --window 8 --budget 20 --sinks 4" + kPlain;
  const json open = parse_ok(run_cli(common + " --no-causal", dir));
  const json causal = parse_ok(run_cli(common, dir));
  for (size_t h = 0; h < in.n_kv; ++h) {
    const Reference ref = reference(in, h, false, false);
    expect_scores_near(head_scores(open, h), ref.scores, ref.rel_tol,
                       "proxy head " + std::to_string(h));
    EXPECT_EQ(head_scores(causal, h), head_scores(open, h)) << "head " << h;
  }
}

TEST(SelectCli, BudgetAtLeastSKeepsAllAndStillReportsScores) {
  TempDir dir("select");
  const Inputs in = make_inputs(3);
  const Files f = write_inputs(in, dir);
  const std::string common = "select --keys " + f.k + " --queries " + f.q + " --sinks 4" + kPlain;
  const json small = parse_ok(run_cli(common + " --budget 16", dir));
  const json all = parse_ok(run_cli(common + " --budget 500", dir));
  for (size_t h = 0; h < in.n_kv; ++h) {
    const auto kept = all["kept"][h].get<std::vector<int64_t>>();
    ASSERT_EQ(kept.size(), in.S);
    for (size_t i = 0; i < in.S; ++i) EXPECT_EQ(kept[i], static_cast<int64_t>(i));
    // Scores do not depend on the budget: the same numbers whether or not the policy ran.
    EXPECT_EQ(head_scores(all, h), head_scores(small, h)) << "head " << h;
  }
}

TEST(SelectCli, PoolingAndKeepWindow) {
  TempDir dir("select");
  const Inputs in = make_inputs(4);
  const Files f = write_inputs(in, dir);
  const std::string common = "select --keys " + f.k + " --queries " + f.q + " --sinks 2";
  const json plain = parse_ok(run_cli(common + " --budget 30" + kPlain, dir));
  const json pooled =
      parse_ok(run_cli(common + " --budget 30 --pool max --kernel 5 --no-keep-window", dir));
  const json pooled_default =
      parse_ok(run_cli(common + " --budget 30 --pool max --no-keep-window", dir));
  const json windowed = parse_ok(run_cli(common + " --budget 30 --pool none --keep-window", dir));
  for (size_t h = 0; h < in.n_kv; ++h) {
    EXPECT_EQ(head_scores(pooled, h), max_pool_ref(head_scores(plain, h), 5));
    EXPECT_EQ(head_scores(pooled_default, h),
              max_pool_ref(head_scores(plain, h), kSnapkvKernel));  // snapkv's own
    const auto kept = windowed["kept"][h].get<std::vector<int64_t>>();
    ASSERT_EQ(kept.size(), 30u);
    for (size_t r = 0; r < in.w; ++r) {
      EXPECT_EQ(kept[30 - in.w + r], static_cast<int64_t>(in.S - in.w + r)) << "window row " << r;
    }
  }
}

TEST(SelectCli, TableOutputAndHelp) {
  TempDir dir("select");
  const Files f = write_inputs(make_inputs(5), dir);
  const CliResult t =
      run_cli("select --keys " + f.k + " --budget 10 --window 8 --table" + kPlain, dir);
  EXPECT_EQ(t.rc, 0) << t.err;
  EXPECT_NE(t.out.find("kv head 0: kept 10 of 96"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("positions: 0-3"), std::string::npos) << t.out;
  const CliResult h = run_cli("select --help", dir);
  EXPECT_EQ(h.rc, 0);
  EXPECT_NE(h.out.find("Example"), std::string::npos);
  EXPECT_NE(h.out.find("--budget"), std::string::npos);
}

TEST(SelectCli, BadFilesExitOneWithClearMessages) {
  TempDir dir("select");
  const Inputs in = make_inputs(6);
  const Files f = write_inputs(in, dir);
  const auto expect_rc1 = [&](const std::string& args, const std::vector<std::string>& parts) {
    const CliResult r = run_cli(args, dir);
    EXPECT_EQ(r.rc, 1) << args << "\n" << r.err;
    EXPECT_EQ(r.out, "") << args;
    EXPECT_EQ(r.err.rfind("snapkv: error: ", 0), 0u) << r.err;
    for (const std::string& p : parts) EXPECT_NE(r.err.find(p), std::string::npos) << r.err;
  };
  expect_rc1("select --keys " + dir.file("missing.npy"), {"[npy]", "missing.npy", "cannot open"});

  // float64 keys: the dtype is named.
  const std::string f8 = dir.file("K8.npy");
  {
    std::vector<uint8_t> bytes = encode_npy(std::vector<float>{1, 2}, std::vector<size_t>{2});
    const std::string h = "'descr': '<f4'";
    auto it = std::search(bytes.begin(), bytes.end(), h.begin(), h.end());
    ASSERT_NE(it, bytes.end());
    it[12] = '8';  // '<f4' -> '<f8', and two floats are the 8 bytes of one double
    std::ofstream(f8, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()), static_cast<long>(bytes.size()));
  }
  expect_rc1("select --keys " + f8, {"[npy]", "K8.npy", "dtype", "'<f8'", "expected '<f4'"});

  const std::string rank2 = dir.file("K2.npy");
  write_npy(rank2, std::vector<float>(6, 0.5f), std::vector<size_t>{2, 3});
  expect_rc1("select --keys " + rank2, {"wrong rank", "got 2", "expected 3"});

  std::vector<float> nan_keys = in.k;
  nan_keys[(1 * in.S + 5) * in.d + 3] = std::numeric_limits<float>::quiet_NaN();
  const std::string nan_path = dir.file("Knan.npy");
  write_npy(nan_path, nan_keys, std::vector<size_t>{in.n_kv, in.S, in.d});
  expect_rc1("select --keys " + nan_path, {"non-finite", "[1][5][3]"});

  const std::string q_bad = dir.file("Qd.npy");
  write_npy(q_bad, std::vector<float>(4 * 8 * 12, 0.1f), std::vector<size_t>{4, 8, 12});
  expect_rc1("select --keys " + f.k + " --queries " + q_bad, {"head_dim"});
  const std::string q_heads = dir.file("Qh.npy");
  write_npy(q_heads, std::vector<float>(3 * 8 * 16, 0.1f), std::vector<size_t>{3, 8, 16});
  expect_rc1("select --keys " + f.k + " --queries " + q_heads, {"multiple of n_kv_heads"});
}

TEST(SelectCli, BadUsageExitsTwo) {
  TempDir dir("select");
  const Files f = write_inputs(make_inputs(7), dir);
  for (const std::string& args : {
           std::string("select"),                                         // --keys missing
           "select --keys " + f.k + " --pool median",                     // unknown pool
           "select --keys " + f.k + " --budget 2 --sinks 4",              // budget < sinks
           "select --keys " + f.k + " --pool max --kernel 4",             // even kernel
           "select --keys " + f.k + " --window 0",                        // window 0
           "select --keys " + f.k + " --queries " + f.q + " --heads 8",   // disagrees with Q
           "select --keys " + f.k + " --queries " + f.q + " --window 4",  // disagrees with Q
           "select --keys " + f.k + " --heads 3",                         // not a multiple
           "select --keys " + f.k + " --json --table",                    // two formats
       }) {
    const CliResult r = run_cli(args, dir);
    EXPECT_EQ(r.rc, 2) << args << "\n" << r.err;
    EXPECT_EQ(r.out, "") << args;
    EXPECT_NE(r.err.find("snapkv: error: "), std::string::npos) << args << "\n" << r.err;
  }
}

}  // namespace
}  // namespace snapkv::clitest
