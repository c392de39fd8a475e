// Greedy and temperature + top-k + top-p + min-p sampling with penalties (semantics in
// include/snapkv/model/sampler.h).
#include "snapkv/model/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <unordered_map>

#include "snapkv/util/error.h"

namespace snapkv {
namespace {

constexpr std::string_view kComponent = "sampler";

void check_logits(std::span<const float> logits) {
  if (logits.empty()) throw_invalid(kComponent, "empty logits", "0 values", "n_vocab >= 1");
  if (logits.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    throw_invalid(kComponent, "too many logits", std::to_string(logits.size()), "at most 2^31-1");
  }
  for (size_t i = 0; i < logits.size(); ++i) {
    if (std::isnan(logits[i])) {
      throw_invalid(kComponent, "NaN logit at id " + std::to_string(i), "NaN", "a number");
    }
  }
}

// Uniform double in [0, 1) from the top 53 bits of one 64-bit draw.
double uniform01(std::mt19937_64& rng) {
  return static_cast<double>(rng() >> 11) * 0x1.0p-53;
}

}  // namespace

void SamplerConfig::validate() const {
  if (!std::isfinite(temperature) || temperature < 0.0f) {
    throw_invalid(kComponent, "temperature must be finite and non-negative",
                  std::to_string(temperature), ">= 0 (0 = greedy)");
  }
  if (!(top_p > 0.0f && top_p <= 1.0f)) {  // also rejects NaN
    throw_invalid(kComponent, "top_p out of range", std::to_string(top_p), "0 < top_p <= 1");
  }
  if (!(min_p >= 0.0f && min_p <= 1.0f)) {
    throw_invalid(kComponent, "min_p out of range", std::to_string(min_p), "0 <= min_p <= 1");
  }
  if (!(std::isfinite(repeat_penalty) && repeat_penalty > 0.0f)) {
    throw_invalid(kComponent, "repeat_penalty out of range", std::to_string(repeat_penalty),
                  "a finite number > 0 (1 = off)");
  }
  if (!(presence_penalty >= -2.0f && presence_penalty <= 2.0f)) {
    throw_invalid(kComponent, "presence_penalty out of range", std::to_string(presence_penalty),
                  "-2 <= presence_penalty <= 2");
  }
  if (!(frequency_penalty >= -2.0f && frequency_penalty <= 2.0f)) {
    throw_invalid(kComponent, "frequency_penalty out of range", std::to_string(frequency_penalty),
                  "-2 <= frequency_penalty <= 2");
  }
  for (const auto& [id, bias] : logit_bias) {
    if (id < 0) {
      throw_invalid(kComponent, "logit_bias token id is negative", std::to_string(id),
                    "a token id >= 0");
    }
    if (std::isnan(bias) || bias == std::numeric_limits<float>::infinity()) {
      throw_invalid(kComponent, "logit_bias of token " + std::to_string(id) + " is not a number",
                    std::to_string(bias), "a finite bias, or -inf to ban the token");
    }
  }
}

bool SamplerConfig::penalizes() const {
  return repeat_last_n > 0 &&
         (repeat_penalty != 1.0f || presence_penalty != 0.0f || frequency_penalty != 0.0f);
}

std::vector<float> penalized(std::span<const float> logits, std::span<const int32_t> history,
                             const SamplerConfig& config) {
  std::vector<float> out(logits.begin(), logits.end());
  if (!config.penalizes()) return out;
  const size_t n = std::min(history.size(), config.repeat_last_n);
  std::unordered_map<int32_t, size_t> counts;
  for (int32_t id : history.subspan(history.size() - n)) ++counts[id];
  for (const auto& [id, count] : counts) {
    if (id < 0 || static_cast<size_t>(id) >= out.size()) continue;  // not a logit's token
    float& l = out[static_cast<size_t>(id)];
    l = l > 0.0f ? l / config.repeat_penalty : l * config.repeat_penalty;
    l -= config.frequency_penalty * static_cast<float>(count) + config.presence_penalty;
  }
  return out;
}

int32_t argmax(std::span<const float> logits) {
  check_logits(logits);
  size_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i) {
    if (logits[i] > logits[best]) best = i;  // strict: ties keep the lower id
  }
  return static_cast<int32_t>(best);
}

