// keydiff: keep the sinks, optionally the window, and the keys least similar (cosine) to the mean
// direction of the candidates (kv/row_scores.h). Needs no queries.
#include "kv/policies.h"
#include "snapkv/kv/row_scores.h"
#include "snapkv/kv/snapkv_score.h"

namespace snapkv {
namespace {

class KeyDiffPolicy final : public EvictionPolicy {
 public:
  explicit KeyDiffPolicy(const CacheConfig& config) : config_(config) {}
  PolicyKind kind() const override { return PolicyKind::keydiff; }
  std::vector<float> score(const SelectionInput& in) override {
    std::vector<float> scores(in.n_rows);
    keydiff_scores(scores.data(), in.keys, in.n_rows, in.head_dim);
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
    return std::make_unique<KeyDiffPolicy>(*this);
  }

 private:
  CacheConfig config_;
};

}  // namespace

std::unique_ptr<EvictionPolicy> make_keydiff_policy(const CacheConfig& config) {
  return std::make_unique<KeyDiffPolicy>(config);
}

}  // namespace snapkv
