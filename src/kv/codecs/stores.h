// Private constructors of the RowStore implementations (used by codec_registry.cpp and tests).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>

#include "snapkv/kv/core/config.h"
#include "snapkv/kv/core/row_store.h"

namespace snapkv {

// fp16 rows, kv/codecs/fp16_store.cpp.
std::unique_ptr<RowStore> make_fp16_row_store(size_t head_dim);
// An fp16 store from its .kvc record (kv/file/kvc_format.h), kv/codecs/fp16_store.cpp.
std::unique_ptr<RowStore> load_fp16_row_store(size_t head_dim, std::span<const uint8_t> record);

// KIVI 2/4-bit rows with an fp16 residual, kv/codecs/kivi/kivi_store.cpp; also kitty (2-bit KIVI
// whose keys keep config.kitty_channels channels per block fp16). Validates kivi_group (>= 1),
// kivi_residual (a positive multiple of the group), kitty_channels (kitty: 1 .. head_dim - 1) and
// the codec.
std::unique_ptr<RowStore> make_kivi_row_store(const CacheConfig& config, RowRole role,
                                              size_t head_dim);
// The same with the bit width spelled out (2 or 4; anything else is an std::invalid_argument).
// boost_channels: key channels per block kept fp16 (kitty; 0 = plain KIVI; keys only).
// mixed_keys: kivimix's keys (bits 2, head_dim >= 2, no boost; keys only): the head_dim/2 widest
// channels of each block at 4 bits (kv/codecs/kivi.h "Mixed key widths").
std::unique_ptr<RowStore> make_kivi_row_store(RowRole role, int bits, size_t head_dim, size_t group,
                                              size_t residual, size_t fp16_sinks,
                                              size_t boost_channels = 0, bool mixed_keys = false);
// A KIVI store (parameters from config, as make_kivi_row_store) from its .kvc record.
std::unique_ptr<RowStore> load_kivi_row_store(const CacheConfig& config, RowRole role,
                                              size_t head_dim, std::span<const uint8_t> record);

// A store of Hadamard-rotated rows (kv/codecs/rotation.h) around `inner`, which holds the
// rotated rows (the rotated roles of kivi2r, kivi4r, kivi42r, zipcacher),
// kv/codecs/rotated_store.cpp.
std::unique_ptr<RowStore> make_rotated_row_store(std::unique_ptr<RowStore> inner,
                                                 uint64_t rotation_seed);
// The same from its .kvc record: the seed (checked against rotation_seed), then the inner store's
// record, which load_inner reads.
std::unique_ptr<RowStore> load_rotated_row_store(
    uint64_t rotation_seed, std::span<const uint8_t> record,
    const std::function<std::unique_ptr<RowStore>(std::span<const uint8_t>)>& load_inner);
// GEAR: a KIVI store at config.gear_bits with the corrections of include/snapkv/kv/codecs/gear.h,
// kv/codecs/kivi/kivi_store.cpp. Validates gear_rank (< head_dim), gear_sparse and the KIVI
// parameters.
std::unique_ptr<RowStore> make_gear_row_store(const CacheConfig& config, RowRole role,
                                              size_t head_dim);
std::unique_ptr<RowStore> load_gear_row_store(const CacheConfig& config, RowRole role,
                                              size_t head_dim, std::span<const uint8_t> record);

// ZipCache-adapted mixed precision rows (include/snapkv/kv/codecs/zipcache.h),
// kv/codecs/zipcache_store.cpp.
std::unique_ptr<RowStore> make_zipcache_row_store(const CacheConfig& config, RowRole role,
                                                  size_t head_dim);
std::unique_ptr<RowStore> load_zipcache_row_store(const CacheConfig& config, RowRole role,
                                                  size_t head_dim, std::span<const uint8_t> record);

}  // namespace snapkv
