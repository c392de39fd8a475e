// Private constructors of the eviction policies (one file each), used by make_policy.
// Every policy's select() is const in effect: it keeps no state between calls, so the cache may
// call it for several KV heads at once from different threads.
#pragma once

#include <cstddef>
#include <memory>

#include "snapkv/kv/config.h"
#include "snapkv/kv/policy.h"

namespace snapkv {

std::unique_ptr<EvictionPolicy> make_full_policy();
std::unique_ptr<EvictionPolicy> make_snapkv_policy(const CacheConfig& config);
std::unique_ptr<EvictionPolicy> make_streaming_policy(const CacheConfig& config);
std::unique_ptr<EvictionPolicy> make_random_policy(const CacheConfig& config, size_t layer_index);
std::unique_ptr<EvictionPolicy> make_knorm_policy(const CacheConfig& config);
std::unique_ptr<EvictionPolicy> make_chunkkv_policy(const CacheConfig& config);
std::unique_ptr<EvictionPolicy> make_keydiff_policy(const CacheConfig& config);
std::unique_ptr<EvictionPolicy> make_expected_attention_policy(const CacheConfig& config);
std::unique_ptr<EvictionPolicy> make_kvzip_policy(const CacheConfig& config);

}  // namespace snapkv
