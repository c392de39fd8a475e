// SiLU / SwiGLU: scalar loops (the compiler vectorises them; expf dominates).
#include "snapkv/ops/activation.h"

#include <cmath>

namespace snapkv {

float silu(float x) {
  return x / (1.0f + std::exp(-x));
}

void swiglu(float* out, const float* gate, const float* up, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = silu(gate[i]) * up[i];
}

void swiglu_ref(float* out, const float* gate, const float* up, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const double g = gate[i];
    out[i] = static_cast<float>(g / (1.0 + std::exp(-g)) * static_cast<double>(up[i]));
  }
}

}  // namespace snapkv
