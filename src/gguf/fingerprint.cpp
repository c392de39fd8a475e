// gguf::fingerprint (gguf/fingerprint.h): SHA-256 of the bytes before the data section, then of
// three fixed windows of every tensor's bytes.
#include "snapkv/gguf/fingerprint.h"

#include <algorithm>
#include <span>

#include "snapkv/util/sha256.h"

namespace snapkv::gguf {

std::array<uint8_t, 32> fingerprint(const File& file) {
  // data_offset() may point past the end of a file without tensors; the header is what exists.
  const size_t header = static_cast<size_t>(std::min<uint64_t>(file.data_offset(), file.size()));
  Sha256 hash;
  hash.update(std::span<const uint8_t>(file.bytes(), header));
  // Each tensor's first, middle and last kFingerprintWindow bytes (fewer, once each, for a small
  // tensor): a model with other weights and the same metadata differs there.
  for (const TensorInfo& t : file.tensors()) {
    if (t.data == nullptr || t.n_bytes == 0) continue;
    const uint64_t w = std::min<uint64_t>(kFingerprintWindow, t.n_bytes);
    const uint64_t starts[] = {0, (t.n_bytes - w) / 2, t.n_bytes - w};
    uint64_t covered = 0;  // windows never overlap what was already taken
    for (const uint64_t start : starts) {
      const uint64_t from = std::max(start, covered), to = start + w;
      if (from >= to) continue;
      hash.update(std::span<const uint8_t>(t.data + from, static_cast<size_t>(to - from)));
      covered = to;
    }
  }
  return hash.finish();
}

}  // namespace snapkv::gguf
