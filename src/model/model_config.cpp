// Model hyper-parameters from GGUF <arch>.* keys, with range and consistency checks.
#include "snapkv/model/model_config.h"

#include <cmath>
#include <string>

#include "snapkv/gguf/gguf.h"
#include "snapkv/util/error.h"
#include "snapkv/util/text.h"

namespace snapkv {
namespace {

// Reads one architecture's keys; `arch` is both the error component and the key prefix.
class KeyReader {
 public:
  KeyReader(const gguf::File& file, const char* arch) : file_(file), arch_(arch) {}

  std::string key(const std::string& suffix) const { return arch_ + "." + suffix; }
  bool has(const std::string& suffix) const { return file_.has_key(key(suffix)); }

  [[noreturn]] void bad(const std::string& suffix, const std::string& what, const std::string& got,
                        const std::string& expected) const {
    throw_runtime(arch_, "key '" + key(suffix) + "' " + what, got, expected);
  }

  // A required (or defaulted) integer key in [1, max].
  size_t count(const std::string& suffix, uint64_t max, const size_t* fallback = nullptr) const {
    if (!has(suffix)) {
      if (fallback != nullptr) return *fallback;
      throw_runtime(arch_, "key '" + key(suffix) + "' missing", "absent",
                    "a positive integer (required for architecture " + arch_ + ")");
    }
    const uint64_t v = file_.get_u64(key(suffix));
    if (v == 0 || v > max)
      bad(suffix, "out of range", std::to_string(v), "1.." + std::to_string(max));
    return static_cast<size_t>(v);
  }

  float real(const std::string& suffix, float fallback) const {
    return file_.get_f32_or(key(suffix), fallback);
  }

