// snapkv: keep the sinks, optionally the observation window, and the rows the window attends to
// most (scores from kv/snapkv_score.h, pooled as configured).
#include "kv/policies.h"
#include "snapkv/kv/snapkv_score.h"

namespace snapkv {
namespace {

class SnapKVPolicy final : public EvictionPolicy {
 public:
  explicit SnapKVPolicy(const CacheConfig& config) : config_(config) {}
  PolicyKind kind() const override { return PolicyKind::snapkv; }
  std::vector<float> score(const SelectionInput& in) override {
    return snapkv_candidate_scores(in, config_);
  }
  SelectionResult select(const SelectionInput& in) override {
    SelectionResult result;
    result.scores = score(in);
    result.keep = select_rows(result.scores.data(), in.n_rows, selection_budget(in, config_),
                              config_.n_sink, kept_window_rows(config_, in.n_rows));
    return result;
  }
  std::unique_ptr<EvictionPolicy> clone() const override {
    return std::make_unique<SnapKVPolicy>(*this);
  }

 private:
  CacheConfig config_;
};

}  // namespace

std::unique_ptr<EvictionPolicy> make_snapkv_policy(const CacheConfig& config) {
  return std::make_unique<SnapKVPolicy>(config);
}

}  // namespace snapkv
