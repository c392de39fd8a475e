// gguf::fingerprint (gguf/fingerprint.h): SHA-256 of the bytes before the data section.
#include "snapkv/gguf/fingerprint.h"

#include <algorithm>
#include <span>

#include "snapkv/util/sha256.h"

namespace snapkv::gguf {

std::array<uint8_t, 32> fingerprint(const File& file) {
  // data_offset() may point past the end of a file without tensors; the header is what exists.
  const size_t header = static_cast<size_t>(std::min<uint64_t>(file.data_offset(), file.size()));
  return sha256(std::span<const uint8_t>(file.bytes(), header));
}

}  // namespace snapkv::gguf
