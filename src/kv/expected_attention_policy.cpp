// expected_attention: keep the sinks, optionally the window, and the rows with the largest
// expected attention of the modelled next queries times their value norm (kv/row_scores.h).
// The query sample is the last min(n_window, window) true window queries of each head of the KV
// head's group, or, without queries, the last min(window, n_rows) keys (one proxy head).
#include <algorithm>

#include "kv/policies.h"
#include "snapkv/kv/row_scores.h"
#include "snapkv/kv/snapkv_score.h"
#include "snapkv/util/error.h"

namespace snapkv {
namespace {

class ExpectedAttentionPolicy final
    : public RowScoringPolicy<ExpectedAttentionPolicy, PolicyKind::expected_attention> {
 public:
  using RowScoringPolicy::RowScoringPolicy;
  bool needs_values() const override { return true; }
  std::vector<float> score(const SelectionInput& in) override {
    if (in.values == nullptr) {
      throw_invalid("expected_attention", "values missing", "null", "[n_rows][head_dim] values");
    }
    std::vector<float> scores(in.n_rows);
    const size_t d = in.head_dim;
    if (in.queries != nullptr && in.n_window > 0 && in.n_group > 0) {
      const size_t w = std::min(in.n_window, config_.window);
      std::vector<float> sample(in.n_group * w * d);  // [n_group][w][d]
      for (size_t g = 0; g < in.n_group; ++g) {
        std::copy_n(in.queries + (g * in.n_window + in.n_window - w) * d, w * d,
                    sample.data() + g * w * d);
      }
      expected_attention_scores(scores.data(), in.keys, in.values, in.n_rows, d, sample.data(),
                                in.n_group, w, config_.n_sink);
    } else {
      const size_t w = std::min(config_.window, in.n_rows);
      expected_attention_scores(scores.data(), in.keys, in.values, in.n_rows, d,
                                in.keys + (in.n_rows - w) * d, 1, w, config_.n_sink);
    }
    return scores;
  }
};

}  // namespace

std::unique_ptr<EvictionPolicy> make_expected_attention_policy(const CacheConfig& config) {
  return std::make_unique<ExpectedAttentionPolicy>(config);
}

}  // namespace snapkv
