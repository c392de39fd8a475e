// The prior-window mixture of policy kvzap_snapkv (kv/core/prior_mix.h).
#include "snapkv/kv/core/prior_mix.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "snapkv/util/error.h"
#include "snapkv/util/text.h"

namespace snapkv {
namespace {

// 1 / the sum of s over rows [b, e), or 0 when that sum is 0 (the side is left out).
double inverse_sum(const float* s, size_t b, size_t e) {
  double t = 0.0;
  for (size_t i = b; i < e; ++i) t += static_cast<double>(s[i]);
  return t > 0.0 ? 1.0 / t : 0.0;
}

}  // namespace

void mix_prior_scores(float* out, const float* prior, const float* window, size_t n_rows,
                      size_t n_sink, size_t n_candidates, double weight) {
  if (n_candidates > n_rows) {
    throw_invalid("prior_mix", "candidates past the rows", num(n_candidates),
                  "<= n_rows = " + num(n_rows));
  }
  if (!(weight >= 0.0 && weight <= 1.0)) {
    throw_invalid("prior_mix", "weight out of range", std::to_string(weight), "[0, 1]");
  }
  for (size_t i = 0; i < n_rows; ++i) {
    if (!std::isfinite(prior[i]) || !std::isfinite(window[i]) || prior[i] < 0.0f ||
        window[i] < 0.0f) {
      throw_invalid(
          "prior_mix", "score at row " + num(i),
          std::to_string(prior[i]) + " (prior), " + std::to_string(window[i]) + " (window)",
          "finite and >= 0");
    }
  }
  const size_t b = std::min(n_sink, n_candidates);
  const double ip = inverse_sum(prior, b, n_candidates), iw = inverse_sum(window, b, n_candidates);
  double best_window = 0.0;
  for (size_t i = b; i < n_candidates; ++i) {
    best_window = std::max(best_window, static_cast<double>(window[i]) * iw);
  }
  for (size_t i = 0; i < n_rows; ++i) {
    const double wi = i < n_candidates ? static_cast<double>(window[i]) * iw : best_window;
    out[i] = static_cast<float>(weight * static_cast<double>(prior[i]) * ip + (1.0 - weight) * wi);
  }
}

}  // namespace snapkv
