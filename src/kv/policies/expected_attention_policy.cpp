// expected_attention: keep the sinks, optionally the window, and the rows with the largest
// expected attention of the modelled next queries times their value norm
// (kv/policies/row_scores.h). The query sample is the last min(n_window, window) true window
// queries of each head of the KV head's group, or, without queries, the last min(window, n_rows)
// keys (one proxy head). With the model's RoPE (SelectionInput::rope) each sample row is first
// mapped to its pre-RoPE form turned by the mean rotation of the next kFuturePositions positions
// (expected_future_queries), as the paper models the next queries; the positions are the
// candidates' (query row r of the window sits at candidate n_rows - n_window + r) and the next
// position follows the last candidate.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "kv/policies/policies.h"
#include "snapkv/kv/core/snapkv_score.h"
#include "snapkv/kv/policies/row_scores.h"
#include "snapkv/util/error.h"

namespace snapkv {
namespace {

// The paper's (and kvpress's) default horizon of the next queries.
constexpr size_t kFuturePositions = 512;

class ExpectedAttentionPolicy final
    : public RowScoringPolicy<ExpectedAttentionPolicy, PolicyKind::expected_attention> {
 public:
  using RowScoringPolicy::RowScoringPolicy;
  bool needs_values() const override { return true; }
  std::vector<float> score(const SelectionInput& in) override {
    if (in.values == nullptr) {
      throw_invalid("expected_attention", "values missing", "null", "[n_rows][head_dim] values");
    }
    const size_t d = in.head_dim;
    const bool true_queries = in.queries != nullptr && in.n_window > 0 && in.n_group > 0;
    if (true_queries && in.n_window > in.n_rows) {
      throw_invalid("expected_attention", "window queries exceed the candidates",
                    std::to_string(in.n_window), "<= n_rows = " + std::to_string(in.n_rows));
    }
    // The sample: [n_group][w][d], rows at candidate indices n_rows - w .. n_rows - 1.
    const size_t n_group = true_queries ? in.n_group : 1;
    const size_t w = std::min(true_queries ? in.n_window : in.n_rows, config_.window);
    std::vector<float> sample(n_group * w * d);
    for (size_t g = 0; g < n_group; ++g) {
      const float* rows = true_queries ? in.queries + (g * in.n_window + in.n_window - w) * d
                                       : in.keys + (in.n_rows - w) * d;
      std::copy_n(rows, w * d, sample.data() + g * w * d);
    }
    if (in.rope != nullptr) {
      const int64_t* sample_positions = in.positions + (in.n_rows - w);
      const int64_t next_position = in.positions[in.n_rows - 1] + 1;
      std::vector<float> mapped(w * d);
      for (size_t g = 0; g < n_group; ++g) {
        float* rows = sample.data() + g * w * d;
        expected_future_queries(mapped.data(), rows, sample_positions, w, d, next_position,
                                kFuturePositions, *in.rope);
        std::copy(mapped.begin(), mapped.end(), rows);
      }
    }
    std::vector<float> scores(in.n_rows);
    expected_attention_scores(scores.data(), in.keys, in.values, in.n_rows, d, sample.data(),
                              n_group, w, config_.n_sink);
    return scores;
  }
};

}  // namespace

std::unique_ptr<EvictionPolicy> make_expected_attention_policy(const CacheConfig& config) {
  return std::make_unique<ExpectedAttentionPolicy>(config);
}

}  // namespace snapkv
