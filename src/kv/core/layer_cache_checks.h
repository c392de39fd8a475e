// Input checks shared by LayerCache's files (layer_cache.cpp, layer_cache_attend.cpp): the shape
// of a tensor handed to the cache and the range of its values. Private to kv/.
#pragma once

#include <cstddef>
#include <string>

#include "snapkv/kv/core/layer_cache.h"
#include "snapkv/util/text.h"

namespace snapkv::layer_cache_checks {

inline constexpr const char* kComponent = "layer_cache";

// t is [dim0][S >= 1][head_dim] with non-null data; a mismatch is the named invalid_argument.
void check_tensor(const Tensor3& t, const char* name, size_t dim0, const char* dim0_name,
                  size_t head_dim);

// Every value finite; for k and v (rows the cache stores, in fp16 or a codec built on fp16 ranges)
// also within the binary16 range, so a key that fits fp32 but not fp16 is the same named error for
// every codec instead of an infinity that turns scores into zeros or NaN.
void check_values(const Tensor3& t, const char* name, bool stored_in_fp16);

}  // namespace snapkv::layer_cache_checks
