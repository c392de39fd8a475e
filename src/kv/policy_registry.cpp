// make_policy: maps CacheConfig::policy to its implementation.
#include <string>

#include "kv/policies.h"
#include "snapkv/util/error.h"

namespace snapkv {

std::unique_ptr<EvictionPolicy> make_policy(const CacheConfig& config, size_t layer_index) {
  config.validate();
  switch (config.policy) {
    case PolicyKind::full:
      return make_full_policy();
    case PolicyKind::snapkv:
      return make_snapkv_policy(config);
    case PolicyKind::streaming:
      return make_streaming_policy(config);
    case PolicyKind::random:
      return make_random_policy(config, layer_index);
    case PolicyKind::knorm:
      return make_knorm_policy(config);
    case PolicyKind::chunkkv:
      return make_chunkkv_policy(config);
    case PolicyKind::kvzip:
      return make_kvzip_policy(config);
  }
  throw_invalid("policy", "unknown policy", std::to_string(static_cast<int>(config.policy)),
                "full|snapkv|streaming|random|knorm|chunkkv|kvzip");
}

}  // namespace snapkv
