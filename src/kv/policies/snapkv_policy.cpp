// snapkv: keep the sinks, optionally the observation window, and the rows the window attends to
// most (scores from kv/core/snapkv_score.h, pooled as configured).
#include "kv/policies/policies.h"
#include "snapkv/kv/core/snapkv_score.h"

namespace snapkv {
namespace {

class SnapKVPolicy final : public RowScoringPolicy<SnapKVPolicy, PolicyKind::snapkv> {
 public:
  using RowScoringPolicy::RowScoringPolicy;
  std::vector<float> score(const SelectionInput& in) override {
    return snapkv_candidate_scores(in, config_);
  }
  bool reads_key_tiles() const override { return true; }  // snapkv_candidate_scores takes either
};

}  // namespace

std::unique_ptr<EvictionPolicy> make_snapkv_policy(const CacheConfig& config) {
  return std::make_unique<SnapKVPolicy>(config);
}

}  // namespace snapkv
