// Top-k selection with a total, deterministic order: larger value first, equal values broken
// towards the smaller index (the earlier position). O(n + k log k) via nth_element.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace snapkv {

// Writes the indices of the k largest scores to out, ordered by descending score, ties by
// ascending index.  out: [k], scores: [n], k <= n <= UINT32_MAX, no NaN in scores
// (std::invalid_argument otherwise). +-inf are ordinary values.
void topk_indices(uint32_t* out, const float* scores, size_t n, size_t k);
std::vector<uint32_t> topk_indices(const float* scores, size_t n, size_t k);

}  // namespace snapkv
