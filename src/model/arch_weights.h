// Private to model/: binding a GGUF file's tensors to LlamaWeights for the file's architecture
// (model/arch.h says which tensors each architecture has). Defined in src/model/arch.cpp.
#pragma once

#include <cstddef>

#include "snapkv/gguf/gguf.h"
#include "snapkv/model/llama.h"
#include "snapkv/model/model_config.h"

namespace snapkv {

// Views of every tensor the architecture uses, straight into the file's mapping (nothing is
// copied). A missing required tensor, a wrong shape or type, a misaligned f32 vector, or a tensor
// the architecture does not use is a snapkv::RuntimeError naming the tensor. *weight_bytes gets the
// bytes of all bound tensors as stored.
LlamaWeights bind_weights(const gguf::File& file, const LlamaConfig& config, size_t* weight_bytes);

}  // namespace snapkv
