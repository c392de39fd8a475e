// `snapkv train-scorer` end to end on the eval tests' tiny model: the sidecar it writes beside the
// model is the same bytes for the same seed (other bytes with --teacher kvzip_plus or questions),
// `compress --method kvzap` then uses it, and outputs that would destroy an input or a device are
// refused before any work.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "cli/cli_test_util.h"
#include "eval/tiny_model.h"

namespace snapkv::clitest {
namespace {

TEST(TrainScorerCli, WritesADeterministicSidecarThatKvzapUses) {
  const TempDir dir("train_scorer");
  const std::string model = dir.file("m.gguf");
  std::filesystem::copy_file(test::tiny_model_path(), model);
  const std::string opts = " --samples 1 --generic 1 --context 1024 --seed 3 --quiet";
  const std::string doc = dir.file("doc.txt");
  {
    std::ofstream out(doc);
    for (int i = 0; i < 5; ++i) out << "The grass is green and the pass key is 48213. ";
  }
  // No scorer yet: kvzap is refused by name (exit 2, bad usage: a config the model cannot run).
  const CliResult none =
      run_cli("compress --model '" + model + "' --prompt-file '" + doc +
                  "' --method kvzap --keep 0.3 --out '" + dir.file("a.kvc") + "' --quiet",
              dir);
  EXPECT_NE(none.rc, 0);
  EXPECT_NE(none.err.find("[kv] policy kvzap needs scorer weights"), std::string::npos) << none.err;
  const CliResult a = run_cli("train-scorer --model '" + model + "'" + opts, dir);
  ASSERT_EQ(a.rc, 0) << a.err;
  const std::string sidecar = dir.file("m.kvzap.gguf");
  ASSERT_TRUE(std::filesystem::exists(sidecar)) << a.out;
  const std::string first = read_text(sidecar);
  const CliResult b =
      run_cli("train-scorer --model '" + model + "' -o '" + dir.file("b.gguf") + "'" + opts, dir);
  ASSERT_EQ(b.rc, 0) << b.err;
  EXPECT_EQ(read_text(dir.file("b.gguf")), first);
  const CliResult c =
      run_cli("compress --model '" + model + "' --prompt-file '" + doc +
                  "' --method kvzap --keep 0.3 --out '" + dir.file("a.kvc") + "' --quiet",
              dir);
  EXPECT_EQ(c.rc, 0) << c.err;
  // --teacher kvzip_plus learns other targets, so other weights; an unknown teacher is refused.
  const CliResult plus = run_cli("train-scorer --model '" + model + "' -o '" +
                                     dir.file("plus.gguf") + "' --teacher kvzip_plus" + opts,
                                 dir);
  ASSERT_EQ(plus.rc, 0) << plus.err;
  EXPECT_NE(read_text(dir.file("plus.gguf")), first);
  // --teacher questions learns the questions' attention: other weights again; with no task
  // samples it has nothing to learn from and says so.
  const CliResult q = run_cli("train-scorer --model '" + model + "' -o '" + dir.file("q.gguf") +
                                  "' --teacher questions" + opts,
                              dir);
  ASSERT_EQ(q.rc, 0) << q.err;
  EXPECT_NE(read_text(dir.file("q.gguf")), first);
  EXPECT_NE(read_text(dir.file("q.gguf")), read_text(dir.file("plus.gguf")));
  const CliResult q0 = run_cli("train-scorer --model '" + model + "' -o '" + dir.file("q0.gguf") +
                                   "' --teacher questions --samples 0",
                               dir);
  EXPECT_NE(q0.rc, 0);
  EXPECT_NE(q0.err.find("generic prompts have no question"), std::string::npos) << q0.err;
  EXPECT_FALSE(std::filesystem::exists(dir.file("q0.gguf")));
  const CliResult bad =
      run_cli("train-scorer --model '" + model + "' --teacher snapkv" + opts, dir);
  EXPECT_NE(bad.rc, 0);
  EXPECT_NE(bad.err.find("--teacher"), std::string::npos) << bad.err;
  // Refused before any work: over the model, over a device.
  const CliResult over = run_cli("train-scorer --model '" + model + "' -o '" + model + "'", dir);
  EXPECT_EQ(over.rc, 2) << over.err;
  EXPECT_NE(over.err.find("same file as --model"), std::string::npos) << over.err;
  const CliResult dev = run_cli("train-scorer --model '" + model + "' -o /dev/null", dir);
  EXPECT_NE(dev.rc, 0);
  EXPECT_NE(dev.err.find("character device"), std::string::npos) << dev.err;
}

}  // namespace
}  // namespace snapkv::clitest
