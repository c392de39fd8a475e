// SiLU / SwiGLU. swiglu takes exp from the active ISA level's exp_n (softmax.h: exp_approx, the
// same bits at every level), a chunk at a time on the stack; silu(x) is the plain std::exp form.
#include "snapkv/ops/activation.h"

#include <algorithm>
#include <cmath>

#include "snapkv/ops/softmax.h"

namespace snapkv {

float silu(float x) {
  return x / (1.0f + std::exp(-x));
}

void swiglu(float* out, const float* gate, const float* up, size_t n) {
  constexpr size_t kChunk = 256;
  float e[kChunk];  // exp(-gate) of the chunk
  for (size_t i0 = 0; i0 < n; i0 += kChunk) {
    const size_t m = std::min(kChunk, n - i0);
    for (size_t j = 0; j < m; ++j) e[j] = -gate[i0 + j];
    exp_n(e, e, m);
    for (size_t j = 0; j < m; ++j) out[i0 + j] = gate[i0 + j] / (1.0f + e[j]) * up[i0 + j];
  }
}

void swiglu_ref(float* out, const float* gate, const float* up, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const double g = gate[i];
    out[i] = static_cast<float>(g / (1.0 + std::exp(-g)) * static_cast<double>(up[i]));
  }
}

}  // namespace snapkv
