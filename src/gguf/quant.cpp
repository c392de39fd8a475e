// Tensor types: names, block sizes, byte-size arithmetic with overflow checks, and the scalar
// reference conversions between fp32 and F16 / BF16 / Q8_0 / Q4_0 / Q2_K..Q6_K rows.
#include "snapkv/gguf/quant.h"

#include <cctype>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "snapkv/util/error.h"
#include "snapkv/util/quant_blocks.h"

namespace snapkv::gguf {
namespace {

constexpr std::string_view kComponent = "gguf";

std::string ne_string(std::span<const int64_t> ne) {
  std::string s = "{";
  for (size_t i = 0; i < ne.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(ne[i]);
  }
  return s + "}";
}

constexpr TensorType kSupported[] = {
    TensorType::f32,  TensorType::f16,  TensorType::q4_0, TensorType::q8_0, TensorType::q2_K,
    TensorType::q3_K, TensorType::q4_K, TensorType::q5_K, TensorType::q6_K, TensorType::bf16};

void check_row_length(TensorType type, size_t n, std::string_view who) {
  const size_t bs = block_size(type);
  if (n % bs != 0) {
    throw_invalid(kComponent, std::string(who) + ": row length not a multiple of the block size",
                  std::to_string(n), "a multiple of " + std::to_string(bs));
  }
}

// Nearest integer of v clamped to [lo, hi]; NaN gives 0 (never a float->int conversion of an
// out-of-range value, which would be undefined behaviour).
int clamp_round(float v, int lo, int hi) {
  if (!(v == v)) return 0;
  const float r = std::round(v);
  if (r <= static_cast<float>(lo)) return lo;
  if (r >= static_cast<float>(hi)) return hi;
  return static_cast<int>(r);
}

}  // namespace

std::string_view tensor_type_name(TensorType type) {
  switch (type) {
    case TensorType::f32:
      return "f32";
    case TensorType::f16:
      return "f16";
    case TensorType::q4_0:
      return "q4_0";
    case TensorType::q8_0:
      return "q8_0";
    case TensorType::q2_K:
      return "q2_K";
    case TensorType::q3_K:
      return "q3_K";
    case TensorType::q4_K:
      return "q4_K";
    case TensorType::q5_K:
      return "q5_K";
    case TensorType::q6_K:
      return "q6_K";
    case TensorType::bf16:
      return "bf16";
  }
  return "unknown";
}

std::string_view ggml_type_name(int32_t id) {
  // ggml's type ids (ggml.h); 4, 5 and 31..33, 36..38 were assigned once and retired.
  static constexpr std::string_view kNames[] = {
      "F32",   "F16",        "Q4_0",       "Q4_1",      "Q4_2",     "Q4_3",     "Q5_0",
      "Q5_1",  "Q8_0",       "Q8_1",       "Q2_K",      "Q3_K",     "Q4_K",     "Q5_K",
      "Q6_K",  "Q8_K",       "IQ2_XXS",    "IQ2_XS",    "IQ3_XXS",  "IQ1_S",    "IQ4_NL",
      "IQ3_S", "IQ2_S",      "IQ4_XS",     "I8",        "I16",      "I32",      "I64",
      "F64",   "IQ1_M",      "BF16",       "Q4_0_4_4",  "Q4_0_4_8", "Q4_0_8_8", "TQ1_0",
      "TQ2_0", "IQ4_NL_4_4", "IQ4_NL_4_8", "IQ4_NL_8_8"};
  if (id < 0 || static_cast<size_t>(id) >= std::size(kNames)) return "";
  return kNames[id];
}

std::string_view supported_tensor_types() {
  return "F32 (0), F16 (1), Q4_0 (2), Q8_0 (8), Q2_K (10), Q3_K (11), Q4_K (12), Q5_K (13), "
         "Q6_K (14) or BF16 (30)";
}

std::optional<TensorType> tensor_type_from_id(int32_t id) {
  switch (id) {
    case 0:
      return TensorType::f32;
    case 1:
      return TensorType::f16;
    case 2:
      return TensorType::q4_0;
    case 8:
      return TensorType::q8_0;
    case 10:
      return TensorType::q2_K;
    case 11:
      return TensorType::q3_K;
    case 12:
      return TensorType::q4_K;
    case 13:
      return TensorType::q5_K;
    case 14:
      return TensorType::q6_K;
    case 30:
      return TensorType::bf16;
    default:
      return std::nullopt;
  }
}

std::optional<TensorType> tensor_type_from_name(std::string_view name) {
  const auto lower = [](std::string_view s) {
    std::string out(s);
    for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return out;
  };
  for (TensorType t : kSupported) {
    if (lower(tensor_type_name(t)) == lower(name)) return t;
  }
  return std::nullopt;
}

size_t block_size(TensorType type) {
  switch (type) {
    case TensorType::q8_0:
      return kQ8BlockSize;
    case TensorType::q4_0:
      return kQ4_0BlockSize;
    case TensorType::q2_K:
    case TensorType::q3_K:
    case TensorType::q4_K:
    case TensorType::q5_K:
    case TensorType::q6_K:
      return kQK_K;
    case TensorType::f32:
    case TensorType::f16:
    case TensorType::bf16:
      return 1;
  }
  throw_invalid(kComponent, "unknown tensor type", std::to_string(static_cast<int32_t>(type)),
                std::string(supported_tensor_types()));
}

size_t type_size(TensorType type) {
  switch (type) {
    case TensorType::f32:
      return 4;
    case TensorType::f16:
    case TensorType::bf16:
      return 2;
    case TensorType::q8_0:
      return sizeof(BlockQ8_0);
    case TensorType::q4_0:
      return sizeof(BlockQ4_0);
    case TensorType::q2_K:
      return sizeof(BlockQ2_K);
    case TensorType::q3_K:
      return sizeof(BlockQ3_K);
    case TensorType::q4_K:
      return sizeof(BlockQ4_K);
    case TensorType::q5_K:
      return sizeof(BlockQ5_K);
    case TensorType::q6_K:
      return sizeof(BlockQ6_K);
  }
  throw_invalid(kComponent, "unknown tensor type", std::to_string(static_cast<int32_t>(type)),
                std::string(supported_tensor_types()));
}

int64_t element_count(std::span<const int64_t> ne) {
  int64_t n = 1;
  for (const int64_t d : ne) {
    if (d < 0) throw_invalid(kComponent, "negative dimension", ne_string(ne), "every entry >= 0");
    if (__builtin_mul_overflow(n, d, &n)) {
      throw_invalid(kComponent, "element count overflows int64", ne_string(ne),
                    "a product below 2^63");
    }
  }
  return n;
}

uint64_t tensor_n_bytes(TensorType type, std::span<const int64_t> ne) {
  if (ne.empty() || ne.size() > 4) {
    throw_invalid(kComponent, "wrong number of dimensions", std::to_string(ne.size()), "1..4");
  }
  element_count(ne);  // validates signs and the element-count product
  const int64_t bs = static_cast<int64_t>(block_size(type));
  if (ne[0] % bs != 0) {
    throw_invalid(kComponent,
                  std::string("ne[0] not a multiple of the ") +
                      std::string(tensor_type_name(type)) + " block size",
                  std::to_string(ne[0]), "a multiple of " + std::to_string(bs));
  }
  int64_t bytes = ne[0] / bs;
  bool overflow = __builtin_mul_overflow(bytes, static_cast<int64_t>(type_size(type)), &bytes);
  for (size_t i = 1; i < ne.size() && !overflow; ++i) {
    overflow = __builtin_mul_overflow(bytes, ne[i], &bytes);
  }
  if (overflow) {
    throw_invalid(kComponent, "tensor byte size overflows int64", ne_string(ne),
                  "a size below 2^63 bytes");
  }
  return static_cast<uint64_t>(bytes);
}

size_t row_n_bytes(TensorType type, size_t n) {
  check_row_length(type, n, "row_n_bytes");
  return n / block_size(type) * type_size(type);
}

// ---- bf16 ----------------------------------------------------------------------------------

float bf16_to_fp32(bf16_t h) {
  return bf16_bits_to_fp32(h);
}

bf16_t fp32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<bf16_t>((u >> 16) | 0x0040u);  // quiet
  u += 0x7FFFu + ((u >> 16) & 1u);  // round half to even; overflow correctly becomes inf
  return static_cast<bf16_t>(u >> 16);
}

