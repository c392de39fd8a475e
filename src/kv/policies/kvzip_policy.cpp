// kvzip: keep the sinks, optionally the window, and the rows with the highest externally supplied
// scores (KVzip's reconstruction-pass maxima, computed by model/ and handed over through
// LayerCache::compress_with_scores), pooled as configured. kv/ never runs the model: without
// supplied scores (a decode-time re-selection, where only the recent queries exist) the policy
// scores as snapkv does, with the window's queries or proxy keys. score() gives the same ranking
// for head_allocation ada (ada-kvzip). Policy kvzap is the same selection over the scores of a
// learned surrogate (model/kvzap.h), which predicts the same attention probabilities; policy
// kvzap_snapkv mixes those scores with snapkv's window scores (real queries, or the proxy keys
// without them) before pooling (kv/core/prior_mix.h).
#include <algorithm>

#include "kv/policies/policies.h"
#include "snapkv/kv/core/prior_mix.h"
#include "snapkv/kv/core/snapkv_score.h"

namespace snapkv {
namespace {

class KvzipPolicy final : public EvictionPolicy {
 public:
  explicit KvzipPolicy(const CacheConfig& config) : config_(config) {}
  PolicyKind kind() const override { return config_.policy; }
  SelectionResult select(const SelectionInput& in) override {
    SelectionResult result;
    result.scores = score(in);
    result.keep = select_rows(result.scores.data(), in.n_rows, selection_budget(in, config_),
                              config_.n_sink, kept_window_rows(config_, in.n_rows));
    return result;
  }
  // The supplied scores pooled, or snapkv's without them. The reconstruction maxima are attention
  // probabilities, in [0, 1] for every head, so AdaKV can compare them across the heads.
  std::vector<float> score(const SelectionInput& in) override {
    if (in.external_scores == nullptr) return snapkv_candidate_scores(in, config_);
    std::vector<float> scores(in.n_rows);
    if (config_.policy != PolicyKind::kvzap_snapkv) {
      pool_scores(scores.data(), in.external_scores, in.n_rows, config_.pool, config_.kernel);
      return scores;
    }
    CacheConfig unpooled = config_;
    unpooled.pool = PoolKind::none;
    const std::vector<float> window = snapkv_candidate_scores(in, unpooled);
    // The proxy's keys score only the rows before the window (kv/core/snapkv_score.h).
    const size_t n_candidates = in.queries != nullptr || in.n_rows <= config_.window
                                    ? in.n_rows
                                    : in.n_rows - config_.window;
    std::vector<float> mixed(in.n_rows);
    mix_prior_scores(mixed.data(), in.external_scores, window.data(), in.n_rows, config_.n_sink,
                     n_candidates, config_.prior_weight);
    pool_scores(scores.data(), mixed.data(), in.n_rows, config_.pool, config_.kernel);
    return scores;
  }
  std::unique_ptr<EvictionPolicy> clone() const override {
    return std::make_unique<KvzipPolicy>(*this);
  }

 private:
  CacheConfig config_;
};

}  // namespace

std::unique_ptr<EvictionPolicy> make_kvzip_policy(const CacheConfig& config) {
  return std::make_unique<KvzipPolicy>(config);
}

}  // namespace snapkv
