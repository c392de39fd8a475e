// The .kvc reader exerciser (kv/file/kvc_exercise.h).
#include "kv/file/kvc_exercise.h"

#include <cstring>
#include <span>
#include <vector>

#include "snapkv/kv/file/kvc_file.h"
#include "snapkv/kv/file/kvc_format.h"
#include "snapkv/util/error.h"

namespace snapkv::kvc {

bool exercise_reader(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> bytes(data, size);
  KvcContents contents;
  try {
    contents = decode_kvc(bytes, {}, false);
  } catch (const KvcError&) {
    return false;
  }
  const CacheDims& d = contents.dims;
  for (const LayerCache& cache : contents.caches) {
    const size_t rows = cache.size();
    std::vector<float> out(rows * d.head_dim);  // rows * head_dim fp16 values were in the file
    for (size_t h = 0; h < d.n_kv_heads; ++h) {
      cache.read_keys(h, out.data());
      cache.read_values(h, out.data());
    }
    // One decode-style attention step (bounded: n_heads comes from the header alone).
    if (d.n_heads * d.head_dim <= (size_t{1} << 20)) {
      std::vector<float> q(d.n_heads * d.head_dim, 0.5f), kv(d.n_kv_heads * d.head_dim, 0.25f);
      std::vector<float> att(q.size());
      cache.attend(att.data(), Tensor3{q.data(), d.n_heads, 1, d.head_dim},
                   Tensor3{kv.data(), d.n_kv_heads, 1, d.head_dim},
                   Tensor3{kv.data(), d.n_kv_heads, 1, d.head_dim});
    }
  }
  const KvcLabels labels{contents.model_name, contents.note};
  std::vector<uint8_t> again =
      encode_kvc(contents.fingerprint, contents.tokens, contents.caches, labels);
  if (contents.version != kKvcVersion) {
    // An older version is rewritten in the current one: that must read back to the same bytes.
    const KvcContents upgraded = decode_kvc(again, {}, true);
    SNAPKV_CHECK(encode_kvc(upgraded.fingerprint, upgraded.tokens, upgraded.caches,
                            {upgraded.model_name, upgraded.note}) == again);
    return true;
  }
  // Re-encoded, the contents give back the input (every field is kept, padding is zero).
  SNAPKV_CHECK(again.size() == size);
  std::memcpy(again.data() + offsetof(KvcHeader, checksum), data + offsetof(KvcHeader, checksum),
              sizeof(KvcHeader::checksum));
  SNAPKV_CHECK(std::memcmp(again.data(), data, size) == 0);
  return true;
}

}  // namespace snapkv::kvc
