// `snapkv compress` + `snapkv ask` end to end on the eval tests' tiny model: the answers printed
// by `ask --json` equal those of the same prompt run in process (prefill, append the question,
// greedy, no newline stop), the file is refused after corruption (exit 1, named error) and bad
// usage exits 2.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/cli_test_util.h"
#include "eval/tiny_model.h"
#include "snapkv/kv/core/method.h"
#include "snapkv/model/kvzip.h"
#include "snapkv/model/prompt_cache.h"

namespace snapkv::clitest {
namespace {

using nlohmann::json;

const char* kDocument =
    "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. "
    "The pass key is 48213. Remember it. 48213 is the pass key. The grass is green. The sky is "
    "blue. The sun is yellow. Here we go. There and back again.";

TEST(KvcCli, CompressThenAskMatchesTheInProcessAnswer) {
  const auto& m = test::tiny_model();
  TempDir dir("kvc_cli");
  const std::string doc = dir.file("doc.txt"), kvc = dir.file("doc.kvc");
  std::ofstream(doc) << kDocument;
  const std::string model = test::tiny_model_path();
  const CliResult c =
      run_cli("compress --model '" + model + "' --prompt-file '" + doc +
                  "' --method snapkv+kivi2 --keep 0.5 --window 8 --out '" + kvc + "' --json",
              dir);
  ASSERT_EQ(c.rc, 0) << c.err;
  const json cj = json::parse(c.out);
  EXPECT_EQ(cj["file_bytes"].get<size_t>(), std::filesystem::file_size(kvc));
  const std::vector<std::string> questions = {"What is the pass key?", "What color is the sky?"};
  std::ofstream(dir.file("q.txt")) << questions[0] << "\n\n" << questions[1] << "\n";
  const CliResult a = run_cli("ask --model '" + model + "' --cache '" + kvc + "' --questions '" +
                                  dir.file("q.txt") + "' --max-tokens 6 --json",
                              dir);
  ASSERT_EQ(a.rc, 0) << a.err;
  const json aj = json::parse(a.out);
  EXPECT_EQ(aj["bytes_read"].get<size_t>(), std::filesystem::file_size(kvc));
  ASSERT_EQ(aj["answers"].size(), questions.size());

  // The same in process: the config compress builds, a prefill, then each question.
  CacheConfig defaults;
  defaults.window = 8;
  CacheConfig config = parse_method("snapkv+kivi2", defaults).config;
  const std::vector<int32_t> tokens = m.tokenizer.encode(kDocument);
  config.budget = budget_for(0.5, tokens.size(), config);
  LlamaSession base(m.model, config);
  base.prefill(tokens);
  for (size_t i = 0; i < questions.size(); ++i) {
    LlamaSession s = base.clone();
    std::vector<float> logits = s.extend(m.tokenizer.encode(questions[i], false));
    const GreedyAnswer want = answer_greedy(s, std::move(logits), m.tokenizer, 6, false);
    EXPECT_EQ(aj["answers"][i]["tokens"].get<std::vector<int32_t>>(), want.tokens) << i;
    EXPECT_EQ(aj["answers"][i]["question"].get<std::string>(), questions[i]);
    EXPECT_GE(aj["answers"][i]["ttft_s"].get<double>(), 0.0);
  }

  // A corrupted file: exit 1 with the checksum named; bad usage: exit 2.
  {
    std::fstream f(kvc, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(200);
    const char byte = static_cast<char>(f.get());
    f.seekp(200);
    f.put(static_cast<char>(byte ^ 0x5a));
  }
  const CliResult bad =
      run_cli("ask --model '" + model + "' --cache '" + kvc + "' --question x", dir);
  EXPECT_EQ(bad.rc, 1);
  EXPECT_NE(bad.err.find("checksum"), std::string::npos) << bad.err;
  const CliResult usage = run_cli("ask --model '" + model + "' --cache '" + kvc + "'", dir);
  EXPECT_EQ(usage.rc, 2) << usage.err;
}

// A cache made with one model and loaded with another: the error names the model given (its
// general.name and file), the cache file and both fingerprints.
TEST(KvcCli, CacheForAnotherModelNamesBothSides) {
  TempDir dir("kvc_cli_other");
  const std::string doc = dir.file("doc.txt"), kvc = dir.file("doc.kvc");
  std::ofstream(doc) << kDocument;
  const CliResult c = run_cli("compress --model '" + test::tiny_model_path() + "' -f '" + doc +
                                  "' -o '" + kvc + "' --quiet",
                              dir);
  ASSERT_EQ(c.rc, 0) << c.err;
  const std::string other = std::string(SNAPKV_SOURCE_DIR) + "/models/snapkv-tiny4.gguf";
  const CliResult a =
      run_cli("ask --model '" + other + "' --cache '" + kvc + "' --question x --quiet", dir);
  EXPECT_EQ(a.rc, 1) << a.err;
  EXPECT_NE(a.err.find("fingerprint"), std::string::npos) << a.err;
  EXPECT_NE(a.err.find("the model given is 'snapkv-"), std::string::npos) << a.err;
  EXPECT_NE(a.err.find(other), std::string::npos) << a.err;
  EXPECT_NE(a.err.find(kvc), std::string::npos) << a.err;
}

// AdaKV's ragged heads and PyramidKV's layer budgets (kvzip scored by the reconstruction pass)
// through compress + ask: the same answers as the in-process question-agnostic path.
TEST(KvcCli, RaggedAndPyramidCachesAnswerAsInProcess) {
  const auto& m = test::tiny_model();
  TempDir dir("kvc_cli_ragged");
  const std::string doc = dir.file("doc.txt");
  std::ofstream(doc) << kDocument;
  const std::string model = test::tiny_model_path();
  const std::string question = "What is the pass key?";
  const std::vector<int32_t> tokens = m.tokenizer.encode(kDocument);
  for (const std::string method : {"ada-snapkv", "pyramid-kvzip+kivi2"}) {
    const std::string kvc = dir.file(method + ".kvc");
    const CliResult c =
        run_cli("compress --model '" + model + "' --prompt-file '" + doc + "' --method " + method +
                    " --keep 0.5 --window 8 --out '" + kvc + "' --json",
                dir);
    ASSERT_EQ(c.rc, 0) << method << ": " << c.err;
    const CliResult a = run_cli("ask --model '" + model + "' --cache '" + kvc + "' --question '" +
                                    question + "' --max-tokens 6 --json",
                                dir);
    ASSERT_EQ(a.rc, 0) << method << ": " << a.err;
    const json aj = json::parse(a.out);

    CacheConfig defaults;
    defaults.window = 8;
    CacheConfig config = parse_method(method, defaults).config;
    config.budget = budget_for(0.5, tokens.size(), config);
    LlamaSession s(m.model, config,
                   SessionOptions{512, ReconstructionOptions{kvzip_repeat_prompt(m.tokenizer)}});
    s.prefill(tokens);
    std::vector<float> logits = s.extend(m.tokenizer.encode(question, false));
    const GreedyAnswer want = answer_greedy(s, std::move(logits), m.tokenizer, 6, false);
    EXPECT_EQ(aj["answers"][0]["tokens"].get<std::vector<int32_t>>(), want.tokens) << method;
  }
}

}  // namespace
}  // namespace snapkv::clitest
