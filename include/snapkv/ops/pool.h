// 1-D pooling with stride 1 and same-length output, as SnapKV smooths its scores. The kernel is
// odd (k = 2h + 1) and centred: out[i] looks at in[i-h .. i+h].
// Edges: max_pool1d uses only the in-range part of the window (padding acts as -inf);
// avg_pool1d divides the in-range sum by the full k (padding counts as zeros), as torch's
// avg_pool1d(count_include_pad=True) with padding k/2 does in the SnapKV reference code.
// Kernel 1 is the identity. Direct O(n*k) loops: k is small (<= a few dozen) in practice.
// causal_max_pool1d is the one-sided variant: out[i] looks at in[i-k+1 .. i] (the rows before i
// that exist), so a peak passes its value to the k - 1 rows after it and to none before it.
#pragma once

#include <cstddef>

namespace snapkv {

// out, in: [n], distinct buffers; kernel odd and >= 1 (std::invalid_argument otherwise).
void max_pool1d(float* out, const float* in, size_t n, size_t kernel);
void avg_pool1d(float* out, const float* in, size_t n, size_t kernel);
void causal_max_pool1d(float* out, const float* in, size_t n, size_t kernel);

}  // namespace snapkv
