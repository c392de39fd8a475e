// Hyper-parameters of a Llama-architecture model, read from a GGUF file's llama.* keys as
// llama.cpp reads them (general.architecture = "llama").
//
// Required keys: llama.context_length, llama.embedding_length, llama.block_count,
// llama.feed_forward_length, llama.attention.head_count, llama.attention.layer_norm_rms_epsilon.
// Optional: llama.attention.head_count_kv (default head_count), llama.rope.freq_base (10000),
// llama.rope.dimension_count (default head_dim), llama.vocab_size (must then equal the rows of
// token_embd.weight). Every value is checked: positive, within sane bounds, and consistent with the
// others (n_embd % n_heads == 0, n_heads % n_kv_heads == 0, even rotary dimension <= head_dim).
// Errors are snapkv::RuntimeError "[llama] key 'K' ..., got X, expected Y".
#pragma once

#include <cstddef>
#include <string>

#include "snapkv/kv/builder.h"

namespace snapkv::gguf {
class File;
}  // namespace snapkv::gguf

namespace snapkv {

struct LlamaConfig {
  std::string name;       // general.name ("" when absent)
  size_t n_ctx = 0;       // llama.context_length
  size_t n_embd = 0;      // llama.embedding_length
  size_t n_layers = 0;    // llama.block_count
  size_t n_ff = 0;        // llama.feed_forward_length
  size_t n_heads = 0;     // llama.attention.head_count
  size_t n_kv_heads = 0;  // llama.attention.head_count_kv
  size_t head_dim = 0;    // n_embd / n_heads
  size_t n_rot = 0;       // llama.rope.dimension_count
  double rope_freq_base = 10000.0;
  float rms_eps = 1e-5f;  // llama.attention.layer_norm_rms_epsilon
  size_t n_vocab = 0;     // llama.vocab_size, else rows of token_embd.weight

  ModelDims dims() const { return {n_layers, n_heads, n_kv_heads, head_dim}; }
  // Checks the consistency rules above; throws snapkv::RuntimeError naming the key.
  void validate() const;
};

// Reads and validates the config. n_vocab is taken from llama.vocab_size when present, else from
// token_embd.weight's ne[1] (the loader checks both agree). Throws snapkv::RuntimeError.
LlamaConfig read_llama_config(const gguf::File& file);

}  // namespace snapkv
