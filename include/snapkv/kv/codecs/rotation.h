// Seeded randomized Hadamard rotation of KV rows, the "r" of the rotated KIVI codecs kivi2r and
// kivi4r (kv/core/config.h). Quantizing R x instead of x spreads an outlier channel's energy over
// every channel of its block, so the min/max groups of KIVI see flatter data; R is orthogonal, so
// q . k == (R q) . (R k) and sum_i w_i v_i == R^T (sum_i w_i R v_i): attention over rotated rows
// needs only the queries rotated and the weighted sum of values rotated back.
//
// Definition. head_dim d is split into blocks whose sizes are the powers of two of d's binary
// expansion, largest first (d = 32: one block of 32; d = 96: 64 then 32; d = 7: 4, 2, 1), so any
// head_dim works and a power of two is one full Hadamard transform. With s_c = +-1 random signs:
//   R x = B (s * x),   B = blockdiag(H_n1 / sqrt(n1), H_n2 / sqrt(n2), ...)
// where H_n is the Sylvester Hadamard matrix, H_n[i][j] = (-1)^popcount(i & j). B is symmetric and
// orthogonal, so R^T y = s * (B y). The signs come from splitmix64 seeded with `seed`: sign c is
// the top bit of the c-th output (1 -> -1). One rotation serves keys and values of every layer and
// head of a cache (CacheConfig::rotation_seed); only the seed is stored.
//
// Rounding. The fast transform is an in-place butterfly (log2 n stages of a +- b), then one
// multiply by the fp32 constant 1/sqrt(n). For a row x, ||fl(R x) - R x||_2 <= (L + 2) u ||x||_2
// to first order (L = log2 of the largest block, u = 2^-24): stage k adds at most u times its
// output's norm 2^(k/2) ||x||, later stages grow it by sqrt(2) each, and the scaling adds 2u.
// The dense double-precision matrix (hadamard_rotation_matrix) is the reference the tests hold
// the fast transform to.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace snapkv {

class HadamardRotation {
 public:
  // head_dim >= 1 (std::invalid_argument otherwise).
  HadamardRotation(size_t head_dim, uint64_t seed);

  size_t head_dim() const { return head_dim_; }
  uint64_t seed() const { return seed_; }
  // log2 of the largest block (the L of the rounding bound above).
  size_t stages() const { return stages_; }

  // In place, rows: [n][head_dim]. rotate: x -> R x; unrotate: y -> R^T y.
  void rotate(float* rows, size_t n) const;
  void unrotate(float* rows, size_t n) const;

  // The signs s: [head_dim], each +1 or -1.
  const std::vector<float>& signs() const { return signs_; }

 private:
  void blocks_transform(float* row) const;  // row -> B row

  size_t head_dim_;
  uint64_t seed_;
  size_t stages_ = 0;
  std::vector<float> signs_;         // [head_dim]
  std::vector<size_t> block_sizes_;  // powers of two, largest first, summing to head_dim
};

// Reference: R as a dense matrix in double, straight from the definition (O(head_dim^2)).
// Returns [head_dim][head_dim], row-major: (R x)[i] = sum_j R[i][j] x[j].
std::vector<double> hadamard_rotation_matrix(size_t head_dim, uint64_t seed);

}  // namespace snapkv