 private:
  const gguf::File& file_;
  std::string arch_;
};

// freq_scale from the rope.scaling.* keys (llama.cpp's reading: the type defaults to linear, a
// factor of 0 means none, the older rope.scale_linear key is the fallback for the factor).
double read_rope_scaling(const KeyReader& r, const gguf::File& file) {
  std::string type = "linear";
  if (r.has("rope.scaling.type")) type = file.get_string(r.key("rope.scaling.type"));
  if (type != "none" && type != "linear") {
    r.bad("rope.scaling.type", "not supported", "'" + type + "'",
          "'none' or 'linear' (yarn and longrope scaling are not implemented)");
  }
  if (r.has("rope.scaling.attn_factor")) {
    const float a = file.get_f32(r.key("rope.scaling.attn_factor"));
    if (a != 1.0f) {
      r.bad("rope.scaling.attn_factor", "not supported", std::to_string(a),
            "1 (attention-magnitude scaling is not implemented)");
    }
  }
  const char* factor_key =
      r.has("rope.scaling.factor") ? "rope.scaling.factor" : "rope.scale_linear";
  const float factor = r.real(factor_key, 0.0f);
  if (!std::isfinite(factor) || factor < 0.0f) {
    r.bad(factor_key, "out of range", std::to_string(factor), "finite and >= 0 (0 = no scaling)");
  }
  if (type == "none" || factor == 0.0f) return 1.0;
  return 1.0 / static_cast<double>(factor);
}

}  // namespace

void LlamaConfig::validate() const {
  const std::string a = arch_name();
  auto bad = [&](const std::string& suffix, const std::string& what, const std::string& got,
                 const std::string& expected) {
    throw_runtime(a, "key '" + a + "." + suffix + "' " + what, got, expected);
  };
  if (n_heads % n_kv_heads != 0) {
    bad("attention.head_count_kv", "does not divide " + a + ".attention.head_count",
        num(n_kv_heads), "a divisor of " + num(n_heads));
  }
  if (head_dim == 0) bad("attention.key_length", "out of range", "0", ">= 1");
  if (n_rot == 0 || n_rot % 2 != 0 || n_rot > head_dim) {
    bad("rope.dimension_count", "invalid rotary dimension", num(n_rot),
        "an even number in 2.." + num(head_dim));
  }
  if (!(rope_freq_base > 0.0) || !std::isfinite(rope_freq_base)) {
    bad("rope.freq_base", "out of range", std::to_string(rope_freq_base), "finite and > 0");
  }
  if (!(rope_freq_scale > 0.0) || !std::isfinite(rope_freq_scale)) {
    bad("rope.scaling.factor", "out of range", std::to_string(1.0 / rope_freq_scale),
        "finite and > 0");
  }
  if (!(rms_eps > 0.0f) || !std::isfinite(rms_eps) || rms_eps > 1.0f) {
    bad("attention.layer_norm_rms_epsilon", "out of range", std::to_string(rms_eps), "in (0, 1]");
  }
}

LlamaConfig read_llama_config(const gguf::File& file) {
  const std::string arch = file.get_string_or("general.architecture", "");
  const ArchInfo* info = find_arch(arch);
  if (info == nullptr) {
    throw_runtime("model", "key 'general.architecture' not supported",
                  arch.empty() ? std::string("absent") : "'" + arch + "'",
                  "one of " + supported_architectures());
  }
  const KeyReader r(file, info->name);
  LlamaConfig c;
  c.arch = info->arch;
  c.name = file.get_string_or("general.name", "");
  c.n_ctx = r.count("context_length", uint64_t{1} << 24);
  c.n_embd = r.count("embedding_length", uint64_t{1} << 16);
  c.n_layers = r.count("block_count", 1024);
  c.n_ff = r.count("feed_forward_length", uint64_t{1} << 18);
  c.n_heads = r.count("attention.head_count", 1024);
  c.n_kv_heads = r.count("attention.head_count_kv", 1024, &c.n_heads);
  if (r.has("expert_count") && file.get_u64(r.key("expert_count")) != 0) {
    r.bad("expert_count", "not supported (mixture of experts)",
          std::to_string(file.get_u64(r.key("expert_count"))), "absent or 0");
  }
  if (r.has("attention.key_length")) {
    c.head_dim = r.count("attention.key_length", 4096);
  } else {
    if (c.n_embd % c.n_heads != 0) {
      r.bad("embedding_length", "not divisible by " + r.key("attention.head_count"), num(c.n_embd),
            "a multiple of " + num(c.n_heads) + " (or an attention.key_length key)");
    }
    c.head_dim = c.n_embd / c.n_heads;
  }
  const size_t value_length = r.count("attention.value_length", 4096, &c.head_dim);
  if (value_length != c.head_dim) {
    r.bad("attention.value_length", "differs from the key length", num(value_length),
          num(c.head_dim) + " (one head_dim for keys and values)");
  }
  c.n_rot = r.count("rope.dimension_count", 1u << 16, &c.head_dim);
  c.rope_freq_base = r.real("rope.freq_base", 10000.0f);
  c.rope_freq_scale = read_rope_scaling(r, file);
  if (!r.has("attention.layer_norm_rms_epsilon")) {
    throw_runtime(info->name, "key '" + r.key("attention.layer_norm_rms_epsilon") + "' missing",
                  "absent", std::string("a float (required for architecture ") + info->name + ")");
  }
  c.rms_eps = file.get_f32(r.key("attention.layer_norm_rms_epsilon"));
  const gguf::TensorInfo* embd = file.find_tensor("token_embd.weight");
  if (r.has("vocab_size")) {
    c.n_vocab = r.count("vocab_size", uint64_t{1} << 22);
    if (embd != nullptr && embd->n_dims() == 2 && static_cast<size_t>(embd->dim(1)) != c.n_vocab) {
      r.bad("vocab_size", "disagrees with token_embd.weight", num(c.n_vocab),
            std::to_string(embd->dim(1)) + " rows");
    }
  } else {
    if (embd == nullptr) {
      throw_runtime(info->name, "tensor 'token_embd.weight' missing", "absent",
                    "{n_embd, n_vocab}");
    }
    const int64_t rows = embd->dim(1);
    if (rows <= 0 || rows > (int64_t{1} << 22)) {
      throw_runtime(info->name, "tensor 'token_embd.weight' vocabulary out of range",
                    std::to_string(rows), "1..4194304");
    }
    c.n_vocab = static_cast<size_t>(rows);
  }
  c.validate();
  return c;
}

}  // namespace snapkv
