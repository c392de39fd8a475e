// Random-weight Llama GGUF built in memory, tensors generated directly in F32 / F16 / Q8_0.
#include "snapkv/model/random_model.h"

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "snapkv/util/error.h"
#include "snapkv/util/fp16.h"

namespace snapkv {
namespace {

constexpr const char* kComponent = "random_model";

// splitmix64: small, fast, fully specified.
struct Rng {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // uniform in [-1, 1)
  float symmetric() {
    return static_cast<float>(static_cast<double>(next() >> 11) * 0x1p-52 - 1.0);
  }
};

// Encoded bytes of a [rows][cols] matrix with entries of standard deviation `stddev`.
std::vector<uint8_t> random_matrix(gguf::TensorType type, size_t rows, size_t cols, float stddev,
                                   Rng& rng) {
  const float amp = stddev * std::sqrt(3.0f);  // uniform [-amp, amp) has this standard deviation
  const size_t n = rows * cols;
  std::vector<uint8_t> bytes(gguf::row_n_bytes(type, cols) * rows);
  if (type == gguf::TensorType::f32) {
    float* out = reinterpret_cast<float*>(bytes.data());
    for (size_t i = 0; i < n; ++i) out[i] = amp * rng.symmetric();
  } else if (type == gguf::TensorType::f16) {
    std::vector<float> buf(4096);
    for (size_t i = 0; i < n; i += buf.size()) {
      const size_t m = std::min(buf.size(), n - i);
      for (size_t j = 0; j < m; ++j) buf[j] = amp * rng.symmetric();
      std::vector<fp16_t> h(m);
      fp32_to_fp16_n(h.data(), buf.data(), m);
      std::memcpy(bytes.data() + i * sizeof(fp16_t), h.data(), m * sizeof(fp16_t));
    }
  } else {  // q8_0: uniform integers in [-127, 127] times d = amp / 127
    const fp16_t d = fp32_to_fp16(amp / 127.0f);
    auto* blocks = reinterpret_cast<BlockQ8_0*>(bytes.data());
    for (size_t b = 0; b < n / kQ8BlockSize; ++b) {
      blocks[b].d = d;
      for (size_t j = 0; j < kQ8BlockSize; ++j) {
        blocks[b].qs[j] = static_cast<int8_t>(static_cast<int>(rng.next() % 255) - 127);
      }
    }
  }
  return bytes;
}

}  // namespace

void RandomModelSpec::validate() const {
  auto positive = [](size_t v, const char* what) {
    if (v == 0) throw_invalid(kComponent, std::string(what) + " must be positive", "0", ">= 1");
  };
  positive(n_layers, "n_layers");
  positive(n_embd, "n_embd");
  positive(n_heads, "n_heads");
  positive(n_kv_heads, "n_kv_heads");
  positive(n_ff, "n_ff");
  positive(n_vocab, "n_vocab");
  positive(n_ctx, "n_ctx");
  if (n_embd % n_heads != 0 || (n_embd / n_heads) % 2 != 0) {
    throw_invalid(kComponent, "n_embd / n_heads must be an even head_dim",
                  std::to_string(n_embd) + " / " + std::to_string(n_heads), "an even integer");
  }
  if (n_heads % n_kv_heads != 0) {
    throw_invalid(kComponent, "n_kv_heads must divide n_heads", std::to_string(n_kv_heads),
                  "a divisor of " + std::to_string(n_heads));
  }
  if (type != gguf::TensorType::f32 && type != gguf::TensorType::f16 &&
      type != gguf::TensorType::q8_0) {
    throw_invalid(kComponent, "type not supported", std::string(gguf::tensor_type_name(type)),
                  "f32, f16 or q8_0");
  }
  if (type == gguf::TensorType::q8_0 && (n_embd % 32 != 0 || n_ff % 32 != 0)) {
    throw_invalid(kComponent, "q8_0 needs n_embd and n_ff multiples of 32",
                  std::to_string(n_embd) + ", " + std::to_string(n_ff), "multiples of 32");
  }
}

size_t RandomModelSpec::weight_bytes() const {
  const size_t hd = n_embd / n_heads;
  const size_t per_layer =
      gguf::row_n_bytes(type, n_embd) * (2 * n_heads * hd + 2 * n_kv_heads * hd + 2 * n_ff) +
      gguf::row_n_bytes(type, n_ff) * n_embd + 2 * n_embd * sizeof(float);
  return n_layers * per_layer + 2 * gguf::row_n_bytes(type, n_embd) * n_vocab +
         n_embd * sizeof(float);
}

gguf::File make_random_model(const RandomModelSpec& spec) {
  spec.validate();
  const size_t hd = spec.n_embd / spec.n_heads;
  const auto i64 = [](size_t v) { return static_cast<int64_t>(v); };
  gguf::Writer w;
  w.set_string("general.architecture", "llama");
  w.set_string("general.name", "snapkv-random");
  w.set_alignment(gguf::kDefaultAlignment);
  w.set_u32("llama.context_length", static_cast<uint32_t>(spec.n_ctx));
  w.set_u32("llama.embedding_length", static_cast<uint32_t>(spec.n_embd));
  w.set_u32("llama.block_count", static_cast<uint32_t>(spec.n_layers));
  w.set_u32("llama.feed_forward_length", static_cast<uint32_t>(spec.n_ff));
  w.set_u32("llama.rope.dimension_count", static_cast<uint32_t>(hd));
  w.set_u32("llama.attention.head_count", static_cast<uint32_t>(spec.n_heads));
  w.set_u32("llama.attention.head_count_kv", static_cast<uint32_t>(spec.n_kv_heads));
  w.set_f32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  w.set_f32("llama.rope.freq_base", static_cast<float>(spec.rope_freq_base));
  w.set_u32("llama.vocab_size", static_cast<uint32_t>(spec.n_vocab));

  Rng rng{spec.seed};
  const std::vector<float> ones(spec.n_embd, 1.0f);
  auto matrix = [&](const std::string& name, size_t cols, size_t rows, float stddev) {
    const auto bytes = random_matrix(spec.type, rows, cols, stddev, rng);
    w.add_tensor(name, spec.type, {i64(cols), i64(rows)}, bytes);
  };
  auto norm = [&](const std::string& name) {
    w.add_tensor_f32(name, gguf::TensorType::f32, {i64(spec.n_embd)}, ones);
  };
  const float in_embd = 1.0f / std::sqrt(static_cast<float>(spec.n_embd));
  const float in_ff = 1.0f / std::sqrt(static_cast<float>(spec.n_ff));
  const float in_q = 1.0f / std::sqrt(static_cast<float>(spec.n_heads * hd));
  matrix("token_embd.weight", spec.n_embd, spec.n_vocab, 1.0f);
  for (size_t l = 0; l < spec.n_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    norm(p + "attn_norm.weight");
    matrix(p + "attn_q.weight", spec.n_embd, spec.n_heads * hd, in_embd);
    matrix(p + "attn_k.weight", spec.n_embd, spec.n_kv_heads * hd, in_embd);
    matrix(p + "attn_v.weight", spec.n_embd, spec.n_kv_heads * hd, in_embd);
    matrix(p + "attn_output.weight", spec.n_heads * hd, spec.n_embd, in_q);
    norm(p + "ffn_norm.weight");
    matrix(p + "ffn_gate.weight", spec.n_embd, spec.n_ff, in_embd);
    matrix(p + "ffn_up.weight", spec.n_embd, spec.n_ff, in_embd);
    matrix(p + "ffn_down.weight", spec.n_ff, spec.n_embd, in_ff);
  }
  norm("output_norm.weight");
  matrix("output.weight", spec.n_embd, spec.n_vocab, in_embd);
  return gguf::File::from_bytes(w.to_bytes());
}

}  // namespace snapkv
