// make_row_store: maps CacheConfig::codec to a RowStore implementation.
#include <string>

#include "kv/codecs/stores.h"
#include "snapkv/kv/core/row_store.h"
#include "snapkv/util/error.h"

namespace snapkv {

std::unique_ptr<RowStore> make_row_store(const CacheConfig& config, RowRole role, size_t head_dim) {
  if (head_dim == 0) throw_invalid("codec", "head_dim must be positive", "0", ">= 1");
  switch (config.codec) {
    case CodecKind::fp16:
      return make_fp16_row_store(head_dim);
    case CodecKind::kivi2:
    case CodecKind::kivi4:
    case CodecKind::kitty:
    case CodecKind::kivi42:
    case CodecKind::kivi24:
    case CodecKind::kivi32:
    case CodecKind::kivimix:
      return make_kivi_row_store(config, role, head_dim);
    case CodecKind::kivi2r:
    case CodecKind::kivi4r:
    case CodecKind::zipcacher:
    case CodecKind::kivi42r:
      return make_rotated_row_store(config, role, head_dim);
    case CodecKind::zipcache:
      return make_zipcache_row_store(config, role, head_dim);
    case CodecKind::gear:
      return make_gear_row_store(config, role, head_dim);
  }
  throw_invalid("codec", "unknown codec", std::to_string(static_cast<int>(config.codec)),
                "fp16|kivi2|kivi4|kivi2r|kivi4r|kitty|zipcache|gear|zipcacher|kivi42|kivi24|"
                "kivi42r|kivi32|kivimix");
}

std::unique_ptr<RowStore> load_row_store(const CacheConfig& config, RowRole role, size_t head_dim,
                                         std::span<const uint8_t> record) {
  if (head_dim == 0) throw_invalid("codec", "head_dim must be positive", "0", ">= 1");
  switch (config.codec) {
    case CodecKind::fp16:
      return load_fp16_row_store(head_dim, record);
    case CodecKind::kivi2:
    case CodecKind::kivi4:
    case CodecKind::kitty:
    case CodecKind::kivi42:
    case CodecKind::kivi24:
    case CodecKind::kivi32:
    case CodecKind::kivimix:
      return load_kivi_row_store(config, role, head_dim, record);
    case CodecKind::kivi2r:
    case CodecKind::kivi4r:
    case CodecKind::zipcacher:
    case CodecKind::kivi42r:
      return load_rotated_row_store(config, role, head_dim, record);
    case CodecKind::zipcache:
      return load_zipcache_row_store(config, role, head_dim, record);
    case CodecKind::gear:
      return load_gear_row_store(config, role, head_dim, record);
  }
  throw_invalid("codec", "unknown codec", std::to_string(static_cast<int>(config.codec)),
                "fp16|kivi2|kivi4|kivi2r|kivi4r|kitty|zipcache|gear|zipcacher|kivi42|kivi24|"
                "kivi42r|kivi32|kivimix");
}

}  // namespace snapkv
