// random: sinks (and the window with keep_window) kept, the other slots drawn uniformly without
// replacement. The draw is a pure function of (config.seed, layer_index, kv_head, the number of
// candidates, the last candidate's position): deterministic, independent of thread scheduling,
// and different across layers, heads and compressions.
#include <cstdint>
#include <vector>

#include "kv/policies/policies.h"
#include "snapkv/kv/core/snapkv_score.h"

namespace snapkv {
namespace {

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

class RandomPolicy final : public EvictionPolicy {
 public:
  RandomPolicy(const CacheConfig& config, size_t layer_index)
      : config_(config), layer_index_(layer_index) {}
  PolicyKind kind() const override { return PolicyKind::random; }
  SelectionResult select(const SelectionInput& in) override {
    const uint64_t last_position = in.positions != nullptr && in.n_rows > 0
                                       ? static_cast<uint64_t>(in.positions[in.n_rows - 1])
                                       : 0;
    const uint64_t salts[4] = {static_cast<uint64_t>(layer_index_),
                               static_cast<uint64_t>(in.kv_head), static_cast<uint64_t>(in.n_rows),
                               last_position};
    uint64_t state = config_.seed;
    for (const uint64_t salt : salts) {
      state ^= salt + 0x9E3779B97F4A7C15ull + (state << 6) + (state >> 2);
      splitmix64(state);
    }
    // Uniform random keys in [0, 1) with 24 bits: top-k of i.i.d. keys is a uniform sample
    // (exact ties fall to the earlier row, a negligible bias).
    std::vector<float> keys(in.n_rows);
    for (float& k : keys) {
      k = static_cast<float>(splitmix64(state) >> 40) * (1.0f / 16777216.0f);
    }
    SelectionResult result;
    result.keep = select_rows(keys.data(), in.n_rows, selection_budget(in, config_), config_.n_sink,
                              kept_window_rows(config_, in.n_rows));
    return result;
  }
  std::unique_ptr<EvictionPolicy> clone() const override {
    return std::make_unique<RandomPolicy>(*this);
  }

 private:
  CacheConfig config_;
  size_t layer_index_;
};

}  // namespace

std::unique_ptr<EvictionPolicy> make_random_policy(const CacheConfig& config, size_t layer_index) {
  return std::make_unique<RandomPolicy>(config, layer_index);
}

}  // namespace snapkv
