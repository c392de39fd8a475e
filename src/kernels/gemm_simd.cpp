// The inner loops of gemm.h's GEMV and dequantization, compiled once per ISA level (kernels/isa.h):
// F32, F16, BF16, Q8_0, Q4_0 and Q2_K..Q6_K rows decoded inside the kernels, one AVX2+F16C path
// per inner loop when the level targets it (at the NEON levels the same lanes and operations on
// pairs of 4-lane registers, kernels/vec.h (hsum): the AVX2 bits), a scalar loop otherwise. The F16
// schedules other than per_row are AVX2 / AVX-512 only (the NEON levels run per_row for all). Q4_0
// and the K-quants decode one block at a time (this level's decode_block) into a stack buffer and
// dot it with x. The validation, threading and BLAS calls are in gemm.cpp.
#include <cstring>
#include <type_traits>

// GCC 12's AVX-512 intrinsics start from _mm512_undefined_*(), a self-initialised variable that
// -Wmaybe-uninitialized reports wherever they inline; silenced for the header's lines only.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include "kernels/vec.h"
#if defined(__AVX2__) && defined(__F16C__) && defined(__FMA__)
#include <immintrin.h>
#define SNAPKV_GEMM_AVX2 1
#endif
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#include "kernels/isa.h"
#include "kernels/ops_kernels.h"

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

#if defined(SNAPKV_NEON_KERNELS)
// 4 int8 at p -> 4 floats, lanes [0, 4) and [4, 8) of load_i8x8
float32x4x2_t load_i8x8_neon(const int8_t* p) {
  const int16x8_t w = vmovl_s8(vld1_s8(p));
  return {{vcvtq_f32_s32(vmovl_s16(vget_low_s16(w))), vcvtq_f32_s32(vmovl_high_s16(w))}};
}
#endif

float dot_q8_0(const BlockQ8_0* blocks, const float* x, size_t n) {
  const size_t n_blocks = n / kQ8BlockSize;
#if defined(SNAPKV_NEON_KERNELS)
  // the AVX2 path below, lanes 0-3 in [0], 4-7 in [1]
  float32x4_t total[2] = {vdupq_n_f32(0.0f), vdupq_n_f32(0.0f)};
  for (size_t b = 0; b < n_blocks; ++b) {
    const int8_t* qs = blocks[b].qs;
    const float* xb = x + b * kQ8BlockSize;
    const float32x4_t d = vdupq_n_f32(fp16_to_fp32(blocks[b].d));
    for (size_t h = 0; h < 2; ++h) {
      float32x4_t acc = vmulq_f32(load_i8x8_neon(qs).val[h], vld1q_f32(xb + 4 * h));
      for (size_t j = 8; j < kQ8BlockSize; j += 8) {
        acc = vfmaq_f32(acc, load_i8x8_neon(qs + j).val[h], vld1q_f32(xb + j + 4 * h));
      }
      total[h] = vfmaq_f32(total[h], d, acc);
    }
  }
  return hsum(total[0], total[1]);
#elif SNAPKV_GEMM_AVX2
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
#if defined(SNAPKV_NEON_KERNELS)
  Acc16 acc;
  for (; c + 16 <= n; c += 16) {
    for (size_t k = 0; k < 4; ++k) {
      const uint32x4_t bits = vshll_n_u16(vld1_u16(row + c + 4 * k), 16);
      acc.v[k] = vfmaq_f32(acc.v[k], vreinterpretq_f32_u32(bits), vld1q_f32(x + c + 4 * k));
    }
  }
  sum = hsum(acc);
#endif
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

// The F16 decode matvec: kF16RowsInFlight rows against x at once, each row with its own pair of
// 8-lane accumulators, so every output has the bits of dot_f16_row (acc0 takes columns 16k..16k+7,
// acc1 16k+8..16k+15, FMA per lane, then hsum(acc0 + acc1)), while the rows share each load of x
// and keep 2 x kF16RowsInFlight independent FMA chains and as many memory streams in flight. At
// the AVX-512 level one 16-lane register holds both accumulators of a row (lanes 0-7 = acc0,
// 8-15 = acc1: the same FMAs lane for lane) and one vcvtph2ps converts 16 weights. With
// `prefetch`, each row stream asks for the cache line at the same column of the group of rows
// kF16RowsInFlight ahead (the next block of the matrix, read in the same pattern), so the next
// group's lines are on their way from DRAM while this group is multiplied. Rows whose width is not
// a multiple of 16, and a last group of fewer rows, take dot_f16_row.
using ops_internal::kF16RowsInFlight;

#if SNAPKV_GEMM_AVX2
void prefetch_line(const fp16_t* p) {
  _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T0);
}

