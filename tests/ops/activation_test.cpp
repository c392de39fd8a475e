// SwiGLU fast vs double reference.
#include "snapkv/ops/activation.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

namespace snapkv {
namespace {

TEST(Activation, SwigluMatchesReference) {
  std::vector<float> gate, up;
  for (float g = -30.0f; g <= 30.0f; g += 0.37f) {
    gate.push_back(g);
    up.push_back(0.5f - g / 7.0f);
  }
  std::vector<float> fast(gate.size()), ref(gate.size());
  swiglu(fast.data(), gate.data(), up.data(), gate.size());
  swiglu_ref(ref.data(), gate.data(), up.data(), gate.size());
  const float eps = std::numeric_limits<float>::epsilon();
  // expf (<= 1 ulp in glibc), one add, one divide, one multiply: <= 8 eps relative.
  for (size_t i = 0; i < fast.size(); ++i) {
    EXPECT_LE(std::fabs(fast[i] - ref[i]), 8 * eps * std::fabs(ref[i]) + 1e-30f) << gate[i];
  }
  EXPECT_EQ(silu(0.0f), 0.0f);
  EXPECT_NEAR(silu(1.0f), 1.0 / (1.0 + std::exp(-1.0)), 1e-7);
}

}  // namespace
}  // namespace snapkv
