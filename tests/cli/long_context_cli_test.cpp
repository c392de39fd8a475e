// Past the model's context through the real binary: a passkey prompt of three times the shipped
// model's 2,048 trained positions runs with streaming and with snapkv in every_chunk mode, the
// same text run after run; the full cache, end_of_prompt and a quantized-key codec are refused
// by name; a document compressed past the context is answered from its .kvc file.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/cli_test_util.h"

namespace snapkv::clitest {
namespace {

using nlohmann::json;

std::string model_path() {
  return std::string(SNAPKV_SOURCE_DIR) + "/models/snapkv-tiny4.gguf";
}

// A 6,144-token passkey sample's prompt (context, question, answer prefix) in `path`; returns its
// answer.
std::string write_passkey_prompt(const TempDir& dir, const std::string& path) {
  const CliResult gen = run_cli(
      "tasks gen --task passkey --n 1 --context 6144 --seed 4 --quiet "
      "--tokenizer '" +
          model_path() + "' --out '" + dir.file("pk.jsonl") + "'",
      dir);
  EXPECT_EQ(gen.rc, 0) << gen.err;
  const json sample = json::parse(read_text(dir.file("pk.jsonl")));
  std::ofstream(path, std::ios::binary)
      << sample.at("context").get<std::string>() << sample.at("question").get<std::string>()
      << sample.at("answer_prefix").get<std::string>();
  return sample.at("answers").at(0).get<std::string>();
}

TEST(LongContextCli, EvictingMethodsInEveryChunkModeRunThreeTimesTheContext) {
  TempDir dir("longctx");
  const std::string prompt = dir.file("prompt.txt");
  write_passkey_prompt(dir, prompt);
  const std::string base = "run -m '" + model_path() + "' -f '" + prompt + "' -n 8 -t 2 ";
  for (const std::string method : {"streaming", "snapkv"}) {
    SCOPED_TRACE(method);
    const std::string args =
        base + "--method " + method + " --chunk-mode every_chunk --budget 256 --json";
    const CliResult a = run_cli(args, dir);
    ASSERT_EQ(a.rc, 0) << a.err;
    const json ja = json::parse(a.out);
    EXPECT_GT(ja.at("prompt_tokens").get<size_t>(), 3u * 2048 - 100);
    EXPECT_EQ(ja.at("generated_tokens").get<size_t>(), 8u);
    const CliResult b = run_cli(args, dir);
    ASSERT_EQ(b.rc, 0) << b.err;
    EXPECT_EQ(json::parse(b.out).at("text"), ja.at("text"));
  }
  const CliResult full = run_cli(base + "--method full", dir);
  EXPECT_NE(full.rc, 0);
  EXPECT_NE(full.err.find("context"), std::string::npos) << full.err;
  const CliResult end_of_prompt = run_cli(base + "--method streaming --budget 256", dir);
  EXPECT_NE(end_of_prompt.rc, 0);
  EXPECT_NE(end_of_prompt.err.find("context"), std::string::npos) << end_of_prompt.err;
  const CliResult kivi =
      run_cli(base + "--method streaming+kivi2 --chunk-mode every_chunk --budget 256", dir);
  EXPECT_NE(kivi.rc, 0);
  EXPECT_NE(kivi.err.find("keys stored quantized"), std::string::npos) << kivi.err;
}

TEST(LongContextCli, CompressedPastTheContextAndAskedFromTheFile) {
  TempDir dir("longctx_kvc");
  const std::string doc = dir.file("doc.txt");
  write_passkey_prompt(dir, doc);
  const std::string kvc = dir.file("doc.kvc");
  const CliResult c = run_cli("compress -m '" + model_path() + "' -f '" + doc + "' -o '" + kvc +
                                  "' --method streaming --chunk-mode every_chunk --budget 256 "
                                  "--quiet",
                              dir);
  ASSERT_EQ(c.rc, 0) << c.err;
  const std::string ask = "ask -m '" + model_path() + "' --cache '" + kvc +
                          "' --question 'What is the pass key?' -n 6 --quiet";
  const CliResult a = run_cli(ask, dir);
  ASSERT_EQ(a.rc, 0) << a.err;
  const CliResult b = run_cli(ask, dir);
  EXPECT_EQ(a.out, b.out);
}

}  // namespace
}  // namespace snapkv::clitest
