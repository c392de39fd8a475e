// Determinism through the real binary: `snapkv eval` gives the same results (every field except
// wall times and the recorded command/threads) with 1 and 2 threads and with or without the shared
// prefill, and repeated in-process runs do not grow the resident set.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/cli_test_util.h"
#include "eval/tiny_model.h"
#include "snapkv/eval/harness.h"
#include "snapkv/util/rusage.h"

namespace snapkv::clitest {
namespace {

using nlohmann::json;

// The per-cell results without the fields that measure time.
json results_without_timings(const std::string& path) {
  json cells = json::parse(read_text(path)).at("results");
  for (json& c : cells) {
    for (const char* k : {"decode_s", "decode_tokens_per_s", "prefill_s", "prefill_tokens_per_s"}) {
      c.erase(k);
    }
  }
  return cells;
}

TEST(DeterminismCli, EvalIsIdenticalAcrossThreadCountsAndPrefillSharing) {
  TempDir dir("determinism");
  const std::string base = "eval --model " + std::string(SNAPKV_SOURCE_DIR) +
                           "/models/snapkv-tiny4.gguf --tasks passkey --n 2 "
                           "--context 300 --methods full,snapkv,ada-snapkv,snapkv+kivi2 "
                           "--keep 0.2 --quiet --json ";
  const std::vector<std::string> variants = {"--threads 1", "--threads 2",
                                             "--threads 2 --no-share-prefill"};
  std::vector<json> got;
  for (size_t i = 0; i < variants.size(); ++i) {
    const std::string out = dir.file("r" + std::to_string(i) + ".json");
    const CliResult r = run_cli(base + out + " " + variants[i], dir);
    ASSERT_EQ(r.rc, 0) << variants[i] << ": " << r.err;
    got.push_back(results_without_timings(out));
  }
  ASSERT_FALSE(got[0].empty());
  for (size_t i = 1; i < got.size(); ++i) EXPECT_EQ(got[i], got[0]) << variants[i];
}

// 20 back-to-back runs of one sample in one process: after the first few (allocator warm-up),
// the resident set must not keep growing (each run allocates its caches and frees them).
TEST(DeterminismCli, RepeatedRunsKeepTheResidentSetFlat) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "ASan keeps freed memory in quarantine: RSS says nothing about leaks there "
                  "(LeakSanitizer checks them instead)";
#endif
  const auto& m = test::tiny_model();
  eval::Sample sample;
  sample.context = "The grass is green. The pass key is 48213. Remember it. The sky is blue.\n";
  sample.question = "What is the pass key?\n";
  sample.answer_prefix = " The pass key is";
  sample.answers = {"48213"};
  const eval::PromptTokens prompt = eval::tokenize_prompt(m.tokenizer, sample);
  CacheConfig config;
  config.budget = 40;
  eval::RunSettings settings;
  const auto run = [&] {
    (void)eval::run_sample(m.model, m.tokenizer, prompt, sample.answers, config, settings);
  };
  for (int i = 0; i < 5; ++i) run();
  const size_t before = current_rss_bytes();
  for (int i = 0; i < 20; ++i) run();
  const size_t after = current_rss_bytes();
  // One run's caches and activations are a few hundred KiB; 20 leaked runs would exceed 4 MiB.
  EXPECT_LT(after, before + (size_t{4} << 20)) << "before " << before << ", after " << after;
}

}  // namespace
}  // namespace snapkv::clitest
