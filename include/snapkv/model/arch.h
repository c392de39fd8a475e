// The model architectures the reference engine runs (GGUF general.architecture), and what differs
// between them. Everything architecture-specific lives in model/; the cache library never sees it.
//
//   llama  Llama 2 / 3 / 3.1 / 3.2 / 3.3, Mistral, SmolLM2, TinyLlama: RoPE NORM (adjacent pairs),
//          optional rope_freqs.weight (Llama 3.1+ frequency factors, [n_rot/2]), optional
//          attention biases (attn_q/k/v/output.bias), optional output.weight (tied when absent).
//   qwen2  Qwen 2 / 2.5: RoPE NEOX (half-split pairs), required q/k/v biases, no output bias.
//   qwen3  Qwen 3: RoPE NEOX, no biases, per-head RMSNorm of q and k (attn_q_norm / attn_k_norm,
//          [head_dim]) before RoPE; head_dim from attention.key_length (may differ from
//          n_embd / n_heads).
// Facts taken from llama.cpp's model loader and graph builders (tensor names, shapes, required vs
// optional) and from its converter (which keys and tensors a converted file holds).
// Leaves out: MoE variants, vision variants (qwen2vl), every other architecture (an error lists
// the supported ones).
#pragma once

#include <string>
#include <string_view>

#include "snapkv/ops/rope.h"

namespace snapkv {

enum class ModelArch { llama, qwen2, qwen3 };

// Whether a tensor family may / must appear in a file of the architecture.
enum class Presence { absent, optional, required };

struct ArchInfo {
  ModelArch arch;
  const char* name;     // general.architecture value and key prefix ("llama" -> "llama.*")
  RopeKind rope;        // pair layout of the rotation
  Presence qkv_bias;    // blk.N.attn_q/k/v.bias
  Presence out_bias;    // blk.N.attn_output.bias
  Presence qk_norm;     // blk.N.attn_q_norm.weight, blk.N.attn_k_norm.weight [head_dim]
  Presence rope_freqs;  // rope_freqs.weight [n_rot / 2]
};

// The traits of a supported architecture.
const ArchInfo& arch_info(ModelArch arch);
// nullptr when `name` is not supported.
const ArchInfo* find_arch(std::string_view name);
// "llama, qwen2, qwen3": for error messages.
std::string supported_architectures();

}  // namespace snapkv
