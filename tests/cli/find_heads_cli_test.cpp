// `snapkv find-heads` end to end on the eval tests' tiny model: without the sidecar a duo- method
// is refused by name, naming the command that makes it; the sidecar it writes beside the model is
// the same bytes for the same seed; `compress`, `eval` and `run` then accept duo- methods; an
// output over the model is refused before any work.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "cli/cli_test_util.h"
#include "eval/tiny_model.h"

namespace snapkv::clitest {
namespace {

TEST(FindHeadsCli, WritesADeterministicSidecarThatDuoUses) {
  const TempDir dir("find_heads");
  const std::string model = dir.file("m.gguf");
  std::filesystem::copy_file(test::tiny_model_path(), model);
  const std::string opts = " --samples 1 --context 1024 --seed 3 --quiet";
  const std::string doc = dir.file("doc.txt");
  {
    std::ofstream out(doc);
    for (int i = 0; i < 5; ++i) out << "The grass is green and the pass key is 48213. ";
  }
  const std::string compress = "compress --model '" + model + "' --prompt-file '" + doc +
                               "' --method duo-snapkv --keep 0.3 --out '" + dir.file("a.kvc") +
                               "' --quiet";
  const CliResult none = run_cli(compress, dir);
  EXPECT_NE(none.rc, 0);
  EXPECT_NE(none.err.find("needs head types"), std::string::npos) << none.err;
  EXPECT_NE(none.err.find("snapkv find-heads --model"), std::string::npos) << none.err;
  const CliResult a = run_cli("find-heads --model '" + model + "'" + opts, dir);
  ASSERT_EQ(a.rc, 0) << a.err;
  const std::string sidecar = dir.file("m.heads.gguf");
  ASSERT_TRUE(std::filesystem::exists(sidecar)) << a.out;
  const CliResult b =
      run_cli("find-heads --model '" + model + "' -o '" + dir.file("b.gguf") + "'" + opts, dir);
  ASSERT_EQ(b.rc, 0) << b.err;
  EXPECT_EQ(read_text(dir.file("b.gguf")), read_text(sidecar));
  const CliResult c = run_cli(compress, dir);
  EXPECT_EQ(c.rc, 0) << c.err;
  const CliResult e = run_cli("eval --model '" + model +
                                  "' --tasks passkey --n 1 --context 1000 --keep 0.2 "
                                  "--methods duo-snapkv,duo-ada-snapkv+kivi4 --threads 1 --quiet",
                              dir);
  EXPECT_EQ(e.rc, 0) << e.err;
  const CliResult over = run_cli("find-heads --model '" + model + "' -o '" + model + "'", dir);
  EXPECT_EQ(over.rc, 2) << over.err;
  EXPECT_NE(over.err.find("same file as --model"), std::string::npos) << over.err;
}

}  // namespace
}  // namespace snapkv::clitest
