// `snapkv tokenize` end to end on the committed Llama 3 / Qwen 3 vocabularies: the id line format
// of llama-tokenize --ids, --no-bos, --parse-special, --file, and usage / file errors.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "cli_test_util.h"

namespace snapkv::clitest {
namespace {

const std::string kLlama3 = std::string(SNAPKV_VOCAB_DIR) + "/llama3-vocab.gguf";
const std::string kQwen3 = std::string(SNAPKV_VOCAB_DIR) + "/qwen3-vocab.gguf";

TEST(TokenizeCli, PrintsIdsLikeLlamaTokenize) {
  TempDir dir("tokenize");
  auto r = run_cli("tokenize --model '" + kLlama3 + "' --text 'Hello world'", dir);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, "[128000, 9906, 1917]\n");
  r = run_cli("tokenize --model '" + kLlama3 + "' --text 'Hello world' --no-bos", dir);
  EXPECT_EQ(r.out, "[9906, 1917]\n");
  r = run_cli("tokenize --model '" + kQwen3 + "' --text 'Hello world'", dir);  // no BOS
  EXPECT_EQ(r.out, "[9707, 1879]\n");
  r = run_cli("tokenize --model '" + kLlama3 + "' --text ''", dir);
  EXPECT_EQ(r.out, "[128000]\n");
}

TEST(TokenizeCli, SpecialTokensOnlyWithParseSpecial) {
  TempDir dir("tokenize");
  auto r = run_cli("tokenize --model '" + kLlama3 + "' --no-bos --text 'a<|eot_id|>'", dir);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out, "[64, 128009]\n");
  r = run_cli("tokenize --model '" + kLlama3 + "' --no-bos --parse-special --text 'a<|eot_id|>'",
              dir);
  EXPECT_EQ(r.out, "[64, 128009]\n");
}

TEST(TokenizeCli, ReadsFileBytesAsTheyAre) {
  TempDir dir("tokenize");
  {
    std::ofstream f(dir.file("in.txt"), std::ios::binary);
    f << "Hello world\n";
  }
  const auto r =
      run_cli("tokenize --model '" + kLlama3 + "' --file '" + dir.file("in.txt") + "'", dir);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, "[128000, 9906, 1917, 198]\n");
}

TEST(TokenizeCli, BadUsageAndBadFiles) {
  TempDir dir("tokenize");
  auto r = run_cli("tokenize --model '" + kLlama3 + "'", dir);
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("exactly one of --text or --file"), std::string::npos) << r.err;
  r = run_cli("tokenize --model '" + kLlama3 + "' --text a --file x", dir);
  EXPECT_EQ(r.rc, 2);
  r = run_cli("tokenize --model '" + dir.file("missing.gguf") + "' --text a", dir);
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("snapkv: error:"), std::string::npos) << r.err;
  r = run_cli("tokenize --text a", dir);
  EXPECT_EQ(r.rc, 2);
}

}  // namespace
}  // namespace snapkv::clitest
