// What the model tests' error bounds and random inputs share: the fp32 unit roundoff, Higham's
// gamma(n) = n u / (1 - n u) for a sum of n terms, and seeded normal vectors.
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

namespace snapkv::test {

inline constexpr double kU = 1.0 / 16777216.0;  // fp32 unit roundoff 2^-24

inline double gamma(size_t n) {
  const double nu = static_cast<double>(n) * kU;
  return nu / (1.0 - nu);
}

// n values drawn from N(0, scale^2) with std::mt19937_64 seeded with `seed`.
inline std::vector<float> normal(size_t n, uint64_t seed, float scale) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

}  // namespace snapkv::test
