// Writes the GGUF fuzzing seeds (the generated malformed cases of
// tests/gguf/gguf_malformed_cases.h, named bad-<case>.gguf, and three valid files) into a
// directory; tests/gguf/corpus holds its output plus the inputs libFuzzer found (under fuzz/).
// Built with the tests as build/tests/write_gguf_seed_corpus; not a test.
//
//   build/tests/write_gguf_seed_corpus tests/gguf/corpus
#include <cstdio>
#include <exception>

#include "gguf/gguf_malformed_cases.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: write_gguf_seed_corpus DIR\n");
    return 2;
  }
  try {
    snapkv::gguf::testing::write_seed_corpus(argv[1]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "write_gguf_seed_corpus: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
