// Hyper-parameters of a decoder model (llama, qwen2, qwen3: see model/arch.h), read from a GGUF
// file's <arch>.* keys as llama.cpp reads them, <arch> being general.architecture.
//
// Required keys: <arch>.context_length, .embedding_length, .block_count, .feed_forward_length,
// .attention.head_count, .attention.layer_norm_rms_epsilon.
// Optional: .attention.head_count_kv (default head_count), .attention.key_length and
// .attention.value_length (default embedding_length / head_count; both must be equal: one
// head_dim for keys and values), .rope.freq_base (10000), .rope.dimension_count (default
// head_dim), .vocab_size (must then equal the rows of token_embd.weight), and RoPE scaling:
// .rope.scaling.type ("none" or "linear"; absent = linear, as llama.cpp) with .rope.scaling.factor
// (or the older .rope.scale_linear; 0 or absent = no scaling) applied as freq_scale = 1 / factor.
// Refused with a named error: any other scaling type (yarn, longrope), .rope.scaling.attn_factor
// != 1, .expert_count > 0 (mixture of experts). Every value is checked: positive, within sane
// bounds, and consistent with the others (n_heads % n_kv_heads == 0, even rotary dimension <=
// head_dim). Errors are snapkv::RuntimeError "[<arch>] key 'K' ..., got X, expected Y"; an
// unsupported architecture is "[model] key 'general.architecture' not supported" listing the
// supported ones.
#pragma once

#include <cstddef>
#include <string>

#include "snapkv/kv/core/builder.h"
#include "snapkv/model/arch.h"

namespace snapkv::gguf {
class File;
}  // namespace snapkv::gguf

namespace snapkv {

// (The name predates qwen2 / qwen3: it holds the config of every supported architecture.)
struct LlamaConfig {
  ModelArch arch = ModelArch::llama;  // general.architecture
  std::string name;                   // general.name ("" when absent)
  size_t n_ctx = 0;                   // <arch>.context_length
  size_t n_embd = 0;                  // <arch>.embedding_length
  size_t n_layers = 0;                // <arch>.block_count
  size_t n_ff = 0;                    // <arch>.feed_forward_length
  size_t n_heads = 0;                 // <arch>.attention.head_count
  size_t n_kv_heads = 0;              // <arch>.attention.head_count_kv
  size_t head_dim = 0;                // <arch>.attention.key_length, else n_embd / n_heads
  size_t n_rot = 0;                   // <arch>.rope.dimension_count
  double rope_freq_base = 10000.0;    // <arch>.rope.freq_base
  double rope_freq_scale = 1.0;       // 1 / <arch>.rope.scaling.factor (linear scaling)
  float rms_eps = 1e-5f;              // <arch>.attention.layer_norm_rms_epsilon
  size_t n_vocab = 0;                 // <arch>.vocab_size, else rows of token_embd.weight

  const ArchInfo& info() const { return arch_info(arch); }
  const char* arch_name() const { return info().name; }
  size_t q_dim() const { return n_heads * head_dim; }      // rows of attn_q.weight
  size_t kv_dim() const { return n_kv_heads * head_dim; }  // rows of attn_k/v.weight
  ModelDims dims() const { return {n_layers, n_heads, n_kv_heads, head_dim}; }
  // Checks the consistency rules above; throws snapkv::RuntimeError naming the key.
  void validate() const;
};

// Reads and validates the config. n_vocab is taken from <arch>.vocab_size when present, else from
// token_embd.weight's ne[1] (the loader checks both agree). Throws snapkv::RuntimeError.
LlamaConfig read_llama_config(const gguf::File& file);

}  // namespace snapkv
