// Shared by the .kvc fuzz target (fuzz/kvc_reader_fuzz.cpp), its corpus driver and the corpus
// test: runs one byte string through the reader and, when it parses, through every use of the
// result. Private to kv/.
#pragma once

#include <cstddef>
#include <cstdint>

namespace snapkv::kvc {

// Returns true when the bytes parse (checksum not verified, so that the payload checks are
// reached) and false when the reader rejects them with a KvcError. A parsed file must then decode
// every row, attend through every layer, and re-encode to the same bytes (checksum aside); any
// other exception or a broken invariant aborts (a finding).
bool exercise_reader(const uint8_t* data, size_t size);

}  // namespace snapkv::kvc
