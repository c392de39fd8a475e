// Next-token sampling from a logit vector: greedy, or temperature + top-k + top-p (nucleus) +
// min-p with a seed, after a logit bias and repetition / presence / frequency penalties over the
// recent tokens.
//
// Promises:
//  - The logit bias comes first: each (id, bias) pair adds bias to logit id (-inf bans the token;
//    an id given twice adds both). An id outside the logits is std::invalid_argument at sample
//    time.
//  - Penalties come first and only over the last repeat_last_n tokens of the history passed to
//    sample() (each distinct token once): a logit l becomes l / repeat_penalty when l > 0, else
//    l * repeat_penalty; then l -= frequency_penalty * count + presence_penalty * (count > 0).
//    With no bias, repeat_penalty 1 and both others 0 the logits are used as given (no copy).
//  - temperature == 0 is greedy: the arg-max (penalised) logit, ties to the lowest id; no random
//    draw is made. top_k, top_p and min_p do not change a greedy choice.
//  - temperature > 0: p_i = softmax(logits / temperature)_i computed in double; the candidates are
//    sorted by p descending (ties: lower id first); top_k > 0 keeps the first top_k; the nucleus
//    is the shortest prefix of those whose mass reaches top_p of theirs (at least one token;
//    top_p == 1 keeps every one); min_p > 0 then drops candidates with p < min_p x the first's p.
//    One uniform number u in [0, 1) is drawn and the token whose cumulative interval of the
//    renormalised candidates holds u is returned.
//  - Randomness: std::mt19937_64 seeded with `seed`; u = (next() >> 11) * 2^-53. Both are fully
//    specified by the C++ standard / this comment, so a seed gives the same tokens on every
//    platform and run. Exactly one 64-bit draw is consumed per non-greedy sample.
//  - Validation: temperature < 0 or non-finite, top_p outside (0, 1], min_p outside [0, 1],
//    repeat_penalty not finite and > 0, presence / frequency penalties outside [-2, 2], a bias
//    id < 0, a NaN or +inf bias ->
//    std::invalid_argument at construction; an empty logit vector or a NaN logit ->
//    std::invalid_argument at sample time. +inf logits are allowed (they share all the mass);
//    -inf logits get probability 0.
//
// Leaves out: grammar constraints, typical / mirostat sampling.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <utility>
#include <vector>

namespace snapkv {

struct SamplerConfig {
  float temperature = 0.0f;  // 0 = greedy
  float top_p = 1.0f;        // nucleus mass in (0, 1]
  uint64_t seed = 0;
  size_t top_k = 0;                // 0 = every token
  float min_p = 0.0f;              // 0 = off
  float repeat_penalty = 1.0f;     // 1 = off
  size_t repeat_last_n = 64;       // history window of all three penalties (0 = none)
  float presence_penalty = 0.0f;   // [-2, 2]
  float frequency_penalty = 0.0f;  // [-2, 2]
  // Added to the logits before everything else: (token id, bias); -inf bans the token.
  std::vector<std::pair<int32_t, float>> logit_bias = {};

  // True when a penalty changes logits.
  bool penalizes() const;

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

// The candidates of softmax(logits / temperature) after top_k (0 = all), top_p and min_p (0 =
// off), sorted by probability descending (ties: lower id first), probabilities renormalised to
// sum to 1. temperature must be > 0.
std::vector<Candidate> nucleus(std::span<const float> logits, float temperature, float top_p,
                               size_t top_k = 0, float min_p = 0.0f);  // logits: [n_vocab]

// logits with the config's penalties applied over the last repeat_last_n tokens of `history`.
std::vector<float> penalized(std::span<const float> logits, std::span<const int32_t> history,
                             const SamplerConfig& config);

class Sampler {
 public:
  explicit Sampler(const SamplerConfig& config);

  // Next token id for logits: [n_vocab]; `history` holds the tokens so far (prompt and
  // generated, oldest first) for the penalties.
  int32_t sample(std::span<const float> logits, std::span<const int32_t> history = {});

  // Restart the random sequence (same as constructing anew with this seed).
  void reseed(uint64_t seed);

  const SamplerConfig& config() const { return config_; }

 private:
  SamplerConfig config_;
  std::mt19937_64 rng_;
};

}  // namespace snapkv
