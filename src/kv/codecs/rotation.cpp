// The seeded randomized Hadamard rotation (include/snapkv/kv/codecs/rotation.h): the fast in-place
// butterfly transform and its dense double-precision reference.
#include "snapkv/kv/codecs/rotation.h"

#include <bit>
#include <cmath>
#include <string>

#include "snapkv/util/error.h"

namespace snapkv {
namespace {

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

std::vector<float> make_signs(size_t head_dim, uint64_t seed) {
  std::vector<float> s(head_dim);
  uint64_t state = seed;
  for (float& v : s) v = (splitmix64(state) >> 63) != 0 ? -1.0f : 1.0f;
  return s;
}

// Powers of two of head_dim's binary expansion, largest first.
std::vector<size_t> make_blocks(size_t head_dim) {
  std::vector<size_t> b;
  for (size_t bit = std::bit_floor(head_dim); bit > 0; bit >>= 1) {
    if ((head_dim & bit) != 0) b.push_back(bit);
  }
  return b;
}

}  // namespace

HadamardRotation::HadamardRotation(size_t head_dim, uint64_t seed)
    : head_dim_(head_dim), seed_(seed) {
  if (head_dim == 0) throw_invalid("rotation", "head_dim must be positive", "0", ">= 1");
  signs_ = make_signs(head_dim, seed);
  block_sizes_ = make_blocks(head_dim);
  stages_ = static_cast<size_t>(std::countr_zero(block_sizes_.front()));
}

void HadamardRotation::blocks_transform(float* row) const {
  size_t offset = 0;
  for (const size_t n : block_sizes_) {
    float* x = row + offset;
    for (size_t half = 1; half < n; half <<= 1) {  // one butterfly stage per bit
      for (size_t i = 0; i < n; i += 2 * half) {
        for (size_t j = i; j < i + half; ++j) {
          const float a = x[j], b = x[j + half];
          x[j] = a + b;
          x[j + half] = a - b;
        }
      }
    }
    const float norm = 1.0f / std::sqrt(static_cast<float>(n));
    for (size_t j = 0; j < n; ++j) x[j] *= norm;
    offset += n;
  }
}

void HadamardRotation::rotate(float* rows, size_t n) const {
  for (size_t r = 0; r < n; ++r) {
    float* row = rows + r * head_dim_;
    for (size_t c = 0; c < head_dim_; ++c) row[c] *= signs_[c];
    blocks_transform(row);
  }
}

void HadamardRotation::unrotate(float* rows, size_t n) const {
  for (size_t r = 0; r < n; ++r) {
    float* row = rows + r * head_dim_;
    blocks_transform(row);
    for (size_t c = 0; c < head_dim_; ++c) row[c] *= signs_[c];
  }
}

std::vector<double> hadamard_rotation_matrix(size_t head_dim, uint64_t seed) {
  if (head_dim == 0) throw_invalid("rotation", "head_dim must be positive", "0", ">= 1");
  const std::vector<float> signs = make_signs(head_dim, seed);
  std::vector<double> m(head_dim * head_dim, 0.0);
  size_t offset = 0;
  for (const size_t n : make_blocks(head_dim)) {
    const double norm = 1.0 / std::sqrt(static_cast<double>(n));
    for (size_t i = 0; i < n; ++i) {
      for (size_t j = 0; j < n; ++j) {
        const double h = (std::popcount(i & j) % 2 == 0) ? 1.0 : -1.0;
        m[(offset + i) * head_dim + offset + j] = h * norm * signs[offset + j];
      }
    }
    offset += n;
  }
  return m;
}

}  // namespace snapkv
