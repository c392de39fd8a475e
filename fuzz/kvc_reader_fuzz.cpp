// libFuzzer target for the .kvc prompt-cache reader: any byte string must either be rejected with
// a KvcError or parse, and then survive decoding, attention and a re-encode to the same bytes
// (kv/file/kvc_exercise.h). The checksum is not verified, so mutations reach the payload checks.
//
//   cmake -S . -B build-fuzz -DCMAKE_CXX_COMPILER=clang++ -DSNAPKV_BUILD_FUZZ=ON
//   cmake --build build-fuzz --target fuzz_kvc_reader
//   cp -r tests/kv/kvc_corpus /tmp/kvc-corpus    # libFuzzer adds new inputs to its corpus dir
//   build-fuzz/fuzz/fuzz_kvc_reader /tmp/kvc-corpus -max_total_time=300
#include <cstddef>
#include <cstdint>

#include "kv/file/kvc_exercise.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  (void)snapkv::kvc::exercise_reader(data, size);
  return 0;
}
