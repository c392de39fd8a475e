// Rotary position embedding in llama.cpp's two layouts:
//  - NORM (general.architecture = llama): within each head, the adjacent pairs (x[2i], x[2i+1])
//    for 2i < n_rot are rotated;
//  - NEOX (qwen2, qwen3): the pairs (x[i], x[i + n_rot/2]) for i < n_rot/2 (the "half-split"
//    layout of Hugging Face's rotate_half).
// Pair i turns by the angle
//   theta_i = pos * freq_scale * base^(-2i / n_rot) / freq_factor[i]
// where freq_scale is 1 / (linear rope scaling factor) and freq_factor (Llama 3.1's rope_freqs
// tensor, [n_rot/2]) defaults to 1. Dimensions >= n_rot are left alone. Angles are computed in
// double from the integer position, so they stay exact at long contexts; a RopeTable holds
// cos/sin per (token, pair) once per chunk and is shared by every layer.
// Leaves out: YaRN / LongRoPE (ramped or per-length factors) and attention-magnitude scaling.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace snapkv {

enum class RopeKind { norm, neox };

struct RopeParams {
  size_t n_rot = 0;                     // even, > 0
  double freq_base = 10000.0;           // finite, > 0
  double freq_scale = 1.0;              // finite, > 0 (1 / linear scaling factor)
  RopeKind kind = RopeKind::norm;       // pair layout
  const float* freq_factors = nullptr;  // [n_rot / 2], each finite and > 0; nullptr = all 1
};

class RopeTable {
 public:
  // positions [n_tokens]; NORM layout, no scaling (the original Llama convention).
  RopeTable(const int64_t* positions, size_t n_tokens, size_t n_rot, double freq_base);
  // positions [n_tokens]; throws std::invalid_argument for bad params (named).
  RopeTable(const int64_t* positions, size_t n_tokens, const RopeParams& params);

  size_t n_tokens() const { return n_tokens_; }
  size_t n_rot() const { return n_rot_; }
  RopeKind kind() const { return kind_; }

  // x [n_tokens][n_heads][head_dim] (token-major, as a projection writes it), rotated in place.
  // head_dim >= n_rot.
  void apply(float* x, size_t n_heads, size_t head_dim) const;

 private:
  size_t n_tokens_ = 0;
  size_t n_rot_ = 0;
  RopeKind kind_ = RopeKind::norm;
  std::vector<float> cos_;  // [n_tokens][n_rot / 2]
  std::vector<float> sin_;  // [n_tokens][n_rot / 2]
};

// Turns rows already rotated at some positions by further delta[r] positions, either sign (RoPE
// composes: a row rotated at p and turned by p' - p is the row rotated at p'), for re-indexing a
// cache's stored keys. x [n_rows][head_dim], delta [n_rows]; all arithmetic in double, one
// rounding to fp32 per value. Throws std::invalid_argument for bad params (named).
void rope_turn_rows(float* x, const int64_t* delta, size_t n_rows, size_t head_dim,
                    const RopeParams& params);

// Reference: one vector x [head_dim] at position pos, NORM layout, all arithmetic in double.
void rope_norm_ref(float* x, size_t head_dim, size_t n_rot, int64_t pos, double freq_base);
// Reference for any params: one vector x [head_dim] at position pos, all arithmetic in double.
void rope_ref(float* x, size_t head_dim, int64_t pos, const RopeParams& params);

}  // namespace snapkv
