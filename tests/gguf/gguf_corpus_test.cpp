// Regression run of the committed fuzzing corpus through the same exerciser the libFuzzer target
// uses: no file may crash; files named valid-* must parse and files named bad-* must be rejected
// with a snapkv::RuntimeError. tests/gguf/corpus holds the generated seeds (written by
// tools/write_gguf_seed_corpus.cpp) and, under fuzz/, the inputs libFuzzer found that add
// coverage beyond them (kept with `fuzz_gguf_reader -merge=1 <copy of corpus> <new inputs>`).
// This test is the one replay of the corpus (every ctest run, and under ASan + UBSan in CI).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include "gguf/exercise.h"

namespace snapkv::gguf {
namespace {

TEST(GgufCorpus, EveryCommittedFileIsHandled) {
  const std::filesystem::path dir = std::filesystem::path(SNAPKV_SOURCE_DIR) / "tests/gguf/corpus";
  ASSERT_TRUE(std::filesystem::is_directory(dir)) << dir;
  size_t n_files = 0, n_valid = 0, n_bad = 0;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir)) {
    if (!entry.is_regular_file()) continue;
    std::ifstream in(entry.path(), std::ios::binary);
    const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                                     std::istreambuf_iterator<char>());
    const std::string name = entry.path().filename().string();
    const bool parsed = detail::exercise_reader(bytes.data(), bytes.size());
    if (name.rfind("valid-", 0) == 0) {
      EXPECT_TRUE(parsed) << name;
      ++n_valid;
    } else if (name.rfind("bad-", 0) == 0) {
      EXPECT_FALSE(parsed) << name;
      ++n_bad;
    }
    ++n_files;
  }
  EXPECT_GE(n_valid, 3u);
  EXPECT_GE(n_bad, 50u);
  RecordProperty("corpus_files", static_cast<int>(n_files));
}

}  // namespace
}  // namespace snapkv::gguf
