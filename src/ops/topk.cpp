// Deterministic top-k: nth_element + sort under a total order (value desc, index asc).
#include "snapkv/ops/topk.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>

#include "snapkv/util/error.h"

namespace snapkv {

void topk_indices(uint32_t* out, const float* scores, size_t n, size_t k) {
  if (k > n) throw_invalid("topk", "k exceeds n", std::to_string(k), "<= " + std::to_string(n));
  if (n > std::numeric_limits<uint32_t>::max()) {
    throw_invalid("topk", "too many scores", std::to_string(n), "<= 2^32 - 1");
  }
  for (size_t i = 0; i < n; ++i) {
    if (std::isnan(scores[i])) {
      throw_invalid("topk", "NaN score at index " + std::to_string(i), "NaN", "a number");
    }
  }
  if (k == 0) return;
  std::vector<uint32_t> order(n);
  std::iota(order.begin(), order.end(), 0u);
  const auto before = [scores](uint32_t a, uint32_t b) {
    return scores[a] > scores[b] || (scores[a] == scores[b] && a < b);
  };
  if (k < n) {
    std::nth_element(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k - 1), order.end(),
                     before);
  }
  std::sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k), before);
  std::copy_n(order.begin(), k, out);
}

std::vector<uint32_t> topk_indices(const float* scores, size_t n, size_t k) {
  std::vector<uint32_t> out(std::min(k, n));
  topk_indices(out.data(), scores, n, k);
  return out;
}

}  // namespace snapkv
