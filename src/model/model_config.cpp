// Llama hyper-parameters from GGUF llama.* keys, with range and consistency checks.
#include "snapkv/model/model_config.h"

#include <cmath>
#include <string>

#include "snapkv/gguf/gguf.h"
#include "snapkv/util/error.h"

namespace snapkv {
namespace {

constexpr const char* kComponent = "llama";

std::string num(size_t v) {
  return std::to_string(v);
}

[[noreturn]] void bad_key(const std::string& key, const std::string& what, const std::string& got,
                          const std::string& expected) {
  throw_runtime(kComponent, "key '" + key + "' " + what, got, expected);
}

// A required (or defaulted) integer key in [1, max].
size_t read_count(const gguf::File& file, const std::string& key, uint64_t max,
                  const size_t* fallback = nullptr) {
  if (!file.has_key(key)) {
    if (fallback != nullptr) return *fallback;
    throw_runtime(kComponent, "key '" + key + "' missing", "absent",
                  "a positive integer (required for architecture llama)");
  }
  const uint64_t v = file.get_u64(key);
  if (v == 0 || v > max)
    bad_key(key, "out of range", std::to_string(v), "1.." + std::to_string(max));
  return static_cast<size_t>(v);
}

}  // namespace

void LlamaConfig::validate() const {
  if (n_embd % n_heads != 0) {
    bad_key("llama.embedding_length", "not divisible by llama.attention.head_count", num(n_embd),
            "a multiple of " + num(n_heads));
  }
  if (n_heads % n_kv_heads != 0) {
    bad_key("llama.attention.head_count_kv", "does not divide llama.attention.head_count",
            num(n_kv_heads), "a divisor of " + num(n_heads));
  }
  if (head_dim != n_embd / n_heads) {
    bad_key("llama.embedding_length", "inconsistent head_dim", num(head_dim),
            num(n_embd / n_heads));
  }
  if (n_rot == 0 || n_rot % 2 != 0 || n_rot > head_dim) {
    bad_key("llama.rope.dimension_count", "invalid rotary dimension", num(n_rot),
            "an even number in 2.." + num(head_dim));
  }
  if (!(rope_freq_base > 0.0) || !std::isfinite(rope_freq_base)) {
    bad_key("llama.rope.freq_base", "out of range", std::to_string(rope_freq_base),
            "finite and > 0");
  }
  if (!(rms_eps > 0.0f) || !std::isfinite(rms_eps) || rms_eps > 1.0f) {
    bad_key("llama.attention.layer_norm_rms_epsilon", "out of range", std::to_string(rms_eps),
            "in (0, 1]");
  }
}

LlamaConfig read_llama_config(const gguf::File& file) {
  const std::string arch = file.get_string_or("general.architecture", "");
  if (arch != "llama") {
    throw_runtime(kComponent, "key 'general.architecture' not supported",
                  arch.empty() ? std::string("absent") : "'" + arch + "'", "'llama'");
  }
  LlamaConfig c;
  c.name = file.get_string_or("general.name", "");
  c.n_ctx = read_count(file, "llama.context_length", uint64_t{1} << 24);
  c.n_embd = read_count(file, "llama.embedding_length", uint64_t{1} << 16);
  c.n_layers = read_count(file, "llama.block_count", 1024);
  c.n_ff = read_count(file, "llama.feed_forward_length", uint64_t{1} << 18);
  c.n_heads = read_count(file, "llama.attention.head_count", 1024);
  c.n_kv_heads = read_count(file, "llama.attention.head_count_kv", 1024, &c.n_heads);
  if (c.n_embd % c.n_heads != 0) {
    bad_key("llama.embedding_length", "not divisible by llama.attention.head_count", num(c.n_embd),
            "a multiple of " + num(c.n_heads));
  }
  c.head_dim = c.n_embd / c.n_heads;
  c.n_rot = read_count(file, "llama.rope.dimension_count", 1u << 16, &c.head_dim);
  c.rope_freq_base = file.get_f32_or("llama.rope.freq_base", 10000.0f);
  if (!file.has_key("llama.attention.layer_norm_rms_epsilon")) {
    throw_runtime(kComponent, "key 'llama.attention.layer_norm_rms_epsilon' missing", "absent",
                  "a float (required for architecture llama)");
  }
  c.rms_eps = file.get_f32("llama.attention.layer_norm_rms_epsilon");
  const gguf::TensorInfo* embd = file.find_tensor("token_embd.weight");
  if (file.has_key("llama.vocab_size")) {
    c.n_vocab = read_count(file, "llama.vocab_size", uint64_t{1} << 22);
    if (embd != nullptr && embd->n_dims() == 2 && static_cast<size_t>(embd->dim(1)) != c.n_vocab) {
      bad_key("llama.vocab_size", "disagrees with token_embd.weight", num(c.n_vocab),
              std::to_string(embd->dim(1)) + " rows");
    }
  } else {
    if (embd == nullptr) {
      throw_runtime(kComponent, "tensor 'token_embd.weight' missing", "absent",
                    "{n_embd, n_vocab}");
    }
    const int64_t rows = embd->dim(1);
    if (rows <= 0 || rows > (int64_t{1} << 22)) {
      throw_runtime(kComponent, "tensor 'token_embd.weight' vocabulary out of range",
                    std::to_string(rows), "1..4194304");
    }
    c.n_vocab = static_cast<size_t>(rows);
  }
  c.validate();
  return c;
}

}  // namespace snapkv
