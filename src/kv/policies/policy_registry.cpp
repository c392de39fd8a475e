// make_policy: maps CacheConfig::policy to its implementation; EvictionPolicy::score's default.
#include <string>

#include "kv/policies/policies.h"
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
    case PolicyKind::keydiff:
      return make_keydiff_policy(config);
    case PolicyKind::expected_attention:
      return make_expected_attention_policy(config);
    case PolicyKind::kvzip:
    case PolicyKind::kvzap:
    case PolicyKind::kvzip_plus:
    case PolicyKind::kvzap_snapkv:
      return make_kvzip_policy(config);
  }
  throw_invalid(
      "policy", "unknown policy", std::to_string(static_cast<int>(config.policy)),
      "full|snapkv|streaming|random|knorm|chunkkv|keydiff|expected_attention|kvzip|kvzip_plus|"
      "kvzap|kvzap_snapkv");
}

std::vector<float> EvictionPolicy::score(const SelectionInput& /*in*/) {
  throw_invalid("policy", "this policy has no per-row scores", std::string(to_string(kind())),
                "snapkv|knorm|keydiff|expected_attention|kvzip|kvzip_plus|kvzap|kvzap_snapkv");
}

}  // namespace snapkv
