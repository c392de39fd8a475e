// libFuzzer target for the GGUF reader: any byte string must either parse (and then survive every
// getter, row decoding and a write/re-read round trip) or be rejected with snapkv::RuntimeError.
// A crash, a sanitizer report, another exception type or a failed invariant is a finding.
//
//   cmake -S . -B build-fuzz -DCMAKE_CXX_COMPILER=clang++ -DSNAPKV_BUILD_FUZZ=ON
//   cmake --build build-fuzz --target fuzz_gguf_reader
//   cp -r tests/gguf/corpus /tmp/gguf-corpus    # libFuzzer adds new inputs to its corpus dir
//   build-fuzz/fuzz/fuzz_gguf_reader /tmp/gguf-corpus -max_total_time=300
#include <cstddef>
#include <cstdint>

#include "gguf/exercise.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  (void)snapkv::gguf::detail::exercise_reader(data, size);
  return 0;
}
