// Plain (non-libFuzzer) driver for the .kvc reader: runs every file in the directories given
// through kv/file/kvc_exercise.h. Files named valid-* must parse and bad-* must be rejected; other
// names only have to not crash. Exit 0 when all hold, 1 otherwise. With --flip, every file is also
// run once with each single bit flipped (those only have to not crash): a deterministic sweep of
// the mutations a fuzzer tries first.
//
//   kvc_corpus_driver [--flip] tests/kv/kvc_corpus
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "kv/file/kvc_exercise.h"

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  int first = 1;
  const bool flip = argc > 1 && std::string(argv[1]) == "--flip";
  if (flip) ++first;
  if (argc <= first) {
    std::fprintf(stderr, "usage: %s [--flip] DIR...\n", argv[0]);
    return 2;
  }
  size_t n = 0, n_flips = 0;
  int failures = 0;
  for (int i = first; i < argc; ++i) {
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
      if (!flip) continue;
      std::vector<uint8_t> mutated = bytes;
      for (size_t bit = 0; bit < 8 * mutated.size(); ++bit) {
        mutated[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
        (void)snapkv::kvc::exercise_reader(mutated.data(), mutated.size());
        mutated[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
        ++n_flips;
      }
    }
  }
  std::printf("kvc corpus: %zu files, %zu single-bit flips, %d failures\n", n, n_flips, failures);
  return failures == 0 && n > 0 ? 0 : 1;
}
