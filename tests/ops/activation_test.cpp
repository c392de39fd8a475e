// SwiGLU fast vs double reference (a derived bound) and vs its own formula (bit for bit).
#include "snapkv/ops/activation.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "snapkv/ops/softmax.h"

namespace snapkv {
namespace {

TEST(Activation, SwigluMatchesReference) {
  std::vector<float> gate, up;
  // several chunks of the fast path, through exp's cut-offs at about -87 and +89
  for (float g = -100.0f; g <= 100.0f; g += 0.0937f) {
    gate.push_back(g);
    up.push_back(0.5f - g / 7.0f);
  }
  std::vector<float> fast(gate.size()), ref(gate.size());
  swiglu(fast.data(), gate.data(), up.data(), gate.size());
  swiglu_ref(ref.data(), gate.data(), up.data(), gate.size());
  const float eps = std::numeric_limits<float>::epsilon();
  // exp_approx: relative error <= 2 eps (softmax.h); 1 + e adds at most that share of it plus
  // eps / 2, the divide and the multiply eps / 2 each: <= 3.5 eps relative, and the reference's own
  // rounding to float eps / 2: 4 eps, plus second-order terms (the 4.5). Where silu(g) underflows
  // (g below about -87) both are below 1e-30.
  for (size_t i = 0; i < fast.size(); ++i) {
    EXPECT_LE(std::fabs(fast[i] - ref[i]), 4.5f * eps * std::fabs(ref[i]) + 1e-30f) << gate[i];
  }
  // The formula the fast path evaluates, term by term with the scalar exp_approx: the same bits at
  // every ISA level (ctest -L isa runs this suite at each), also in place (out aliasing gate).
  std::vector<float> in_place = gate;
  swiglu(in_place.data(), in_place.data(), up.data(), gate.size());
  for (size_t i = 0; i < fast.size(); ++i) {
    const float want = gate[i] / (1.0f + exp_approx(-gate[i])) * up[i];
    EXPECT_EQ(fast[i], want) << gate[i];
    EXPECT_EQ(in_place[i], want) << gate[i];
  }
  EXPECT_EQ(silu(0.0f), 0.0f);
  EXPECT_NEAR(silu(1.0f), 1.0 / (1.0 + std::exp(-1.0)), 1e-7);
}

}  // namespace
}  // namespace snapkv
