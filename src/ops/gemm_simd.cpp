// The inner loops of gemm.h's GEMV and dequantization, compiled once per ISA level (util/isa.h):
// F32, F16, BF16, Q8_0, Q4_0 and Q2_K..Q6_K rows decoded inside the kernels, one AVX2+F16C path
// per inner loop when the level targets it, a scalar loop otherwise. Q4_0 and the K-quants decode
// one block at a time (this level's decode_block) into a stack buffer and dot it with x. The
// validation, threading and BLAS calls are in gemm.cpp.
#include <cstring>
#include <type_traits>

#include "ops/hsum.h"
#include "ops/kernels.h"
#include "util/isa.h"

#if defined(__AVX2__) && defined(__F16C__) && defined(__FMA__)
#include <immintrin.h>
#define SNAPKV_GEMM_AVX2 1
#endif

namespace snapkv::SNAPKV_ISA {
namespace {

const uint8_t* row_ptr(const WeightMatrix& w, size_t r) {
  return static_cast<const uint8_t*>(w.data) + r * w.row_bytes();
}

#if SNAPKV_GEMM_AVX2
// 8 int8 at p -> 8 floats
__m256 load_i8x8(const int8_t* p) {
  int64_t bits;
  std::memcpy(&bits, p, sizeof bits);
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_cvtsi64_si128(bits)));
}
#endif

// dot(row, x) for one row of n elements, fp32 accumulation: this level's dot kernels
// (dot_simd.cpp: 2 x 8-lane FMA accumulators, then the shared hsum), which the quantized kernels
// below match.
float dot_f16_row(const fp16_t* row, const float* x, size_t n) {
  return SNAPKV_ISA::dot_f16(x, row, n);  // the dot kernel takes the fp32 operand first
}

float dot_q8_0(const BlockQ8_0* blocks, const float* x, size_t n) {
  const size_t n_blocks = n / kQ8BlockSize;
#if SNAPKV_GEMM_AVX2
  __m256 total = _mm256_setzero_ps();
  for (size_t b = 0; b < n_blocks; ++b) {
    const int8_t* qs = blocks[b].qs;
    const float* xb = x + b * kQ8BlockSize;
    __m256 acc = _mm256_mul_ps(load_i8x8(qs), _mm256_loadu_ps(xb));
    acc = _mm256_fmadd_ps(load_i8x8(qs + 8), _mm256_loadu_ps(xb + 8), acc);
    acc = _mm256_fmadd_ps(load_i8x8(qs + 16), _mm256_loadu_ps(xb + 16), acc);
    acc = _mm256_fmadd_ps(load_i8x8(qs + 24), _mm256_loadu_ps(xb + 24), acc);
    total = _mm256_fmadd_ps(_mm256_set1_ps(fp16_to_fp32(blocks[b].d)), acc, total);
  }
  return hsum(total);
#else
  float sum = 0.0f;
  for (size_t b = 0; b < n_blocks; ++b) {
    float block_sum = 0.0f;
    for (size_t j = 0; j < kQ8BlockSize; ++j) {
      block_sum += static_cast<float>(blocks[b].qs[j]) * x[b * kQ8BlockSize + j];
    }
    sum += fp16_to_fp32(blocks[b].d) * block_sum;
  }
  return sum;
#endif
}

void dequant_q8_0_row(float* out, const BlockQ8_0* blocks, size_t n) {
  const size_t n_blocks = n / kQ8BlockSize;
  for (size_t b = 0; b < n_blocks; ++b) {
    const float d = fp16_to_fp32(blocks[b].d);
    float* ob = out + b * kQ8BlockSize;
#if SNAPKV_GEMM_AVX2
    const __m256 vd = _mm256_set1_ps(d);
    for (size_t j = 0; j < kQ8BlockSize; j += 8) {
      _mm256_storeu_ps(ob + j, _mm256_mul_ps(vd, load_i8x8(blocks[b].qs + j)));
    }
#else
    for (size_t j = 0; j < kQ8BlockSize; ++j) ob[j] = d * static_cast<float>(blocks[b].qs[j]);
#endif
  }
}

float dot_bf16(const uint16_t* row, const float* x, size_t n) {
  size_t c = 0;
  float sum = 0.0f;
#if SNAPKV_GEMM_AVX2
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  for (; c + 16 <= n; c += 16) {
    const __m256i h0 =
        _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + c)));
    const __m256i h1 =
        _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + c + 8)));
    acc0 = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_slli_epi32(h0, 16)), _mm256_loadu_ps(x + c),
                           acc0);
    acc1 = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_slli_epi32(h1, 16)),
                           _mm256_loadu_ps(x + c + 8), acc1);
  }
  sum = hsum(_mm256_add_ps(acc0, acc1));
#endif
  for (; c < n; ++c) sum += bf16_bits_to_fp32(row[c]) * x[c];
  return sum;
}

// Elements per block of a decode_block type.
template <class Block>
constexpr size_t kBlockElems = kQK_K;
template <>
constexpr size_t kBlockElems<BlockQ4_0> = kQ4_0BlockSize;

