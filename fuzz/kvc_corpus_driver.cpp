// Plain (non-libFuzzer) driver for the .kvc reader: runs every file in the directories given
// through kv/file/kvc_exercise.h. Files named valid-* must parse and bad-* must be rejected; other
// names only have to not crash. Exit 0 when all hold, 1 otherwise.
//
//   kvc_corpus_driver tests/kv/kvc_corpus
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "kv/file/kvc_exercise.h"

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s DIR...\n", argv[0]);
    return 2;
  }
  size_t n = 0;
  int failures = 0;
  for (int i = 1; i < argc; ++i) {
    for (const auto& entry : fs::recursive_directory_iterator(argv[i])) {
      if (!entry.is_regular_file()) continue;
      std::ifstream in(entry.path(), std::ios::binary);
      const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                                       std::istreambuf_iterator<char>());
      const bool parsed = snapkv::kvc::exercise_reader(bytes.data(), bytes.size());
      const std::string name = entry.path().filename().string();
      ++n;
      if ((name.rfind("valid-", 0) == 0 && !parsed) || (name.rfind("bad-", 0) == 0 && parsed)) {
        std::fprintf(stderr, "FAIL %s: %s\n", entry.path().c_str(),
                     parsed ? "parsed, expected a KvcError" : "rejected, expected to parse");
        ++failures;
      }
    }
  }
  std::printf("kvc corpus: %zu files, %d failures\n", n, failures);
  return failures == 0 && n > 0 ? 0 : 1;
}
