// RMSNorm as in Llama: out[i] = x[i] / sqrt(mean(x^2) + eps) * weight[i].
// The mean of squares is accumulated in double (cheap next to the matmuls, and exact enough that
// the fast and reference versions differ only by the final fp32 roundings).
#pragma once

#include <cstddef>

namespace snapkv {

// out [n], x [n], weight [n]; out may alias x.
void rmsnorm(float* out, const float* x, const float* weight, size_t n, float eps);
// Row-wise over n_rows rows: out, x [n_rows][n], weight [n].
void rmsnorm_rows(float* out, const float* x, const float* weight, size_t n_rows, size_t n,
                  float eps);
// Reference: all arithmetic in double, one rounding at the end.
void rmsnorm_ref(float* out, const float* x, const float* weight, size_t n, float eps);

}  // namespace snapkv