// dot(row, x) for a row of n / kBlockElems blocks: each block is decoded into a stack buffer and
// multiplied with x into running fp32 accumulators.
template <class Block>
float dot_blocks(const Block* blocks, const float* x, size_t n) {
  constexpr size_t kN = kBlockElems<Block>;
  alignas(32) float buf[kN];
  const size_t n_blocks = n / kN;
#if SNAPKV_GEMM_AVX2
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  for (size_t b = 0; b < n_blocks; ++b) {
    SNAPKV_ISA::decode_block(buf, blocks[b]);
    const float* xb = x + b * kN;
    for (size_t j = 0; j < kN; j += 16) {
      acc0 = _mm256_fmadd_ps(_mm256_load_ps(buf + j), _mm256_loadu_ps(xb + j), acc0);
      acc1 = _mm256_fmadd_ps(_mm256_load_ps(buf + j + 8), _mm256_loadu_ps(xb + j + 8), acc1);
    }
  }
  return hsum(_mm256_add_ps(acc0, acc1));
#else
  float sum = 0.0f;
  for (size_t b = 0; b < n_blocks; ++b) {
    SNAPKV_ISA::decode_block(buf, blocks[b]);
    for (size_t j = 0; j < kN; ++j) sum += buf[j] * x[b * kN + j];
  }
  return sum;
#endif
}

template <class Block>
void decode_row(float* out, const Block* blocks, size_t n) {
  constexpr size_t kN = kBlockElems<Block>;
  for (size_t b = 0; b < n / kN; ++b) SNAPKV_ISA::decode_block(out + b * kN, blocks[b]);
}

// Calls f(static_cast<const Block*>(nullptr)) with the block type of a decode_block type; returns
// false for the plain and Q8_0 types.
template <class F>
bool with_block_type(WeightType type, F&& f) {
  switch (type) {
    case WeightType::q4_0:
      f(static_cast<const BlockQ4_0*>(nullptr));
      return true;
    case WeightType::q2_K:
      f(static_cast<const BlockQ2_K*>(nullptr));
      return true;
    case WeightType::q3_K:
      f(static_cast<const BlockQ3_K*>(nullptr));
      return true;
    case WeightType::q4_K:
      f(static_cast<const BlockQ4_K*>(nullptr));
      return true;
    case WeightType::q5_K:
      f(static_cast<const BlockQ5_K*>(nullptr));
      return true;
    case WeightType::q6_K:
      f(static_cast<const BlockQ6_K*>(nullptr));
      return true;
    default:
      return false;
  }
}

}  // namespace

void gemv_rows(float* out, const float* x, const WeightMatrix& w, size_t row_begin,
               size_t row_end) {
  for (size_t r = row_begin; r < row_end; ++r) {
    const uint8_t* p = row_ptr(w, r);
    float& o = out[r - row_begin];
    switch (w.type) {
      case WeightType::f32:
        o = SNAPKV_ISA::dot(reinterpret_cast<const float*>(p), x, w.cols);
        break;
      case WeightType::f16:
        o = dot_f16_row(reinterpret_cast<const fp16_t*>(p), x, w.cols);
        break;
      case WeightType::q8_0:
        o = dot_q8_0(reinterpret_cast<const BlockQ8_0*>(p), x, w.cols);
        break;
      case WeightType::bf16:
        o = dot_bf16(reinterpret_cast<const uint16_t*>(p), x, w.cols);
        break;
      default:
        with_block_type(w.type, [&](const auto* tag) {
          using Block = std::remove_cv_t<std::remove_pointer_t<decltype(tag)>>;
          o = dot_blocks(reinterpret_cast<const Block*>(p), x, w.cols);
        });
        break;
    }
  }
}

void dequantize_rows(float* out, const WeightMatrix& w, size_t row_begin, size_t row_end) {
  const size_t n = row_end - row_begin;
  switch (w.type) {
    case WeightType::f32:
      std::memcpy(out, row_ptr(w, row_begin), n * w.cols * sizeof(float));
      return;
    case WeightType::f16:
      fp16_to_fp32_n(out, reinterpret_cast<const fp16_t*>(row_ptr(w, row_begin)), n * w.cols);
      return;
    case WeightType::q8_0:
      for (size_t r = 0; r < n; ++r) {
        dequant_q8_0_row(out + r * w.cols,
                         reinterpret_cast<const BlockQ8_0*>(row_ptr(w, row_begin + r)), w.cols);
      }
      return;
    case WeightType::bf16: {
      const auto* src = reinterpret_cast<const uint16_t*>(row_ptr(w, row_begin));
      for (size_t i = 0; i < n * w.cols; ++i) out[i] = bf16_bits_to_fp32(src[i]);
      return;
    }
    default:
      with_block_type(w.type, [&](const auto* tag) {
        using Block = std::remove_cv_t<std::remove_pointer_t<decltype(tag)>>;
        for (size_t r = 0; r < n; ++r) {
          decode_row(out + r * w.cols, reinterpret_cast<const Block*>(row_ptr(w, row_begin + r)),
                     w.cols);
        }
      });
      return;
  }
}

}  // namespace snapkv::SNAPKV_ISA
