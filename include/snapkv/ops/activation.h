// Activations of the Llama feed-forward block: SiLU and the SwiGLU gate.
#pragma once

#include <cstddef>

namespace snapkv {

// silu(x) = x / (1 + exp(-x))
float silu(float x);
// out[i] = gate[i] / (1 + exp_approx(-gate[i])) * up[i] (softmax.h's exp, vectorised per ISA level
// with the same bits at every level); out may alias gate or up. gate, up, out [n].
void swiglu(float* out, const float* gate, const float* up, size_t n);
// Reference in double.
void swiglu_ref(float* out, const float* gate, const float* up, size_t n);

}  // namespace snapkv
