// Next-token sampling from a logit vector: greedy, or temperature + top-p (nucleus) with a seed.
//
// Promises:
//  - temperature == 0 is greedy: the arg-max logit, ties to the lowest id; no random draw is made.
//  - temperature > 0: p_i = softmax(logits / temperature)_i computed in double; the candidates are
//    sorted by p descending (ties: lower id first) and the nucleus is the shortest prefix whose
//    mass reaches top_p (at least one token; top_p == 1 keeps every token). One uniform number
//    u in [0, 1) is drawn and the token whose cumulative interval of the renormalised nucleus holds
//    u is returned.
//  - Randomness: std::mt19937_64 seeded with `seed`; u = (next() >> 11) * 2^-53. Both are fully
//    specified by the C++ standard / this comment, so a seed gives the same tokens on every
//    platform and run. Exactly one 64-bit draw is consumed per non-greedy sample.
//  - Validation: temperature < 0 or non-finite, top_p outside (0, 1] -> std::invalid_argument at
//    construction; an empty logit vector or a NaN logit -> std::invalid_argument at sample time.
//    +inf logits are allowed (they share all the mass); -inf logits get probability 0.
//
// Leaves out: top-k, min-p, repetition penalties, grammar constraints.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

namespace snapkv {

struct SamplerConfig {
  float temperature = 0.0f;  // 0 = greedy
  float top_p = 1.0f;        // nucleus mass in (0, 1]
  uint64_t seed = 0;

  // Throws std::invalid_argument "[sampler] ..., got X, expected Y" on the first bad field.
  void validate() const;
};

// One candidate of the nucleus: token id and its renormalised probability.
struct Candidate {
  int32_t id = 0;
  double p = 0.0;
};

// Arg-max of logits, ties to the lowest id. Throws std::invalid_argument on an empty vector or a
// NaN logit.
int32_t argmax(std::span<const float> logits);  // logits: [n_vocab]

// The nucleus of softmax(logits / temperature) for top_p, sorted by probability descending (ties:
// lower id first), probabilities renormalised to sum to 1. temperature must be > 0.
std::vector<Candidate> nucleus(std::span<const float> logits, float temperature,
                               float top_p);  // logits: [n_vocab]

class Sampler {
 public:
  explicit Sampler(const SamplerConfig& config);

  // Next token id for logits: [n_vocab].
  int32_t sample(std::span<const float> logits);

  // Restart the random sequence (same as constructing anew with this seed).
  void reseed(uint64_t seed);

  const SamplerConfig& config() const { return config_; }

 private:
  SamplerConfig config_;
  std::mt19937_64 rng_;
};

}  // namespace snapkv
