// The methods that need more than the model's weights, on the command line with the shipped model
// (models/snapkv-tiny4.gguf and the sidecars beside it): `run` compresses under duo-snapkv, kvzap,
// kvzap-snapkv, kvzap-proxy and kvzip_plus, and `compress` + `ask` answers the pass key under each;
// a copy of the model without its sidecars refuses duo-, kvzap and kvzap-proxy naming the missing
// file (exit 2) and still runs kvzip_plus.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/cli_test_util.h"

namespace snapkv::clitest {
namespace {

const std::string kModel = std::string(SNAPKV_SOURCE_DIR) + "/models/snapkv-tiny4.gguf";

std::string filler() {
  std::string f;
  for (int i = 0; i < 12; ++i) {
    f += "Everyone said the castle was small, but the painter thought it was broad. ";
  }
  return f;
}

// The passkey document of the C ABI's tests: (document, question).
std::pair<std::string, std::string> passkey() {
  return {
      "There is an important info hidden inside a lot of irrelevant text. Find it and "
      "memorize them. I will quiz you about the important information there.\n" +
          filler() + "The pass key is 71432. Remember it. 71432 is the pass key. " + filler() +
          "\n\n",
      "What is the pass key? The pass key is"};
}

TEST(SidecarMethodsCli, ShippedModelAnswersUnderEachMethod) {
  const TempDir dir("sidecar_methods");
  const auto [doc, question] = passkey();
  const std::string prompt = dir.file("prompt.txt"), doc_file = dir.file("doc.txt");
  std::ofstream(prompt) << doc << question;
  std::ofstream(doc_file) << doc;
  for (const std::string method : {"duo-snapkv", "kvzap", "kvzip_plus", "duo-ada-kvzip_plus",
                                   "kvzap-snapkv", "ada-kvzap-proxy"}) {
    SCOPED_TRACE(method);
    const CliResult r =
        run_cli("run --model '" + kModel + "' --prompt-file '" + prompt + "' --method " + method +
                    " --keep 0.2 --max-tokens 8 --json --quiet --threads 2",
                dir);
    ASSERT_EQ(r.rc, 0) << r.err;
    const nlohmann::json j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["method"], method);
    EXPECT_LT(j["kv_bytes"].get<size_t>(), j["kv_bytes_full_fp16"].get<size_t>()) << r.out;

    const std::string kvc = dir.file("doc.kvc");
    const CliResult c =
        run_cli("compress --model '" + kModel + "' --prompt-file '" + doc_file + "' --method " +
                    method + " --keep 0.2 --out '" + kvc + "' --quiet --threads 2",
                dir);
    ASSERT_EQ(c.rc, 0) << c.err;
    const CliResult a = run_cli("ask --model '" + kModel + "' --cache '" + kvc + "' --question '" +
                                    question + "' --json --threads 2",
                                dir);
    ASSERT_EQ(a.rc, 0) << a.err;
    EXPECT_NE(a.out.find("71432"), std::string::npos) << a.out;
  }
}

TEST(SidecarMethodsCli, ModelWithoutSidecarsRefusesByName) {
  const TempDir dir("sidecar_methods_bare");
  const std::string model = dir.file("bare.gguf");
  std::filesystem::copy_file(kModel, model);
  const auto [doc, question] = passkey();
  const std::string prompt = dir.file("prompt.txt");
  std::ofstream(prompt) << doc << question;
  const std::string run =
      "run --model '" + model + "' --prompt-file '" + prompt + "' --max-tokens 4 --quiet --method ";
  const CliResult duo = run_cli(run + "duo-snapkv", dir);
  EXPECT_EQ(duo.rc, 2) << duo.err;
  EXPECT_NE(duo.err.find("needs head types"), std::string::npos) << duo.err;
  EXPECT_NE(duo.err.find(dir.file("bare.heads.gguf")), std::string::npos) << duo.err;
  const CliResult kvzap = run_cli(run + "kvzap", dir);
  EXPECT_EQ(kvzap.rc, 2) << kvzap.err;
  EXPECT_NE(kvzap.err.find("needs scorer weights"), std::string::npos) << kvzap.err;
  EXPECT_NE(kvzap.err.find(dir.file("bare.kvzap.gguf")), std::string::npos) << kvzap.err;
  const CliResult proxy = run_cli(run + "kvzap-proxy --prior-weight 0.3", dir);
  EXPECT_EQ(proxy.rc, 2) << proxy.err;
  EXPECT_NE(proxy.err.find("policy kvzap_snapkv needs scorer weights"), std::string::npos)
      << proxy.err;
  EXPECT_NE(proxy.err.find(dir.file("bare.kvzap.gguf")), std::string::npos) << proxy.err;
  const CliResult plus = run_cli(run + "kvzip_plus", dir);
  EXPECT_EQ(plus.rc, 0) << plus.err;
}

}  // namespace
}  // namespace snapkv::clitest