// out [4] = rows r, r + 1, r + 2, r + 3 (row stride `stride` elements) times x [n]; n % 16 == 0.
// next: the first row of the group to prefetch, or null.
void dot_f16_rows4(float* out, const fp16_t* row, size_t stride, const float* x, size_t n,
                   const fp16_t* next) {
#if defined(__AVX512F__) && defined(__AVX512DQ__)
  __m512 acc[kF16RowsInFlight];
  for (__m512& a : acc) a = _mm512_setzero_ps();
  for (size_t i = 0; i < n; i += 16) {
    if (next != nullptr && i % 32 == 0) {  // one 64-byte line per row per 32 columns
      for (size_t j = 0; j < kF16RowsInFlight; ++j) prefetch_line(next + j * stride + i);
    }
    const __m512 xv = _mm512_loadu_ps(x + i);
    for (size_t j = 0; j < kF16RowsInFlight; ++j) {
      const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + j * stride + i));
      acc[j] = _mm512_fmadd_ps(xv, _mm512_cvtph_ps(h), acc[j]);
    }
  }
  for (size_t j = 0; j < kF16RowsInFlight; ++j) {
    out[j] = hsum(_mm256_add_ps(_mm512_castps512_ps256(acc[j]), _mm512_extractf32x8_ps(acc[j], 1)));
  }
#else
  __m256 acc0[kF16RowsInFlight], acc1[kF16RowsInFlight];
  for (size_t j = 0; j < kF16RowsInFlight; ++j) acc0[j] = acc1[j] = _mm256_setzero_ps();
  for (size_t i = 0; i < n; i += 16) {
    if (next != nullptr && i % 32 == 0) {
      for (size_t j = 0; j < kF16RowsInFlight; ++j) prefetch_line(next + j * stride + i);
    }
    const __m256 x0 = _mm256_loadu_ps(x + i), x1 = _mm256_loadu_ps(x + i + 8);
    for (size_t j = 0; j < kF16RowsInFlight; ++j) {
      const fp16_t* r = row + j * stride + i;
      const __m256 w0 = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(r)));
      const __m256 w1 = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(r + 8)));
      acc0[j] = _mm256_fmadd_ps(x0, w0, acc0[j]);
      acc1[j] = _mm256_fmadd_ps(x1, w1, acc1[j]);
    }
  }
  for (size_t j = 0; j < kF16RowsInFlight; ++j) out[j] = hsum(_mm256_add_ps(acc0[j], acc1[j]));
#endif
}

// One row at a time, the matrix read front to back as one stream, with eight independent FMA
// chains instead of dot_f16's two (its own summation order, not dot_f16's bits): acc_k takes
// columns 64m + 8k .. 64m + 8k + 7 (k = 0..7), FMA per lane, and the row's sum is hsum(lo + hi)
// with lo = (acc0 + acc4) + (acc2 + acc6), hi = (acc1 + acc5) + (acc3 + acc7). At the AVX-512
// level four 16-lane registers hold [acc0 | acc1] .. [acc6 | acc7] (the same FMAs lane for lane,
// the same additions), so both levels give the same bits. With prefetch_end non-null, the line
// kF16PrefetchBytes ahead of the one being read is requested while it is below prefetch_end (the
// end of the task's rows: rows are contiguous, so the stream runs on into the next row).
// n % 64 == 0.
constexpr size_t kF16PrefetchBytes = 2048;

float dot_f16_row_acc8(const fp16_t* row, const float* x, size_t n, const fp16_t* prefetch_end) {
  constexpr size_t kAhead = kF16PrefetchBytes / sizeof(fp16_t);
#if defined(__AVX512F__) && defined(__AVX512DQ__)
  __m512 z[4];
  for (__m512& a : z) a = _mm512_setzero_ps();
  for (size_t i = 0; i < n; i += 64) {
    if (prefetch_end != nullptr) {  // the two lines 128 bytes of weights span
      if (row + i + kAhead < prefetch_end) prefetch_line(row + i + kAhead);
      if (row + i + 32 + kAhead < prefetch_end) prefetch_line(row + i + 32 + kAhead);
    }
    for (size_t j = 0; j < 4; ++j) {
      const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + i + 16 * j));
      z[j] = _mm512_fmadd_ps(_mm512_loadu_ps(x + i + 16 * j), _mm512_cvtph_ps(h), z[j]);
    }
  }
  const __m512 s = _mm512_add_ps(_mm512_add_ps(z[0], z[2]), _mm512_add_ps(z[1], z[3]));
  return hsum(_mm256_add_ps(_mm512_castps512_ps256(s), _mm512_extractf32x8_ps(s, 1)));
