// RoPE NORM / NEOX: a cos/sin table per chunk, applied to every head of every token.
#include "snapkv/ops/rope.h"

#include <cmath>
#include <string>
#include <vector>

#include "snapkv/util/error.h"

namespace snapkv {
namespace {

void check_params(const RopeParams& p) {
  if (p.n_rot == 0 || p.n_rot % 2 != 0) {
    throw_invalid("rope", "rotary dimension must be even and positive", std::to_string(p.n_rot),
                  "an even number > 0");
  }
  if (!(p.freq_base > 0.0) || !std::isfinite(p.freq_base)) {
    throw_invalid("rope", "frequency base out of range", std::to_string(p.freq_base),
                  "finite and > 0");
  }
  if (!(p.freq_scale > 0.0) || !std::isfinite(p.freq_scale)) {
    throw_invalid("rope", "frequency scale out of range", std::to_string(p.freq_scale),
                  "finite and > 0");
  }
  if (p.freq_factors != nullptr) {
    for (size_t i = 0; i < p.n_rot / 2; ++i) {
      const float f = p.freq_factors[i];
      if (!(f > 0.0f) || !std::isfinite(f)) {
        throw_invalid("rope", "frequency factor " + std::to_string(i) + " out of range",
                      std::to_string(f), "finite and > 0");
      }
    }
  }
}

void check_head_dim(size_t head_dim, size_t n_rot) {
  if (head_dim < n_rot) {
    throw_invalid("rope", "head_dim smaller than the rotary dimension", std::to_string(head_dim),
                  ">= " + std::to_string(n_rot));
  }
}

// Angle per position unit of pair i: freq_scale * base^(-2i/n_rot) / factor[i]. With scale 1 and
// no factors this is exactly pow(base, -2i/n_rot) (multiplying / dividing by 1.0 is exact).
double inv_freq(const RopeParams& p, size_t i) {
  const double f = p.freq_factors != nullptr ? static_cast<double>(p.freq_factors[i]) : 1.0;
  return std::pow(p.freq_base, -2.0 * static_cast<double>(i) / static_cast<double>(p.n_rot)) *
         p.freq_scale / f;
}

// Index of the two elements of pair i in a head: adjacent (NORM) or half-split (NEOX).
inline size_t first_of(RopeKind kind, size_t i) {
  return kind == RopeKind::norm ? 2 * i : i;
}
inline size_t second_of(RopeKind kind, size_t i, size_t half) {
  return kind == RopeKind::norm ? 2 * i + 1 : i + half;
}

}  // namespace

RopeTable::RopeTable(const int64_t* positions, size_t n_tokens, size_t n_rot, double freq_base)
    : RopeTable(positions, n_tokens, RopeParams{n_rot, freq_base, 1.0, RopeKind::norm, nullptr}) {}

RopeTable::RopeTable(const int64_t* positions, size_t n_tokens, const RopeParams& params)
    : n_tokens_(n_tokens), n_rot_(params.n_rot), kind_(params.kind) {
  check_params(params);
  if (n_tokens > 0 && positions == nullptr) {
    throw_invalid("rope", "null positions", "null", "[n_tokens] positions");
  }
  const size_t half = n_rot_ / 2;
  cos_.resize(n_tokens * half);
  sin_.resize(n_tokens * half);
  std::vector<double> freq(half);
  for (size_t i = 0; i < half; ++i) freq[i] = inv_freq(params, i);
  for (size_t t = 0; t < n_tokens; ++t) {
    if (positions[t] < 0) {
      throw_invalid("rope", "negative position", std::to_string(positions[t]), ">= 0");
    }
    const double pos = static_cast<double>(positions[t]);
    for (size_t i = 0; i < half; ++i) {
      const double theta = pos * freq[i];
      cos_[t * half + i] = static_cast<float>(std::cos(theta));
      sin_[t * half + i] = static_cast<float>(std::sin(theta));
    }
  }
}

void RopeTable::apply(float* x, size_t n_heads, size_t head_dim) const {
  check_head_dim(head_dim, n_rot_);
  const size_t half = n_rot_ / 2;
  for (size_t t = 0; t < n_tokens_; ++t) {
    const float* c = cos_.data() + t * half;
    const float* s = sin_.data() + t * half;
    for (size_t h = 0; h < n_heads; ++h) {
      float* v = x + (t * n_heads + h) * head_dim;
      for (size_t i = 0; i < half; ++i) {
        const size_t a = first_of(kind_, i), b = second_of(kind_, i, half);
        const float x0 = v[a], x1 = v[b];
        v[a] = x0 * c[i] - x1 * s[i];
        v[b] = x0 * s[i] + x1 * c[i];
      }
    }
  }
}

void rope_ref(float* x, size_t head_dim, int64_t pos, const RopeParams& params) {
  check_params(params);
  check_head_dim(head_dim, params.n_rot);
  const size_t half = params.n_rot / 2;
  for (size_t i = 0; i < half; ++i) {
    const double theta = static_cast<double>(pos) * inv_freq(params, i);
    const size_t a = first_of(params.kind, i), b = second_of(params.kind, i, half);
    const double x0 = x[a], x1 = x[b];
    x[a] = static_cast<float>(x0 * std::cos(theta) - x1 * std::sin(theta));
    x[b] = static_cast<float>(x0 * std::sin(theta) + x1 * std::cos(theta));
  }
}

void rope_turn_rows(float* x, const int64_t* delta, size_t n_rows, size_t head_dim,
                    const RopeParams& params) {
  check_params(params);
  check_head_dim(head_dim, params.n_rot);
  if (n_rows > 0 && (x == nullptr || delta == nullptr)) {
    throw_invalid("rope", "null rows or deltas", "null", "[n_rows] rows and deltas");
  }
  const size_t half = params.n_rot / 2;
  std::vector<double> freq(half);
  for (size_t i = 0; i < half; ++i) freq[i] = inv_freq(params, i);
  for (size_t r = 0; r < n_rows; ++r) {
    float* v = x + r * head_dim;
    const double d = static_cast<double>(delta[r]);
    for (size_t i = 0; i < half; ++i) {
      const double theta = d * freq[i];
      const double c = std::cos(theta), sn = std::sin(theta);
      const size_t a = first_of(params.kind, i), b = second_of(params.kind, i, half);
      const double x0 = v[a], x1 = v[b];
      v[a] = static_cast<float>(x0 * c - x1 * sn);
      v[b] = static_cast<float>(x0 * sn + x1 * c);
    }
  }
}

void rope_norm_ref(float* x, size_t head_dim, size_t n_rot, int64_t pos, double freq_base) {
  rope_ref(x, head_dim, pos, RopeParams{n_rot, freq_base, 1.0, RopeKind::norm, nullptr});
}

}  // namespace snapkv