std::vector<Candidate> nucleus(std::span<const float> logits, float temperature, float top_p,
                               size_t top_k, float min_p) {
  check_logits(logits);
  if (!(std::isfinite(temperature) && temperature > 0.0f)) {
    throw_invalid(kComponent, "nucleus needs a positive temperature", std::to_string(temperature),
                  "> 0");
  }
  if (!(top_p > 0.0f && top_p <= 1.0f)) {
    throw_invalid(kComponent, "top_p out of range", std::to_string(top_p), "0 < top_p <= 1");
  }
  if (!(min_p >= 0.0f && min_p <= 1.0f)) {
    throw_invalid(kComponent, "min_p out of range", std::to_string(min_p), "0 <= min_p <= 1");
  }
  const size_t n = logits.size();
  const double max_logit = *std::max_element(logits.begin(), logits.end());
  std::vector<Candidate> all(n);
  if (std::isinf(max_logit) && max_logit > 0) {
    // +inf logits share the whole mass equally; everything else gets 0.
    for (size_t i = 0; i < n; ++i) {
      all[i] = {static_cast<int32_t>(i), std::isinf(logits[i]) && logits[i] > 0 ? 1.0 : 0.0};
    }
  } else if (std::isinf(max_logit)) {
    throw_invalid(kComponent, "every logit is -inf", "-inf", "at least one finite logit");
  } else {
    const double inv_t = 1.0 / static_cast<double>(temperature);
    for (size_t i = 0; i < n; ++i) {
      // exp(-inf) = 0 for -inf logits; the max term is exp(0) = 1, so the sum is >= 1.
      all[i] = {static_cast<int32_t>(i), std::exp((logits[i] - max_logit) * inv_t)};
    }
  }
  double total = 0.0;
  for (const Candidate& c : all) total += c.p;
  std::sort(all.begin(), all.end(), [](const Candidate& a, const Candidate& b) {
    return a.p > b.p || (a.p == b.p && a.id < b.id);
  });
  if (top_k > 0 && top_k < n) {
    all.resize(top_k);
    total = 0.0;
    for (const Candidate& c : all) total += c.p;
  }
  // Shortest prefix whose mass reaches top_p of the total (top_p == 1 keeps every token, including
  // zero-probability ones, so the candidate list is then every token top_k left).
  size_t keep = all.size();
  if (top_p < 1.0f) {
    const double target = static_cast<double>(top_p) * total;
    double mass = 0.0;
    for (size_t i = 0; i < all.size(); ++i) {
      mass += all[i].p;
      if (mass >= target) {
        keep = i + 1;
        break;
      }
    }
  }
  all.resize(keep);
  if (min_p > 0.0f) {
    // Sorted: the candidates at or above min_p x the most probable one form a prefix (>= 1).
    const double floor_p = static_cast<double>(min_p) * all.front().p;
    size_t n_min = 1;
    while (n_min < all.size() && all[n_min].p >= floor_p) ++n_min;
    all.resize(n_min);
  }
  double kept_mass = 0.0;
  for (const Candidate& c : all) kept_mass += c.p;
  for (Candidate& c : all) c.p /= kept_mass;
  return all;
}

Sampler::Sampler(const SamplerConfig& config) : config_(config), rng_(config.seed) {
  config_.validate();
}

void Sampler::reseed(uint64_t seed) {
  config_.seed = seed;
  rng_.seed(seed);
}

int32_t Sampler::sample(std::span<const float> logits, std::span<const int32_t> history) {
  std::vector<float> adjusted;
  if (!config_.logit_bias.empty()) {
    check_logits(logits);
    adjusted.assign(logits.begin(), logits.end());
    for (const auto& [id, bias] : config_.logit_bias) {
      if (static_cast<size_t>(id) >= adjusted.size()) {
        throw_invalid(kComponent, "logit_bias names a token outside the vocabulary",
                      std::to_string(id), "an id < n_vocab = " + std::to_string(adjusted.size()));
      }
      adjusted[static_cast<size_t>(id)] += bias;
    }
    logits = adjusted;
  }
  if (config_.penalizes() && !history.empty()) {
    check_logits(logits);
    adjusted = penalized(logits, history, config_);
    logits = adjusted;
  }
  if (config_.temperature == 0.0f) return argmax(logits);
  const std::vector<Candidate> candidates =
      nucleus(logits, config_.temperature, config_.top_p, config_.top_k, config_.min_p);
  const double u = uniform01(rng_);
  double cumulative = 0.0;
  for (const Candidate& c : candidates) {
    cumulative += c.p;
    if (u < cumulative) return c.id;
  }
  // Rounding left the cumulative sum just under 1 and u above it: the last token with mass.
  for (auto it = candidates.rbegin(); it != candidates.rend(); ++it) {
    if (it->p > 0.0) return it->id;
  }
  return candidates.front().id;
}

}  // namespace snapkv