#else
  __m256 acc[8];
  for (__m256& a : acc) a = _mm256_setzero_ps();
  for (size_t i = 0; i < n; i += 64) {
    if (prefetch_end != nullptr) {
      if (row + i + kAhead < prefetch_end) prefetch_line(row + i + kAhead);
      if (row + i + 32 + kAhead < prefetch_end) prefetch_line(row + i + 32 + kAhead);
    }
    for (size_t k = 0; k < 8; ++k) {
      const __m256 wk =
          _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + i + 8 * k)));
      acc[k] = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8 * k), wk, acc[k]);
    }
  }
  const __m256 lo = _mm256_add_ps(_mm256_add_ps(acc[0], acc[4]), _mm256_add_ps(acc[2], acc[6]));
  const __m256 hi = _mm256_add_ps(_mm256_add_ps(acc[1], acc[5]), _mm256_add_ps(acc[3], acc[7]));
  return hsum(_mm256_add_ps(lo, hi));
#endif
}
#endif

// out [row_end - row_begin] for rows [row_begin, row_end) of an F16 matrix.
void gemv_f16(float* out, const float* x, const WeightMatrix& w, size_t row_begin, size_t row_end,
              ops_internal::F16GemvKernel kernel) {
  const size_t n = w.cols;
  const auto* base = static_cast<const fp16_t*>(w.data);
  size_t r = row_begin;
#if SNAPKV_GEMM_AVX2
  using ops_internal::F16GemvKernel;
  if (kernel == F16GemvKernel::by_width) {
    kernel =
        n > ops_internal::kF16LongRowCols ? F16GemvKernel::rows_prefetch : F16GemvKernel::per_row;
  }
  if ((kernel == F16GemvKernel::row_acc8 || kernel == F16GemvKernel::row_acc8_prefetch) &&
      n % 64 == 0) {
    const fp16_t* end = kernel == F16GemvKernel::row_acc8_prefetch ? base + row_end * n : nullptr;
    for (; r < row_end; ++r) out[r - row_begin] = dot_f16_row_acc8(base + r * n, x, n, end);
    return;
  }
  if ((kernel == F16GemvKernel::rows || kernel == F16GemvKernel::rows_prefetch) && n % 16 == 0) {
    const bool prefetch = kernel == ops_internal::F16GemvKernel::rows_prefetch;
    for (; r + kF16RowsInFlight <= row_end; r += kF16RowsInFlight) {
      const size_t ahead = r + kF16RowsInFlight;
      const fp16_t* next =
          prefetch && ahead + kF16RowsInFlight <= row_end ? base + ahead * n : nullptr;
      dot_f16_rows4(out + (r - row_begin), base + r * n, n, x, n, next);
    }
  }
#else
  (void)kernel;
#endif
  for (; r < row_end; ++r) out[r - row_begin] = dot_f16_row(base + r * n, x, n);
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
#if defined(SNAPKV_NEON_KERNELS)
  Acc16 acc;
  for (size_t b = 0; b < n_blocks; ++b) {
    SNAPKV_ISA::decode_block(buf, blocks[b]);
    const float* xb = x + b * kN;
    for (size_t j = 0; j < kN; j += 16) {
      for (size_t k = 0; k < 4; ++k) {
        acc.v[k] = vfmaq_f32(acc.v[k], vld1q_f32(buf + j + 4 * k), vld1q_f32(xb + j + 4 * k));
      }
    }
  }
  return hsum(acc);
#elif SNAPKV_GEMM_AVX2
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
  if (w.type == WeightType::f16) {
    gemv_f16(out, x, w, row_begin, row_end, ops_internal::kDefaultF16GemvKernel);
    return;
  }
  for (size_t r = row_begin; r < row_end; ++r) {
    const uint8_t* p = row_ptr(w, r);
    float& o = out[r - row_begin];
    switch (w.type) {
      case WeightType::f32:
        o = SNAPKV_ISA::dot(reinterpret_cast<const float*>(p), x, w.cols);
        break;
      case WeightType::f16:  // gemv_f16 above, for a whole range
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

void gemv_rows_f16(float* out, const float* x, const WeightMatrix& w, size_t row_begin,
                   size_t row_end, ops_internal::F16GemvKernel kernel) {
  gemv_f16(out, x, w, row_begin, row_end, kernel);
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
