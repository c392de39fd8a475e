// RMSNorm: fast (fp32 multiply, double sum of squares) and reference (all double).
#include "snapkv/ops/rmsnorm.h"

#include <cmath>
#include <string>

#include "snapkv/util/error.h"

namespace snapkv {
namespace {
void check_args(const float* out, const float* x, const float* weight, size_t n, float eps) {
  if (out == nullptr || x == nullptr || weight == nullptr) {
    throw_invalid("rmsnorm", "null pointer argument", "null", "non-null out, x, weight");
  }
  if (n == 0) throw_invalid("rmsnorm", "empty vector", "n = 0", "n > 0");
  if (!(eps >= 0.0f) || !std::isfinite(eps)) {
    throw_invalid("rmsnorm", "epsilon out of range", std::to_string(eps), "finite and >= 0");
  }
}
}  // namespace

void rmsnorm(float* out, const float* x, const float* weight, size_t n, float eps) {
  check_args(out, x, weight, n, eps);
  double sum_sq = 0.0;
  for (size_t i = 0; i < n; ++i) sum_sq += static_cast<double>(x[i]) * x[i];
  const float scale = static_cast<float>(
      1.0 / std::sqrt(sum_sq / static_cast<double>(n) + static_cast<double>(eps)));
  for (size_t i = 0; i < n; ++i) out[i] = x[i] * scale * weight[i];
}

void rmsnorm_rows(float* out, const float* x, const float* weight, size_t n_rows, size_t n,
                  float eps) {
  for (size_t r = 0; r < n_rows; ++r) rmsnorm(out + r * n, x + r * n, weight, n, eps);
}

void rmsnorm_ref(float* out, const float* x, const float* weight, size_t n, float eps) {
  check_args(out, x, weight, n, eps);
  double sum_sq = 0.0;
  for (size_t i = 0; i < n; ++i) sum_sq += static_cast<double>(x[i]) * x[i];
  const double scale = 1.0 / std::sqrt(sum_sq / static_cast<double>(n) + static_cast<double>(eps));
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<float>(x[i] * scale * weight[i]);
}

}  // namespace snapkv
