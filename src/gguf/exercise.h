// Private: drives the reader over arbitrary bytes the way a user would, for the libFuzzer target
// (fuzz/gguf_reader_fuzz.cpp), its plain corpus driver and the corpus regression test.
#pragma once

#include <cstddef>
#include <cstdint>

namespace snapkv::gguf::detail {

// Parses [data, data + size); when that succeeds, reads every metadata value through the typed
// getters, dequantizes the first and last row of every tensor (a bounded prefix of each), and
// checks that writing the parsed file back and re-reading it gives identical bytes. Returns true
// when the bytes parse, false when the reader rejects them with snapkv::RuntimeError. Any other
// exception escapes and any broken invariant aborts: both are bugs for the fuzzer to report.
bool exercise_reader(const uint8_t* data, size_t size);

}  // namespace snapkv::gguf::detail
