// Replays the committed .kvc fuzz corpus (tests/kv/kvc_corpus, written by fuzz/kvc_corpus_gen)
// through the fuzz target's exerciser in every normal test run: valid-* files parse, decode,
// attend and re-encode to their own bytes; bad-* files are rejected with a KvcError.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "kv/file/kvc_exercise.h"

namespace snapkv {
namespace {

TEST(KvcCorpus, EveryFileBehavesAsItsNameSays) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(SNAPKV_SOURCE_DIR) / "tests" / "kv" / "kvc_corpus";
  size_t n_valid = 0, n_bad = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    std::ifstream in(entry.path(), std::ios::binary);
    const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                                     std::istreambuf_iterator<char>());
    const std::string name = entry.path().filename().string();
    const bool parsed = kvc::exercise_reader(bytes.data(), bytes.size());
    if (name.rfind("valid-", 0) == 0) {
      EXPECT_TRUE(parsed) << name;
      ++n_valid;
    } else if (name.rfind("bad-", 0) == 0) {
      EXPECT_FALSE(parsed) << name;
      ++n_bad;
    }
  }
  EXPECT_GE(n_valid, 3u);
  EXPECT_GE(n_bad, 3u);
}

}  // namespace
}  // namespace snapkv
