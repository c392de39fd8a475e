// low_rank_factor (include/snapkv/kv/codecs/gear.h): the best rank-r approximation of a small
// matrix, from a cyclic Jacobi eigendecomposition of its Gram matrix in double. Self-contained (no
// LAPACK): d is a head dimension (tens to a few hundred), so the d x d eigenproblem is cheap next
// to the n x d products around it.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "snapkv/kv/codecs/gear.h"
#include "snapkv/util/error.h"

namespace snapkv {
namespace {

// Symmetric eigendecomposition by cyclic Jacobi rotations. m: [d][d] symmetric (destroyed: its
// diagonal ends as the eigenvalues), v: [d][d] out, column k the eigenvector of m[k][k].
void jacobi_eigen(std::vector<double>& m, std::vector<double>& v, size_t d) {
  v.assign(d * d, 0.0);
  for (size_t i = 0; i < d; ++i) v[i * d + i] = 1.0;
  double total = 0.0;
  for (double x : m) total += x * x;
  if (total == 0.0) return;
  for (int sweep = 0; sweep < 60; ++sweep) {
    double off = 0.0;
    for (size_t p = 0; p < d; ++p) {
      for (size_t q = p + 1; q < d; ++q) off += m[p * d + q] * m[p * d + q];
    }
    if (off <= 1e-30 * total) break;
    for (size_t p = 0; p < d; ++p) {
      for (size_t q = p + 1; q < d; ++q) {
        const double apq = m[p * d + q];
        if (apq == 0.0) continue;
        const double theta = (m[q * d + q] - m[p * d + p]) / (2.0 * apq);
        const double t =
            (theta >= 0 ? 1.0 : -1.0) / (std::fabs(theta) + std::sqrt(theta * theta + 1.0));
        const double c = 1.0 / std::sqrt(t * t + 1.0), s = t * c;
        for (size_t k = 0; k < d; ++k) {  // columns p, q of m
          const double mkp = m[k * d + p], mkq = m[k * d + q];
          m[k * d + p] = c * mkp - s * mkq;
          m[k * d + q] = s * mkp + c * mkq;
        }
        for (size_t k = 0; k < d; ++k) {  // rows p, q of m
          const double mpk = m[p * d + k], mqk = m[q * d + k];
          m[p * d + k] = c * mpk - s * mqk;
          m[q * d + k] = s * mpk + c * mqk;
        }
        for (size_t k = 0; k < d; ++k) {
          const double vkp = v[k * d + p], vkq = v[k * d + q];
          v[k * d + p] = c * vkp - s * vkq;
          v[k * d + q] = s * vkp + c * vkq;
        }
      }
    }
  }
}

}  // namespace

void low_rank_factor(float* a, float* b, const float* e, size_t n, size_t d, size_t r) {
  if (n == 0 || d == 0 || r == 0 || r >= d) {
    throw_invalid(
        "gear", "low-rank factor shape",
        "n " + std::to_string(n) + ", d " + std::to_string(d) + ", r " + std::to_string(r),
        "n >= 1 and 1 <= r < d");
  }
  std::vector<double> gram(d * d, 0.0);  // e^T e
  for (size_t i = 0; i < n; ++i) {
    const float* row = e + i * d;
    for (size_t p = 0; p < d; ++p) {
      const double x = row[p];
      if (x == 0.0) continue;
      for (size_t q = p; q < d; ++q) gram[p * d + q] += x * static_cast<double>(row[q]);
    }
  }
  for (size_t p = 0; p < d; ++p) {
    for (size_t q = 0; q < p; ++q) gram[p * d + q] = gram[q * d + p];
  }
  std::vector<double> vecs;
  jacobi_eigen(gram, vecs, d);
  std::vector<size_t> order(d);
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t x, size_t y) { return gram[x * d + x] > gram[y * d + y]; });
  // A direction whose eigenvalue is at rounding level of the largest carries no signal: zero it,
  // so that an all-zero (or rank-deficient) error gives exactly zero factors.
  const double top = std::max(gram[order[0] * d + order[0]], 0.0);
  for (size_t k = 0; k < r; ++k) {
    const size_t col = order[k];
    const bool keep = gram[col * d + col] > top * 1e-12 && gram[col * d + col] > 0.0;
    for (size_t c = 0; c < d; ++c)
      b[k * d + c] = keep ? static_cast<float>(vecs[c * d + col]) : 0.f;
  }
  for (size_t i = 0; i < n; ++i) {
    for (size_t k = 0; k < r; ++k) {
      double acc = 0.0;
      for (size_t c = 0; c < d; ++c) acc += static_cast<double>(e[i * d + c]) * b[k * d + c];
      a[i * r + k] = static_cast<float>(acc);
    }
  }
}

}  // namespace snapkv
