// The seeded randomized Hadamard rotation of kv/codecs/rotation.h: the fast butterfly against the
// dense double reference, exact orthogonality of the reference, and q.k and norms preserved by the
// fp32 transform within the (L + 2) u ||x|| bound derived in the header.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <stdexcept>
#include <vector>

#include "snapkv/kv/codecs/rotation.h"

namespace snapkv {
namespace {

constexpr double kU32 = 1.0 / 16777216.0;  // fp32 unit roundoff 2^-24
constexpr double kU64 = 1.0 / 9007199254740992.0;

std::vector<float> normal_rows(size_t n, size_t d, uint32_t seed, float outlier) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> x(n * d);
  for (size_t i = 0; i < x.size(); ++i) x[i] = g(rng) * (i % d == 3 ? outlier : 1.0f);
  return x;
}

double norm(const float* x, size_t d) {
  double s = 0;
  for (size_t c = 0; c < d; ++c) s += double(x[c]) * x[c];
  return std::sqrt(s);
}

constexpr size_t kDims[] = {1, 2, 7, 12, 16, 32, 64, 96, 128};

TEST(Rotation, DenseReferenceIsOrthogonal) {
  for (size_t d : kDims) {
    const std::vector<double> m = hadamard_rotation_matrix(d, 11);
    for (size_t i = 0; i < d; ++i) {
      for (size_t j = 0; j < d; ++j) {
        double dotp = 0;
        for (size_t k = 0; k < d; ++k) dotp += m[i * d + k] * m[j * d + k];
        // entries are +-1/sqrt(n) or 0: each product and sum rounds once in double
        ASSERT_NEAR(dotp, i == j ? 1.0 : 0.0, 4.0 * double(d + 2) * kU64) << d;
      }
    }
  }
}

TEST(Rotation, FastMatchesDenseReference) {
  for (size_t d : kDims) {
    const HadamardRotation rot(d, 5);
    const std::vector<double> m = hadamard_rotation_matrix(d, 5);
    std::vector<float> x = normal_rows(20, d, 3, 30.0f);
    const std::vector<float> orig = x;
    rot.rotate(x.data(), 20);
    for (size_t r = 0; r < 20; ++r) {
      double err2 = 0;
      for (size_t i = 0; i < d; ++i) {
        double ref = 0;
        for (size_t j = 0; j < d; ++j) ref += m[i * d + j] * orig[r * d + j];
        err2 += (x[r * d + i] - ref) * (x[r * d + i] - ref);
      }
      const double bound = double(rot.stages() + 3) * kU32 * norm(&orig[r * d], d);
      EXPECT_LE(std::sqrt(err2), bound) << "head_dim " << d << " row " << r;
    }
    // R^T (R x) == x up to two transforms' rounding
    rot.unrotate(x.data(), 20);
    for (size_t r = 0; r < 20; ++r) {
      double err2 = 0;
      for (size_t c = 0; c < d; ++c) {
        err2 += (double(x[r * d + c]) - orig[r * d + c]) * (double(x[r * d + c]) - orig[r * d + c]);
      }
      EXPECT_LE(std::sqrt(err2), 2.0 * double(rot.stages() + 3) * kU32 * norm(&orig[r * d], d))
          << d;
    }
  }
}

// (R q) . (R k) in fp32 rotation vs q . k: |diff| <= ||fl(Rq) - Rq|| ||Rk|| + ||Rq|| ||fl(Rk) -
// Rk||
// + second order = 2 (L + 3) u ||q|| ||k||; norms move by at most (L + 3) u ||x||.
TEST(Rotation, PreservesDotsAndNormsToFp32Rounding) {
  for (size_t d : kDims) {
    const HadamardRotation rot(d, 99);
    std::vector<float> q = normal_rows(8, d, 1, 1.0f), k = normal_rows(8, d, 2, 40.0f);
    const std::vector<float> q0 = q, k0 = k;
    rot.rotate(q.data(), 8);
    rot.rotate(k.data(), 8);
    const double a = double(rot.stages() + 3) * kU32;
    for (size_t i = 0; i < 8; ++i) {
      for (size_t j = 0; j < 8; ++j) {
        double before = 0, after = 0;
        for (size_t c = 0; c < d; ++c) {
          before += double(q0[i * d + c]) * k0[j * d + c];
          after += double(q[i * d + c]) * k[j * d + c];
        }
        EXPECT_NEAR(after, before, 2.0 * a * norm(&q0[i * d], d) * norm(&k0[j * d], d) * 1.001)
            << d;
      }
      EXPECT_NEAR(norm(&k[i * d], d), norm(&k0[i * d], d), a * norm(&k0[i * d], d)) << d;
    }
  }
}

// The rotation really mixes: an outlier channel's energy is spread over its whole block, and the
// seed picks the signs (same seed, same signs; another seed, other signs).
TEST(Rotation, SpreadsOutliersAndDependsOnTheSeed) {
  const size_t d = 64;
  std::vector<float> x(d, 0.0f);
  x[5] = 8.0f;
  const HadamardRotation rot(d, 1);
  rot.rotate(x.data(), 1);
  for (float v : x) EXPECT_FLOAT_EQ(std::fabs(v), 1.0f);  // 8 / sqrt(64)
  EXPECT_EQ(HadamardRotation(d, 1).signs(), rot.signs());
  EXPECT_NE(HadamardRotation(d, 2).signs(), rot.signs());
  size_t negative = 0;
  for (float s : rot.signs()) negative += s < 0;
  EXPECT_GT(negative, d / 4);  // about half (binomial(64, 1/2): 16..48 is beyond 4 sigma)
  EXPECT_LT(negative, 3 * d / 4);
  EXPECT_THROW(HadamardRotation(0, 1), std::invalid_argument);
}

}  // namespace
}  // namespace snapkv
