// Activations of the Llama feed-forward block: SiLU and the SwiGLU gate.
#pragma once

#include <cstddef>

namespace snapkv {

// silu(x) = x / (1 + exp(-x))
float silu(float x);
// out[i] = silu(gate[i]) * up[i]; out may alias gate or up. gate, up, out [n].
void swiglu(float* out, const float* gate, const float* up, size_t n);
// Reference in double.
void swiglu_ref(float* out, const float* gate, const float* up, size_t n);

}  // namespace snapkv
