// streaming (StreamingLLM): the first n_sink rows plus the most recent budget - n_sink rows.
// Positions are not renumbered (README.md, "Positions"): kept keys keep their original rotation.
#include <algorithm>

#include "kv/policies/policies.h"

namespace snapkv {
namespace {

class StreamingPolicy final : public EvictionPolicy {
 public:
  explicit StreamingPolicy(const CacheConfig& config) : config_(config) {}
  PolicyKind kind() const override { return PolicyKind::streaming; }
  SelectionResult select(const SelectionInput& in) override {
    SelectionResult result;
    const size_t n_keep = std::min(selection_budget(in, config_), in.n_rows);
    const size_t n_sink = std::min(config_.n_sink, n_keep);
    result.keep.reserve(n_keep);
    for (size_t i = 0; i < n_sink; ++i) result.keep.push_back(static_cast<uint32_t>(i));
    for (size_t i = in.n_rows - (n_keep - n_sink); i < in.n_rows; ++i) {
      result.keep.push_back(static_cast<uint32_t>(i));
    }
    return result;
  }
  std::unique_ptr<EvictionPolicy> clone() const override {
    return std::make_unique<StreamingPolicy>(*this);
  }

 private:
  CacheConfig config_;
};

}  // namespace

std::unique_ptr<EvictionPolicy> make_streaming_policy(const CacheConfig& config) {
  return std::make_unique<StreamingPolicy>(config);
}

}  // namespace snapkv
