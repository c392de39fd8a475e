// Private constructors of the eviction policies (one file each), used by make_policy.
// Every policy's select() is const in effect: it keeps no state between calls, so the cache may
// call it for several KV heads at once from different threads.
#pragma once

#include <cstddef>
#include <memory>

#include "snapkv/kv/core/config.h"
#include "snapkv/kv/core/policy.h"
#include "snapkv/kv/core/snapkv_score.h"

namespace snapkv {

// A policy that scores every candidate (Derived::score) and keeps the sinks, the window with
// keep_window, and the top scores up to the call's budget: snapkv, knorm, keydiff,
// expected_attention. Derived holds no state beyond the config, so clone() copies it.
template <class Derived, PolicyKind Kind>
class RowScoringPolicy : public EvictionPolicy {
 public:
  explicit RowScoringPolicy(const CacheConfig& config) : config_(config) {}
  PolicyKind kind() const override { return Kind; }
  SelectionResult select(const SelectionInput& in) override {
    SelectionResult result;
    result.scores = score(in);
    result.keep = select_rows(result.scores.data(), in.n_rows, selection_budget(in, config_),
                              config_.n_sink, kept_window_rows(config_, in.n_rows));
    return result;
  }
  std::unique_ptr<EvictionPolicy> clone() const override {
    return std::make_unique<Derived>(static_cast<const Derived&>(*this));
  }

 protected:
  CacheConfig config_;
};

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
