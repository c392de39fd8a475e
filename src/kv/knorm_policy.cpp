// knorm: keep the keys with the LOWEST L2 norm (low-norm keys tend to draw high attention), plus
// the sinks (and the window with keep_window). Its scores are the negated norms, so that, as for
// every policy, a higher score means "keep".
#include <cmath>
#include <vector>

#include "kv/policies.h"
#include "snapkv/kv/snapkv_score.h"
#include "snapkv/ops/dot.h"

namespace snapkv {
namespace {

class KnormPolicy final : public EvictionPolicy {
 public:
  explicit KnormPolicy(const CacheConfig& config) : config_(config) {}
  PolicyKind kind() const override { return PolicyKind::knorm; }
  std::vector<float> score(const SelectionInput& in) override {
    std::vector<float> scores(in.n_rows);
    for (size_t i = 0; i < in.n_rows; ++i) {
      const float* key = in.keys + i * in.head_dim;
      scores[i] = -std::sqrt(dot(key, key, in.head_dim));
    }
    return scores;
  }
  SelectionResult select(const SelectionInput& in) override {
    SelectionResult result;
    result.scores = score(in);
    result.keep = select_rows(result.scores.data(), in.n_rows, selection_budget(in, config_),
                              config_.n_sink, kept_window_rows(config_, in.n_rows));
    return result;
  }
  std::unique_ptr<EvictionPolicy> clone() const override {
    return std::make_unique<KnormPolicy>(*this);
  }

 private:
  CacheConfig config_;
};

}  // namespace

std::unique_ptr<EvictionPolicy> make_knorm_policy(const CacheConfig& config) {
  return std::make_unique<KnormPolicy>(config);
}

}  // namespace snapkv
