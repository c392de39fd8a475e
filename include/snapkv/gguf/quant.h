// Tensor element types of GGUF files and their block layouts, byte-size arithmetic with overflow
// checks, and row conversion (quantize / dequantize) between fp32 and each type.
//
// Covers F32, F16, BF16, Q8_0, Q4_0 and the K-quants Q2_K, Q3_K, Q4_K, Q5_K, Q6_K exactly as ggml
// lays them out (the block layouts, K-quant decoders and encoders live in util/quant_blocks.h,
// shared with the matmul kernels); every other ggml type is "unsupported" here and named by
// ggml_type_name.
// Scalar code only: these are the reference conversions. K-quant encoding (quantize_row) is a
// simple round-to-nearest, not ggml's scale search.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "snapkv/util/fp16.h"
#include "snapkv/util/quant_blocks.h"

namespace snapkv::gguf {

// ggml type ids as stored in the tensor-info section.
enum class TensorType : int32_t {
  f32 = 0,
  f16 = 1,
  q4_0 = 2,
  q8_0 = 8,
  q2_K = 10,
  q3_K = 11,
  q4_K = 12,
  q5_K = 13,
  q6_K = 14,
  bf16 = 30,
};

// Q8_0 (value[j] = qs[j] * d, d = amax / 127 in fp16, 34 bytes per 32 values) and Q4_0
// (value[j] = ((qs[j] & 0xF) - 8) * d and value[j + 16] = ((qs[j] >> 4) - 8) * d for j < 16,
// 18 bytes per 32 values): the one layout of each is snapkv::BlockQ8_0 / kQ8BlockSize and
// snapkv::BlockQ4_0 / kQ4_0BlockSize of util/quant_blocks.h, which the matmul kernels read in
// place.

using bf16_t = uint16_t;  // raw bfloat16 bits (upper half of an IEEE binary32)

// "f32", "f16", "q4_0", "q8_0", "q2_K" .. "q6_K", "bf16" (ggml's spelling); "unknown" for others.
std::string_view tensor_type_name(TensorType type);
// The name ggml gives type id `id` ("Q4_1", "IQ2_XS", "TQ1_0", ...), for any id ggml has defined,
// supported here or not; "" for ids ggml never assigned.
std::string_view ggml_type_name(int32_t id);
// The type with this ggml id, or nullopt when the id is not one of the supported ones above.
std::optional<TensorType> tensor_type_from_id(int32_t id);
// "F32 (0), F16 (1), Q4_0 (2), ..." : the supported types, for error messages.
std::string_view supported_tensor_types();
// The type named "f32" / "F32" / "q8_0" / "Q4_K" ... (any case), or nullopt.
std::optional<TensorType> tensor_type_from_name(std::string_view name);

// Elements per block (1 for f32/f16/bf16, 32 for q8_0/q4_0, 256 for the K-quants) and bytes per
// block (4, 2, 2, 34, 18; q2_K 84, q3_K 110, q4_K 144, q5_K 176, q6_K 210).
size_t block_size(TensorType type);
size_t type_size(TensorType type);

// Product of ne (empty: 1). Throws std::invalid_argument when an entry is negative or the product
// does not fit in int64.
int64_t element_count(std::span<const int64_t> ne);

// Bytes of a row-major tensor with dims ne (ne[0] contiguous), as ggml_nbytes computes them:
// ne[0] / block_size * type_size * ne[1] * ne[2] * ne[3]. Throws std::invalid_argument when
// ne.size() is not 1..4, an entry is negative, ne[0] is not a multiple of the block size, or the
// result overflows int64.
uint64_t tensor_n_bytes(TensorType type, std::span<const int64_t> ne);
// Bytes of one row of n elements (n a multiple of the block size, else std::invalid_argument).
size_t row_n_bytes(TensorType type, size_t n);

// ---- row conversion (outputs first, sizes last) ----------------------------------------------
// n is the number of elements and must be a multiple of block_size(type) (std::invalid_argument).

// out[n] = values encoded in `in` (row_n_bytes(type, n) bytes, any alignment).
void dequantize_row(float* out, const void* in, TensorType type, size_t n);
// out (row_n_bytes(type, n) bytes) = encoding of in[n]. f16/bf16 round to nearest even.
void quantize_row(void* out, const float* in, TensorType type, size_t n);

// Typed forms of the above. Quantized ones take n values = n / 32 blocks.
void dequantize_row_q8_0(float* out, const BlockQ8_0* in, size_t n);
// d = amax / 127, q = round(x / d) half away from zero; d = 0 for an all-zero block (ggml's rule).
void quantize_row_q8_0(BlockQ8_0* out, const float* in, size_t n);
void dequantize_row_q4_0(float* out, const BlockQ4_0* in, size_t n);
void quantize_row_q4_0(BlockQ4_0* out, const float* in, size_t n);
void dequantize_row_bf16(float* out, const bf16_t* in, size_t n);
void quantize_row_bf16(bf16_t* out, const float* in, size_t n);

float bf16_to_fp32(bf16_t h);
bf16_t fp32_to_bf16(float f);  // round to nearest even; NaN stays NaN

}  // namespace snapkv::gguf
