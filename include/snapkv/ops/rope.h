// Rotary position embedding, llama.cpp's NORM type (the one general.architecture = llama uses):
// within each head, the adjacent pairs (x[2i], x[2i+1]) for 2i < n_rot are rotated by the angle
//   theta = pos * base^(-2i / n_rot)
// and dimensions >= n_rot are left alone. (Hugging Face's half-split layout is NOT this one.)
// Angles are computed in double from the integer position, so they stay exact at long contexts;
// a RopeTable holds cos/sin per (token, pair) once per chunk and is shared by every layer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace snapkv {

class RopeTable {
 public:
  // positions [n_tokens]; n_rot even, > 0; freq_base > 0.
  RopeTable(const int64_t* positions, size_t n_tokens, size_t n_rot, double freq_base);

  size_t n_tokens() const { return n_tokens_; }
  size_t n_rot() const { return n_rot_; }

  // x [n_tokens][n_heads][head_dim] (token-major, as a projection writes it), rotated in place.
  // head_dim >= n_rot.
  void apply(float* x, size_t n_heads, size_t head_dim) const;

 private:
  size_t n_tokens_ = 0;
  size_t n_rot_ = 0;
  std::vector<float> cos_;  // [n_tokens][n_rot / 2]
  std::vector<float> sin_;  // [n_tokens][n_rot / 2]
};

// Reference: one vector x [head_dim] at position pos, all arithmetic in double.
void rope_norm_ref(float* x, size_t head_dim, size_t n_rot, int64_t pos, double freq_base);

}  // namespace snapkv
