// knorm: keep the keys with the LOWEST L2 norm (low-norm keys tend to draw high attention), plus
// the sinks (and the window with keep_window). Its scores are the negated norms, so that, as for
// every policy, a higher score means "keep".
#include <cmath>
#include <vector>

#include "kv/policies/policies.h"
#include "snapkv/kv/core/snapkv_score.h"
#include "snapkv/ops/dot.h"

namespace snapkv {
namespace {

class KnormPolicy final : public RowScoringPolicy<KnormPolicy, PolicyKind::knorm> {
 public:
  using RowScoringPolicy::RowScoringPolicy;
  std::vector<float> score(const SelectionInput& in) override {
    std::vector<float> scores(in.n_rows);
    for (size_t i = 0; i < in.n_rows; ++i) {
      const float* key = in.keys + i * in.head_dim;
      scores[i] = -std::sqrt(dot(key, key, in.head_dim));
    }
    return scores;
  }
};

}  // namespace

std::unique_ptr<EvictionPolicy> make_knorm_policy(const CacheConfig& config) {
  return std::make_unique<KnormPolicy>(config);
}

}  // namespace snapkv
