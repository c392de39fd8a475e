// Plain (non-libFuzzer) driver: runs every file given (or every file in the directories given)
// through the same exerciser as fuzz_gguf_reader. Files named valid-* must parse and bad-* must be
// rejected; any other name only has to not crash. Exit 0 when all hold, 1 otherwise.
//
//   gguf_corpus_driver tests/gguf/corpus [more files or dirs...]
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "gguf/exercise.h"

namespace {

namespace fs = std::filesystem;

int run_file(const fs::path& path, size_t& n_parsed, size_t& n_rejected) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "gguf_corpus_driver: cannot read %s\n", path.c_str());
    return 1;
  }
  const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                                   std::istreambuf_iterator<char>());
  const bool parsed = snapkv::gguf::detail::exercise_reader(bytes.data(), bytes.size());
  ++(parsed ? n_parsed : n_rejected);
  const std::string name = path.filename().string();
  if (name.rfind("valid-", 0) == 0 && !parsed) {
    std::fprintf(stderr, "FAIL %s: rejected, expected to parse\n", path.c_str());
    return 1;
  }
  if (name.rfind("bad-", 0) == 0 && parsed) {
    std::fprintf(stderr, "FAIL %s: parsed, expected a RuntimeError\n", path.c_str());
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s FILE_OR_DIR...\n", argv[0]);
    return 2;
  }
  size_t n_parsed = 0, n_rejected = 0;
  int failures = 0;
  for (int i = 1; i < argc; ++i) {
    const fs::path arg(argv[i]);
    if (fs::is_directory(arg)) {
      for (const auto& entry : fs::recursive_directory_iterator(arg)) {
        if (entry.is_regular_file()) failures += run_file(entry.path(), n_parsed, n_rejected);
      }
    } else {
      failures += run_file(arg, n_parsed, n_rejected);
    }
  }
  std::printf("gguf corpus: %zu files, %zu parsed, %zu rejected, %d failures\n",
              n_parsed + n_rejected, n_parsed, n_rejected, failures);
  return failures == 0 && n_parsed + n_rejected > 0 ? 0 : 1;
}
