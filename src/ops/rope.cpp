// RoPE NORM (adjacent pairs): a cos/sin table per chunk, applied to every head of every token.
#include "snapkv/ops/rope.h"

#include <cmath>
#include <string>

#include "snapkv/util/error.h"

namespace snapkv {
namespace {
void check_dims(size_t n_rot, double freq_base) {
  if (n_rot == 0 || n_rot % 2 != 0) {
    throw_invalid("rope", "rotary dimension must be even and positive", std::to_string(n_rot),
                  "an even number > 0");
  }
  if (!(freq_base > 0.0) || !std::isfinite(freq_base)) {
    throw_invalid("rope", "frequency base out of range", std::to_string(freq_base),
                  "finite and > 0");
  }
}
}  // namespace

RopeTable::RopeTable(const int64_t* positions, size_t n_tokens, size_t n_rot, double freq_base)
    : n_tokens_(n_tokens), n_rot_(n_rot) {
  check_dims(n_rot, freq_base);
  if (n_tokens > 0 && positions == nullptr) {
    throw_invalid("rope", "null positions", "null", "[n_tokens] positions");
  }
  const size_t half = n_rot / 2;
  cos_.resize(n_tokens * half);
  sin_.resize(n_tokens * half);
  std::vector<double> inv_freq(half);
  for (size_t i = 0; i < half; ++i) {
    inv_freq[i] = std::pow(freq_base, -2.0 * static_cast<double>(i) / static_cast<double>(n_rot));
  }
  for (size_t t = 0; t < n_tokens; ++t) {
    if (positions[t] < 0) {
      throw_invalid("rope", "negative position", std::to_string(positions[t]), ">= 0");
    }
    const double pos = static_cast<double>(positions[t]);
    for (size_t i = 0; i < half; ++i) {
      const double theta = pos * inv_freq[i];
      cos_[t * half + i] = static_cast<float>(std::cos(theta));
      sin_[t * half + i] = static_cast<float>(std::sin(theta));
    }
  }
}

void RopeTable::apply(float* x, size_t n_heads, size_t head_dim) const {
  if (head_dim < n_rot_) {
    throw_invalid("rope", "head_dim smaller than the rotary dimension", std::to_string(head_dim),
                  ">= " + std::to_string(n_rot_));
  }
  const size_t half = n_rot_ / 2;
  for (size_t t = 0; t < n_tokens_; ++t) {
    const float* c = cos_.data() + t * half;
    const float* s = sin_.data() + t * half;
    for (size_t h = 0; h < n_heads; ++h) {
      float* v = x + (t * n_heads + h) * head_dim;
      for (size_t i = 0; i < half; ++i) {
        const float x0 = v[2 * i], x1 = v[2 * i + 1];
        v[2 * i] = x0 * c[i] - x1 * s[i];
        v[2 * i + 1] = x0 * s[i] + x1 * c[i];
      }
    }
  }
}

void rope_norm_ref(float* x, size_t head_dim, size_t n_rot, int64_t pos, double freq_base) {
  check_dims(n_rot, freq_base);
  if (head_dim < n_rot) {
    throw_invalid("rope", "head_dim smaller than the rotary dimension", std::to_string(head_dim),
                  ">= " + std::to_string(n_rot));
  }
  for (size_t i = 0; i < n_rot / 2; ++i) {
    const double theta =
        static_cast<double>(pos) *
        std::pow(freq_base, -2.0 * static_cast<double>(i) / static_cast<double>(n_rot));
    const double x0 = x[2 * i], x1 = x[2 * i + 1];
    x[2 * i] = static_cast<float>(x0 * std::cos(theta) - x1 * std::sin(theta));
    x[2 * i + 1] = static_cast<float>(x0 * std::sin(theta) + x1 * std::cos(theta));
  }
}

}  // namespace snapkv
