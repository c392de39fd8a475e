// keydiff: keep the sinks, optionally the window, and the keys least similar (cosine) to the mean
// direction of the candidates (kv/policies/row_scores.h). Needs no queries.
#include "kv/policies/policies.h"
#include "snapkv/kv/core/snapkv_score.h"
#include "snapkv/kv/policies/row_scores.h"

namespace snapkv {
namespace {

class KeyDiffPolicy final : public RowScoringPolicy<KeyDiffPolicy, PolicyKind::keydiff> {
 public:
  using RowScoringPolicy::RowScoringPolicy;
  std::vector<float> score(const SelectionInput& in) override {
    std::vector<float> scores(in.n_rows);
    keydiff_scores(scores.data(), in.keys, in.n_rows, in.head_dim);
    return scores;
  }
};

}  // namespace

std::unique_ptr<EvictionPolicy> make_keydiff_policy(const CacheConfig& config) {
  return std::make_unique<KeyDiffPolicy>(config);
}

}  // namespace snapkv
