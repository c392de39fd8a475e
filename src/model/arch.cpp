// The supported architectures (their traits) and the binding of a GGUF file's tensors to the
// engine's weight views, per architecture. Tensor names and shapes are llama.cpp's (ggml ne order,
// ne[0] contiguous):
//   token_embd.weight {n_embd, n_vocab}   output_norm.weight {n_embd}
//   output.weight {n_embd, n_vocab}       optional: tied to token_embd when absent
//   rope_freqs.weight {n_rot/2}           llama only, optional (Llama 3.1+ frequency factors)
//   blk.N.attn_norm.weight {n_embd}       blk.N.ffn_norm.weight {n_embd}
//   blk.N.attn_q.weight {n_embd, q_dim}   blk.N.attn_k/attn_v.weight {n_embd, kv_dim}
//   blk.N.attn_output.weight {q_dim, n_embd}
//   blk.N.attn_q.bias {q_dim}, blk.N.attn_k/attn_v.bias {kv_dim}   qwen2 required, llama optional
//   blk.N.attn_output.bias {n_embd}                                 llama optional
//   blk.N.attn_q_norm.weight / attn_k_norm.weight {head_dim}        qwen3 required
//   blk.N.ffn_gate/ffn_up.weight {n_embd, n_ff}   blk.N.ffn_down.weight {n_ff, n_embd}
// with q_dim = n_heads * head_dim and kv_dim = n_kv_heads * head_dim. Vectors must be F32 (as
// llama.cpp's converter writes every 1-D tensor).
#include <array>
#include <cmath>
#include <cstdint>
#include <string>
#include <unordered_set>

#include "model/arch_weights.h"
#include "snapkv/model/arch.h"
#include "snapkv/util/error.h"
#include "snapkv/util/text.h"

namespace snapkv {
namespace {

constexpr std::array<ArchInfo, 3> kArchs = {{
    {ModelArch::llama, "llama", RopeKind::norm, Presence::optional, Presence::optional,
     Presence::absent, Presence::optional},
    {ModelArch::qwen2, "qwen2", RopeKind::neox, Presence::required, Presence::absent,
     Presence::absent, Presence::absent},
    {ModelArch::qwen3, "qwen3", RopeKind::neox, Presence::absent, Presence::absent,
     Presence::required, Presence::absent},
}};

class TensorLoader {
 public:
  TensorLoader(const gguf::File& file, const char* arch) : file_(file), arch_(arch) {}

  bool has(const std::string& name) const { return file_.find_tensor(name) != nullptr; }
  size_t bytes() const { return bytes_; }

  // A matrix [rows][cols] (ggml ne {cols, rows}) in a weight type ops/gemm.h supports.
  WeightMatrix matrix(const std::string& name, size_t cols, size_t rows) {
    const gguf::TensorInfo& t = get(name);
    const int64_t expected[2] = {static_cast<int64_t>(cols), static_cast<int64_t>(rows)};
    gguf::check_shape(t, expected);
    WeightMatrix w;
    switch (t.type) {
      case gguf::TensorType::f32:
        w.type = WeightType::f32;
        break;
      case gguf::TensorType::f16:
        w.type = WeightType::f16;
        break;
      case gguf::TensorType::q8_0:
        w.type = WeightType::q8_0;
        break;
      case gguf::TensorType::bf16:
        w.type = WeightType::bf16;
        break;
      case gguf::TensorType::q4_0:
        w.type = WeightType::q4_0;
        break;
      case gguf::TensorType::q2_K:
        w.type = WeightType::q2_K;
        break;
      case gguf::TensorType::q3_K:
        w.type = WeightType::q3_K;
        break;
      case gguf::TensorType::q4_K:
        w.type = WeightType::q4_K;
        break;
      case gguf::TensorType::q5_K:
        w.type = WeightType::q5_K;
        break;
      case gguf::TensorType::q6_K:
        w.type = WeightType::q6_K;
        break;
    }
    w.data = t.data;
    w.rows = rows;
    w.cols = cols;
    if (t.data == nullptr || t.n_bytes != w.total_bytes()) {
      throw_runtime(arch_, "tensor '" + name + "' byte size mismatch", std::to_string(t.n_bytes),
                    num(w.total_bytes()));
    }
    bytes_ += t.n_bytes;
    return w;
  }

  // A vector [n] that must be F32.
  const float* vector_f32(const std::string& name, size_t n) {
    const gguf::TensorInfo& t = get(name);
    const int64_t expected[1] = {static_cast<int64_t>(n)};
    gguf::check_shape(t, expected);
    if (t.type != gguf::TensorType::f32) {
      throw_runtime(arch_, "tensor '" + name + "' type not supported",
                    std::string(gguf::tensor_type_name(t.type)), "f32 (1-D tensors)");
    }
    if (reinterpret_cast<uintptr_t>(t.data) % alignof(float) != 0) {
      throw_runtime(arch_, "tensor '" + name + "' data misaligned", "address % 4 != 0",
                    "4-byte aligned f32 data");
    }
    bytes_ += t.n_bytes;
    return reinterpret_cast<const float*>(t.data);
  }

