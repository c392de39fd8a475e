// Random-weight Llama models built in memory, for benchmarks and tests that need a realistic shape
// but no trained weights (`snapkv bench`). The GGUF bytes are generated directly in the target
// format (F32, F16 or Q8_0) from a seeded generator: weights uniform with standard deviation
// 1/sqrt(fan_in) (embeddings: 1), norm weights 1. No tokenizer metadata is written.
#pragma once

#include <cstddef>
#include <cstdint>

#include "snapkv/gguf/gguf.h"

namespace snapkv {

struct RandomModelSpec {
  size_t n_layers = 16;
  size_t n_embd = 2048;
  size_t n_heads = 32;
  size_t n_kv_heads = 8;
  size_t n_ff = 5632;
  size_t n_vocab = 32000;
  size_t n_ctx = 16384 + 256;
  double rope_freq_base = 10000.0;
  gguf::TensorType type = gguf::TensorType::f16;  // matrices; norms are F32
  uint64_t seed = 1;

  // Throws std::invalid_argument for zero sizes, n_embd % n_heads, n_heads % n_kv_heads, an odd
  // head_dim, Q8_0 with n_embd or n_ff not a multiple of 32, or a type other than f32/f16/q8_0.
  void validate() const;
  // Bytes of the weight tensors as stored.
  size_t weight_bytes() const;
};

// The parsed in-memory GGUF of a random model (pass to LlamaModel's constructor).
gguf::File make_random_model(const RandomModelSpec& spec);

}  // namespace snapkv
