// Private constructors of the RowStore implementations (used by codec_registry.cpp and tests).
#pragma once

#include <cstddef>
#include <memory>

#include "snapkv/kv/config.h"
#include "snapkv/kv/row_store.h"

namespace snapkv {

// fp16 rows, kv/fp16_store.cpp.
std::unique_ptr<RowStore> make_fp16_row_store(size_t head_dim);

// KIVI 2/4-bit rows with an fp16 residual, kv/kivi_store.cpp.
// Validates kivi_group (>= 1), kivi_residual (a positive multiple of the group) and the codec.
std::unique_ptr<RowStore> make_kivi_row_store(const CacheConfig& config, RowRole role,
                                              size_t head_dim);
// The same with the bit width spelled out (2 or 4; anything else is an std::invalid_argument).
std::unique_ptr<RowStore> make_kivi_row_store(RowRole role, int bits, size_t head_dim, size_t group,
                                              size_t residual, size_t fp16_sinks);

}  // namespace snapkv