void dequantize_row_bf16(float* out, const bf16_t* in, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = bf16_to_fp32(in[i]);
}

void quantize_row_bf16(bf16_t* out, const float* in, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = fp32_to_bf16(in[i]);
}

// ---- q8_0 ----------------------------------------------------------------------------------

void dequantize_row_q8_0(float* out, const BlockQ8_0* in, size_t n) {
  check_row_length(TensorType::q8_0, n, "dequantize_row_q8_0");
  for (size_t b = 0; b < n / kQ8BlockSize; ++b) {
    const float d = fp16_to_fp32(in[b].d);
    for (size_t j = 0; j < kQ8BlockSize; ++j)
      out[b * kQ8BlockSize + j] = static_cast<float>(in[b].qs[j]) * d;
  }
}

// d = amax / 127, q = round(x / d); an all-zero block stores d = 0 and q = 0 (no division by 0).
void quantize_row_q8_0(BlockQ8_0* out, const float* in, size_t n) {
  check_row_length(TensorType::q8_0, n, "quantize_row_q8_0");
  for (size_t b = 0; b < n / kQ8BlockSize; ++b) {
    const float* x = in + b * kQ8BlockSize;
    float amax = 0.0f;
    for (size_t j = 0; j < kQ8BlockSize; ++j) amax = std::fmax(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float inv_d = d != 0.0f ? 1.0f / d : 0.0f;
    out[b].d = fp32_to_fp16(d);
    for (size_t j = 0; j < kQ8BlockSize; ++j) {
      out[b].qs[j] = static_cast<int8_t>(clamp_round(x[j] * inv_d, -127, 127));
    }
  }
}

// ---- q4_0 ----------------------------------------------------------------------------------

void dequantize_row_q4_0(float* out, const BlockQ4_0* in, size_t n) {
  check_row_length(TensorType::q4_0, n, "dequantize_row_q4_0");
  constexpr size_t half = kQ4_0BlockSize / 2;
  for (size_t b = 0; b < n / kQ4_0BlockSize; ++b) {
    const float d = fp16_to_fp32(in[b].d);
    for (size_t j = 0; j < half; ++j) {
      out[b * kQ4_0BlockSize + j] = static_cast<float>((in[b].qs[j] & 0x0F) - 8) * d;
      out[b * kQ4_0BlockSize + j + half] = static_cast<float>((in[b].qs[j] >> 4) - 8) * d;
    }
  }
}

// ggml's Q4_0 rule: the element of largest magnitude (with its sign), m, maps to nibble 0, so
// d = m / -8 and nibble = clamp(round(x / d) + 8, 0, 15). Every x but -m is within |d| / 2.
void quantize_row_q4_0(BlockQ4_0* out, const float* in, size_t n) {
  check_row_length(TensorType::q4_0, n, "quantize_row_q4_0");
  constexpr size_t half = kQ4_0BlockSize / 2;
  for (size_t b = 0; b < n / kQ4_0BlockSize; ++b) {
    const float* x = in + b * kQ4_0BlockSize;
    float amax = 0.0f;
    float extreme = 0.0f;
    for (size_t j = 0; j < kQ4_0BlockSize; ++j) {
      if (std::fabs(x[j]) > amax) {
        amax = std::fabs(x[j]);
        extreme = x[j];
      }
    }
    const float d = extreme / -8.0f;
    const float inv_d = d != 0.0f ? 1.0f / d : 0.0f;
    out[b].d = fp32_to_fp16(d);
    for (size_t j = 0; j < half; ++j) {
      const int lo = clamp_round(x[j] * inv_d, -8, 7) + 8;
      const int hi = clamp_round(x[j + half] * inv_d, -8, 7) + 8;
      out[b].qs[j] = static_cast<uint8_t>(lo | (hi << 4));
    }
  }
}

// ---- K-quants: whole blocks through util/quant_blocks.h, copied so any alignment works -----

// The reference decoder of each weight (bit for bit what the matmul kernels' decode_block gives).
template <class Block>
void dequantize_k_row(float* out, const uint8_t* src, size_t n,
                      float (*value)(const Block&, size_t)) {
  for (size_t b = 0; b < n / kQK_K; ++b) {
    Block blk;
    std::memcpy(&blk, src + b * sizeof blk, sizeof blk);
    for (size_t i = 0; i < kQK_K; ++i) out[b * kQK_K + i] = value(blk, i);
  }
}

template <class Block>
void quantize_k_row(uint8_t* dst, const float* in, size_t n) {
  for (size_t b = 0; b < n / kQK_K; ++b) {
    Block blk;
    quantize_block(&blk, in + b * kQK_K);
    std::memcpy(dst + b * sizeof blk, &blk, sizeof blk);
  }
}

// ---- generic rows (any input alignment) ----------------------------------------------------

void dequantize_row(float* out, const void* in, TensorType type, size_t n) {
  check_row_length(type, n, "dequantize_row");
  const auto* src = static_cast<const uint8_t*>(in);
  switch (type) {
    case TensorType::f32:
      std::memcpy(out, src, n * sizeof(float));
      return;
    case TensorType::f16:
      for (size_t i = 0; i < n; ++i) {
        fp16_t h;
        std::memcpy(&h, src + 2 * i, sizeof h);
        out[i] = fp16_to_fp32(h);
      }
      return;
    case TensorType::bf16:
      for (size_t i = 0; i < n; ++i) {
        bf16_t h;
        std::memcpy(&h, src + 2 * i, sizeof h);
        out[i] = bf16_to_fp32(h);
      }
      return;
    case TensorType::q8_0:
      for (size_t b = 0; b < n / kQ8BlockSize; ++b) {
        BlockQ8_0 blk;
        std::memcpy(&blk, src + b * sizeof blk, sizeof blk);
        dequantize_row_q8_0(out + b * kQ8BlockSize, &blk, kQ8BlockSize);
      }
      return;
    case TensorType::q4_0:
      for (size_t b = 0; b < n / kQ4_0BlockSize; ++b) {
        BlockQ4_0 blk;
        std::memcpy(&blk, src + b * sizeof blk, sizeof blk);
        dequantize_row_q4_0(out + b * kQ4_0BlockSize, &blk, kQ4_0BlockSize);
      }
      return;
    case TensorType::q2_K:
      return dequantize_k_row<BlockQ2_K>(out, src, n, q2_K_value);
    case TensorType::q3_K:
      return dequantize_k_row<BlockQ3_K>(out, src, n, q3_K_value);
    case TensorType::q4_K:
      return dequantize_k_row<BlockQ4_K>(out, src, n, q4_K_value);
    case TensorType::q5_K:
      return dequantize_k_row<BlockQ5_K>(out, src, n, q5_K_value);
    case TensorType::q6_K:
      return dequantize_k_row<BlockQ6_K>(out, src, n, q6_K_value);
  }
  block_size(type);  // throws for an unknown type
}

void quantize_row(void* out, const float* in, TensorType type, size_t n) {
  check_row_length(type, n, "quantize_row");
  auto* dst = static_cast<uint8_t*>(out);
  switch (type) {
    case TensorType::f32:
      std::memcpy(dst, in, n * sizeof(float));
      return;
    case TensorType::f16:
      for (size_t i = 0; i < n; ++i) {
        const fp16_t h = fp32_to_fp16(in[i]);
        std::memcpy(dst + 2 * i, &h, sizeof h);
      }
      return;
    case TensorType::bf16:
      for (size_t i = 0; i < n; ++i) {
        const bf16_t h = fp32_to_bf16(in[i]);
        std::memcpy(dst + 2 * i, &h, sizeof h);
      }
      return;
    case TensorType::q8_0:
      for (size_t b = 0; b < n / kQ8BlockSize; ++b) {
        BlockQ8_0 blk;
        quantize_row_q8_0(&blk, in + b * kQ8BlockSize, kQ8BlockSize);
        std::memcpy(dst + b * sizeof blk, &blk, sizeof blk);
      }
      return;
    case TensorType::q4_0:
      for (size_t b = 0; b < n / kQ4_0BlockSize; ++b) {
        BlockQ4_0 blk;
        quantize_row_q4_0(&blk, in + b * kQ4_0BlockSize, kQ4_0BlockSize);
        std::memcpy(dst + b * sizeof blk, &blk, sizeof blk);
      }
      return;
    case TensorType::q2_K:
      return quantize_k_row<BlockQ2_K>(dst, in, n);
    case TensorType::q3_K:
      return quantize_k_row<BlockQ3_K>(dst, in, n);
    case TensorType::q4_K:
      return quantize_k_row<BlockQ4_K>(dst, in, n);
    case TensorType::q5_K:
      return quantize_k_row<BlockQ5_K>(dst, in, n);
    case TensorType::q6_K:
      return quantize_k_row<BlockQ6_K>(dst, in, n);
  }
  block_size(type);  // throws for an unknown type
}

}  // namespace snapkv::gguf
