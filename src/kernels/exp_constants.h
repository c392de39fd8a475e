// The constants of exp_approx (ops/softmax.h), shared by the portable definition (exp_approx.cpp),
// the vector one (softmax_simd.cpp, which must perform the same IEEE operations in the same order)
// and ops' exp_fma. Internal linkage, so the per-ISA copies never share a symbol (kernels/isa.h).
#pragma once

namespace snapkv::ops_internal {
namespace {

constexpr float kLog2e = 1.44269504088896341f;
constexpr float kLn2Hi = 0.693359375f;     // exact in 9 bits: n * kLn2Hi has no rounding
constexpr float kLn2Lo = -2.12194440e-4f;  // ln 2 - kLn2Hi
constexpr float kLow = -87.33654f;         // ln(2^-126)
constexpr float kHigh = 88.72283f;         // ln(FLT_MAX)
// Cephes expf coefficients for e^r on [-ln2/2, ln2/2].
constexpr float kP0 = 1.9875691500e-4f, kP1 = 1.3981999507e-3f, kP2 = 8.3334519073e-3f,
                kP3 = 4.1665795894e-2f, kP4 = 1.6666665459e-1f, kP5 = 5.0000001201e-1f;

}  // namespace
}  // namespace snapkv::ops_internal

namespace snapkv {
// The portable polynomial exps (contracts in snapkv/ops/softmax.h; defined in exp_approx.cpp).
float exp_approx(float x);
float exp_fma(float x);
}  // namespace snapkv