  // A vector of a tensor family that the architecture may, must or must not have: nullptr when
  // absent and allowed. (A present tensor of an `absent` family is left unused, and
  // check_all_used names it.)
  const float* family_vector(const std::string& name, size_t n, Presence presence) {
    if (presence == Presence::absent) return nullptr;
    if (presence == Presence::optional && !has(name)) return nullptr;
    return vector_f32(name, n);
  }

  // Every tensor of the file must have been used (llama.cpp refuses unknown tensors too).
  void check_all_used() const {
    for (const gguf::TensorInfo& t : file_.tensors()) {
      if (used_.count(t.name) == 0) {
        throw_runtime(arch_, "tensor '" + t.name + "' not used by architecture " + arch_, "present",
                      "only the tensors of architecture " + arch_ + " (see model/arch.h)");
      }
    }
  }

 private:
  const gguf::TensorInfo& get(const std::string& name) {
    const gguf::TensorInfo* t = file_.find_tensor(name);
    if (t == nullptr) {
      throw_runtime(arch_, "tensor '" + name + "' missing", "absent",
                    "present for architecture " + arch_);
    }
    used_.insert(name);
    return *t;
  }

  const gguf::File& file_;
  std::string arch_;
  std::unordered_set<std::string> used_;
  size_t bytes_ = 0;
};

}  // namespace

const ArchInfo& arch_info(ModelArch arch) {
  for (const ArchInfo& a : kArchs) {
    if (a.arch == arch) return a;
  }
  SNAPKV_CHECK(false && "every ModelArch has an entry in kArchs");
  return kArchs[0];
}

const ArchInfo* find_arch(std::string_view name) {
  for (const ArchInfo& a : kArchs) {
    if (name == a.name) return &a;
  }
  return nullptr;
}

std::string supported_architectures() {
  std::string out;
  for (const ArchInfo& a : kArchs) {
    if (!out.empty()) out += ", ";
    out += a.name;
  }
  return out;
}

LlamaWeights bind_weights(const gguf::File& file, const LlamaConfig& c, size_t* weight_bytes) {
  const ArchInfo& info = c.info();
  TensorLoader loader(file, info.name);
  LlamaWeights w;
  w.token_embd = loader.matrix("token_embd.weight", c.n_embd, c.n_vocab);
  w.output_norm = loader.vector_f32("output_norm.weight", c.n_embd);
  if (loader.has("output.weight")) {
    w.output = loader.matrix("output.weight", c.n_embd, c.n_vocab);
  } else {
    w.output = w.token_embd;
    w.tied_output = true;
  }
  w.rope_freqs = loader.family_vector("rope_freqs.weight", c.n_rot / 2, info.rope_freqs);
  for (size_t i = 0; w.rope_freqs != nullptr && i < c.n_rot / 2; ++i) {
    const float f = w.rope_freqs[i];
    if (!(f > 0.0f) || !std::isfinite(f)) {  // the rotation angle is divided by it
      throw_runtime(info.name, "tensor 'rope_freqs.weight' entry " + num(i) + " out of range",
                    std::to_string(f), "finite and > 0");
    }
  }
  w.layers.resize(c.n_layers);
  // The biases come as a set: q, k and v together (llama.cpp reads each one alone, but no
  // converter writes a partial set, and a partial set is more likely a damaged file).
  const bool has_qkv_bias =
      info.qkv_bias == Presence::required ||
      (info.qkv_bias == Presence::optional && loader.has("blk.0.attn_q.bias"));
  const Presence qkv_bias = has_qkv_bias ? Presence::required : Presence::absent;
  for (size_t l = 0; l < c.n_layers; ++l) {
    const std::string p = "blk." + num(l) + ".";
    LlamaLayerWeights& lw = w.layers[l];
    lw.attn_norm = loader.vector_f32(p + "attn_norm.weight", c.n_embd);
    lw.wq = loader.matrix(p + "attn_q.weight", c.n_embd, c.q_dim());
    lw.wk = loader.matrix(p + "attn_k.weight", c.n_embd, c.kv_dim());
    lw.wv = loader.matrix(p + "attn_v.weight", c.n_embd, c.kv_dim());
    lw.wo = loader.matrix(p + "attn_output.weight", c.q_dim(), c.n_embd);
    lw.bq = loader.family_vector(p + "attn_q.bias", c.q_dim(), qkv_bias);
    lw.bk = loader.family_vector(p + "attn_k.bias", c.kv_dim(), qkv_bias);
    lw.bv = loader.family_vector(p + "attn_v.bias", c.kv_dim(), qkv_bias);
    lw.bo = loader.family_vector(p + "attn_output.bias", c.n_embd, info.out_bias);
    lw.q_norm = loader.family_vector(p + "attn_q_norm.weight", c.head_dim, info.qk_norm);
    lw.k_norm = loader.family_vector(p + "attn_k_norm.weight", c.head_dim, info.qk_norm);
    lw.ffn_norm = loader.vector_f32(p + "ffn_norm.weight", c.n_embd);
    lw.w_gate = loader.matrix(p + "ffn_gate.weight", c.n_embd, c.n_ff);
    lw.w_up = loader.matrix(p + "ffn_up.weight", c.n_embd, c.n_ff);
    lw.w_down = loader.matrix(p + "ffn_down.weight", c.n_ff, c.n_embd);
  }
  loader.check_all_used();
  *weight_bytes = loader.bytes();
  return w;
}

}  // namespace snapkv
