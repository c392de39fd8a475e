// Weight-format-aware GEMV/GEMM: F32, F16, BF16, Q8_0, Q4_0 and Q2_K..Q6_K rows decoded inside
// the kernels. SIMD: one AVX2+F16C path per inner loop under SNAPKV_GEMM_AVX2, a scalar loop
// otherwise. Q4_0 and the K-quants decode one block at a time (quant_blocks.h) into a stack
// buffer and dot it with x. GemmPrecision::q8 hands Q8_0 / Q4_0 / Q4_K / Q5_K / Q6_K weights to
// gemm_q8.cpp (quantized activations, integer dots) instead.
#include "snapkv/ops/gemm.h"

#include <cblas.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "ops/hsum.h"
#include "ops/q8_dot.h"
#include "snapkv/ops/dot.h"
#include "snapkv/util/error.h"
#include "snapkv/util/parallel.h"

#if defined(__AVX2__) && defined(__F16C__) && defined(__FMA__)
#include <immintrin.h>
#define SNAPKV_GEMM_AVX2 1
#endif

namespace snapkv {
namespace {

constexpr size_t kTileBytes = size_t{4} << 20;  // fp32 scratch per dequantized tile

const uint8_t* row_ptr(const WeightMatrix& w, size_t r) {
  return static_cast<const uint8_t*>(w.data) + r * w.row_bytes();
}

#if SNAPKV_GEMM_AVX2
using ops_internal::hsum;
// 8 int8 at p -> 8 floats
__m256 load_i8x8(const int8_t* p) {
  int64_t bits;
  std::memcpy(&bits, p, sizeof bits);
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_cvtsi64_si128(bits)));
}
#endif

// dot(row, x) for one row of n elements, fp32 accumulation: ops/dot.h's kernels (2 x 8-lane
// FMA accumulators, then the shared hsum), which the quantized kernels below match.
float dot_f32(const float* row, const float* x, size_t n) {
  return dot(row, x, n);
}

float dot_f16(const fp16_t* row, const float* x, size_t n) {
  return snapkv::dot_f16(x, row, n);  // ops/dot.h takes the fp32 operand first
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
    decode_block(buf, blocks[b]);
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
    decode_block(buf, blocks[b]);
    for (size_t j = 0; j < kN; ++j) sum += buf[j] * x[b * kN + j];
  }
  return sum;
#endif
}

template <class Block>
void decode_row(float* out, const Block* blocks, size_t n) {
  constexpr size_t kN = kBlockElems<Block>;
  for (size_t b = 0; b < n / kN; ++b) decode_block(out + b * kN, blocks[b]);
}

// Element c of a row of Block, through the reference decoder (the block is copied first, so the
// row may have any alignment).
template <class Block>
float ref_value(const uint8_t* row, size_t c, float (*value)(const Block&, size_t)) {
  constexpr size_t kN = kBlockElems<Block>;
  Block block;
  std::memcpy(&block, row + (c / kN) * sizeof(Block), sizeof block);
  return value(block, c % kN);
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

void check_rows(const WeightMatrix& w, size_t row_begin, size_t row_end) {
  if (row_begin > row_end || row_end > w.rows) {
    throw_invalid("gemm", "row range out of bounds",
                  "[" + std::to_string(row_begin) + ", " + std::to_string(row_end) + ")",
                  "within [0, " + std::to_string(w.rows) + "]");
  }
}

// Precisions as ints: -1 = not read from the environment yet.
std::atomic<int> g_gemv_precision{-1};
std::atomic<int> g_matmul_precision{-1};

GemmPrecision parse_precision(const char* text) {
  const std::string s(text);
  if (s == "f32") return GemmPrecision::f32;
  if (s == "q8") return GemmPrecision::q8;
  throw_invalid("gemm", "SNAPKV_GEMM_PRECISION not a known precision", s, "f32 or q8");
}

GemmPrecision load_precision(std::atomic<int>& slot, GemmPrecision fallback) {
  int v = slot.load(std::memory_order_relaxed);
  if (v < 0) {
    const char* env = std::getenv("SNAPKV_GEMM_PRECISION");
    const GemmPrecision p = env != nullptr && *env != '\0' ? parse_precision(env) : fallback;
    int expected = -1;
    slot.compare_exchange_strong(expected, static_cast<int>(p), std::memory_order_relaxed);
    v = slot.load(std::memory_order_relaxed);
  }
  return static_cast<GemmPrecision>(v);
}

}  // namespace

namespace ops_internal {
// Rows per parallel task: enough work per task to amortise scheduling, enough tasks to balance.
size_t rows_per_task(size_t rows, size_t cols) {
  const size_t threads = static_cast<size_t>(std::max(1, num_threads()));
  const size_t min_rows = std::max<size_t>(1, 16384 / std::max<size_t>(cols, 1));
  const size_t balanced = (rows + threads * 4 - 1) / (threads * 4);
  return std::max(min_rows, balanced);
}
}  // namespace ops_internal
using ops_internal::rows_per_task;

const char* to_string(GemmPrecision p) {
  return p == GemmPrecision::q8 ? "q8" : "f32";
}

void set_gemm_precision(GemmPrecision p) {
  set_gemm_precision(p, p);
}

void set_gemm_precision(GemmPrecision gemv, GemmPrecision matmul) {
  g_gemv_precision.store(static_cast<int>(gemv), std::memory_order_relaxed);
  g_matmul_precision.store(static_cast<int>(matmul), std::memory_order_relaxed);
}

GemmPrecision gemv_precision() {
  return load_precision(g_gemv_precision, kDefaultGemvPrecision);
}

GemmPrecision matmul_precision() {
  return load_precision(g_matmul_precision, kDefaultMatmulPrecision);
}

size_t weight_block_size(WeightType type) {
  switch (type) {
    case WeightType::f32:
    case WeightType::f16:
    case WeightType::bf16:
      return 1;
    case WeightType::q8_0:
      return kQ8BlockSize;
    case WeightType::q4_0:
      return kQ4_0BlockSize;
    case WeightType::q2_K:
    case WeightType::q3_K:
    case WeightType::q4_K:
    case WeightType::q5_K:
    case WeightType::q6_K:
      return kQK_K;
  }
  throw_invalid("gemm", "unknown weight type", std::to_string(static_cast<int>(type)),
                "f32, f16, bf16, q8_0, q4_0, q2_K, q3_K, q4_K, q5_K or q6_K");
}

size_t weight_row_bytes(WeightType type, size_t cols) {
  const size_t bs = weight_block_size(type);
  if (cols % bs != 0) {
    throw_invalid("gemm",
                  std::string(to_string(type)) + " row length not a multiple of the block size",
                  std::to_string(cols), "a multiple of " + std::to_string(bs));
  }
  switch (type) {
    case WeightType::f32:
      return cols * sizeof(float);
    case WeightType::f16:
    case WeightType::bf16:
      return cols * sizeof(uint16_t);
    case WeightType::q8_0:
      return cols / bs * sizeof(BlockQ8_0);
    case WeightType::q4_0:
      return cols / bs * sizeof(BlockQ4_0);
    case WeightType::q2_K:
      return cols / bs * sizeof(BlockQ2_K);
    case WeightType::q3_K:
      return cols / bs * sizeof(BlockQ3_K);
    case WeightType::q4_K:
      return cols / bs * sizeof(BlockQ4_K);
    case WeightType::q5_K:
      return cols / bs * sizeof(BlockQ5_K);
    case WeightType::q6_K:
      return cols / bs * sizeof(BlockQ6_K);
  }
  return 0;  // unreachable: weight_block_size threw
}

size_t WeightMatrix::row_bytes() const {
  return weight_row_bytes(type, cols);
}

const char* to_string(WeightType type) {
  switch (type) {
    case WeightType::f32:
      return "f32";
    case WeightType::f16:
      return "f16";
    case WeightType::q8_0:
      return "q8_0";
    case WeightType::bf16:
      return "bf16";
    case WeightType::q4_0:
      return "q4_0";
    case WeightType::q2_K:
      return "q2_K";
    case WeightType::q3_K:
      return "q3_K";
    case WeightType::q4_K:
      return "q4_K";
    case WeightType::q5_K:
      return "q5_K";
    case WeightType::q6_K:
      return "q6_K";
  }
  return "?";
}

void validate_weight(const WeightMatrix& w, const char* what) {
  if (w.data == nullptr) throw_invalid("gemm", std::string(what) + ": null data", "null", "data");
  if (w.rows == 0 || w.cols == 0) {
    throw_invalid("gemm", std::string(what) + ": empty matrix",
                  std::to_string(w.rows) + "x" + std::to_string(w.cols), "rows, cols > 0");
  }
  (void)w.row_bytes();  // throws for an unknown type or a width that is not whole blocks
}

void dequantize_rows(float* out, const WeightMatrix& w, size_t row_begin, size_t row_end) {
  check_rows(w, row_begin, row_end);
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

void dequantize_rows_ref(float* out, const WeightMatrix& w, size_t row_begin, size_t row_end) {
  check_rows(w, row_begin, row_end);
  for (size_t r = row_begin; r < row_end; ++r) {
    float* o = out + (r - row_begin) * w.cols;
    const uint8_t* p = row_ptr(w, r);
    for (size_t c = 0; c < w.cols; ++c) {
      switch (w.type) {
        case WeightType::f32: {
          float v;
          std::memcpy(&v, p + c * sizeof(float), sizeof v);
          o[c] = v;
          break;
        }
        case WeightType::f16: {
          fp16_t h;
          std::memcpy(&h, p + c * sizeof(fp16_t), sizeof h);
          o[c] = fp16_to_fp32(h);
          break;
        }
        case WeightType::q8_0: {
          BlockQ8_0 block;
          std::memcpy(&block, p + (c / kQ8BlockSize) * sizeof(BlockQ8_0), sizeof block);
          o[c] = fp16_to_fp32(block.d) * static_cast<float>(block.qs[c % kQ8BlockSize]);
          break;
        }
        case WeightType::bf16: {
          uint16_t h;
          std::memcpy(&h, p + c * sizeof(uint16_t), sizeof h);
          o[c] = bf16_bits_to_fp32(h);
          break;
        }
        case WeightType::q4_0:
          o[c] = ref_value<BlockQ4_0>(p, c, q4_0_value);
          break;
        case WeightType::q2_K:
          o[c] = ref_value<BlockQ2_K>(p, c, q2_K_value);
          break;
        case WeightType::q3_K:
          o[c] = ref_value<BlockQ3_K>(p, c, q3_K_value);
          break;
        case WeightType::q4_K:
          o[c] = ref_value<BlockQ4_K>(p, c, q4_K_value);
          break;
        case WeightType::q5_K:
          o[c] = ref_value<BlockQ5_K>(p, c, q5_K_value);
          break;
        case WeightType::q6_K:
          o[c] = ref_value<BlockQ6_K>(p, c, q6_K_value);
          break;
      }
    }
  }
}

void gemv(float* out, const float* x, const WeightMatrix& w) {
  gemv(out, x, w, gemv_precision());
}

void gemv(float* out, const float* x, const WeightMatrix& w, GemmPrecision precision) {
  validate_weight(w, "gemv weight");
  if (precision == GemmPrecision::q8 && ops_internal::matmul_q8(out, x, w, 1)) return;
  const size_t per_task = rows_per_task(w.rows, w.cols);
  const size_t n_tasks = (w.rows + per_task - 1) / per_task;
  parallel_for(n_tasks, [&](size_t task) {
    const size_t r0 = task * per_task;
    const size_t r1 = std::min(w.rows, r0 + per_task);
    for (size_t r = r0; r < r1; ++r) {
      const uint8_t* p = row_ptr(w, r);
      switch (w.type) {
        case WeightType::f32:
          out[r] = dot_f32(reinterpret_cast<const float*>(p), x, w.cols);
          break;
        case WeightType::f16:
          out[r] = dot_f16(reinterpret_cast<const fp16_t*>(p), x, w.cols);
          break;
        case WeightType::q8_0:
          out[r] = dot_q8_0(reinterpret_cast<const BlockQ8_0*>(p), x, w.cols);
          break;
        case WeightType::bf16:
          out[r] = dot_bf16(reinterpret_cast<const uint16_t*>(p), x, w.cols);
          break;
        default:
          with_block_type(w.type, [&](const auto* tag) {
            using Block = std::remove_cv_t<std::remove_pointer_t<decltype(tag)>>;
            out[r] = dot_blocks(reinterpret_cast<const Block*>(p), x, w.cols);
          });
          break;
      }
    }
  });
}

bool blas_allowed() {
  static const bool allowed = [] {
    rlimit lim{};
    return ::getrlimit(RLIMIT_AS, &lim) != 0 || lim.rlim_cur == RLIM_INFINITY;
  }();
  return allowed;
}

void sgemm_nt(float* c, const float* a, const float* b, size_t m, size_t n, size_t k, float alpha,
              size_t ldc) {
  if (m == 0 || n == 0) return;
  if (blas_allowed()) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(m), static_cast<int>(n),
                static_cast<int>(k), alpha, a, static_cast<int>(k), b, static_cast<int>(k), 0.0f, c,
                static_cast<int>(ldc));
    return;
  }
  parallel_for(m, [&](size_t i) {
    for (size_t j = 0; j < n; ++j) c[i * ldc + j] = alpha * dot_f32(b + j * k, a + i * k, k);
  });
}

void matmul(float* out, const float* x, const WeightMatrix& w, size_t n_tokens) {
  matmul(out, x, w, n_tokens, n_tokens < kGemmMinTokens ? gemv_precision() : matmul_precision());
}

void matmul(float* out, const float* x, const WeightMatrix& w, size_t n_tokens,
            GemmPrecision precision) {
  validate_weight(w, "matmul weight");
  if (n_tokens == 0) return;
  if (precision == GemmPrecision::q8 && ops_internal::matmul_q8(out, x, w, n_tokens)) return;
  if (n_tokens < kGemmMinTokens || !blas_allowed()) {
    for (size_t t = 0; t < n_tokens; ++t) {
      gemv(out + t * w.rows, x + t * w.cols, w, GemmPrecision::f32);
    }
    return;
  }
  const int m = static_cast<int>(n_tokens), k = static_cast<int>(w.cols);
  if (w.type == WeightType::f32) {  // used in place, one sgemm
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, static_cast<int>(w.rows), k, 1.0f, x, k,
                static_cast<const float*>(w.data), k, 0.0f, out, static_cast<int>(w.rows));
    return;
  }
  // Tile of rows: dequantize (threaded) into scratch [tile][cols], then one sgemm into the
  // matching columns of out.
  const size_t tile = std::clamp<size_t>(kTileBytes / (w.cols * sizeof(float)), 16, w.rows);
  thread_local std::vector<float> scratch;
  scratch.resize(tile * w.cols);
  for (size_t r0 = 0; r0 < w.rows; r0 += tile) {
    const size_t n_rows = std::min(tile, w.rows - r0);
    const size_t per_task = rows_per_task(n_rows, w.cols);
    const size_t n_tasks = (n_rows + per_task - 1) / per_task;
    float* dst = scratch.data();
    parallel_for(n_tasks, [&](size_t task) {
      const size_t a = task * per_task;
      const size_t b = std::min(n_rows, a + per_task);
      dequantize_rows(dst + a * w.cols, w, r0 + a, r0 + b);
    });
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, static_cast<int>(n_rows), k, 1.0f, x, k,
                dst, k, 0.0f, out + r0, static_cast<int>(w.rows));
  }
}

void matmul_ref(float* out, const float* x, const WeightMatrix& w, size_t n_tokens) {
  validate_weight(w, "matmul_ref weight");
  std::vector<float> row(w.cols);
  for (size_t r = 0; r < w.rows; ++r) {
    dequantize_rows_ref(row.data(), w, r, r + 1);
    for (size_t t = 0; t < n_tokens; ++t) {
      double sum = 0.0;
      for (size_t c = 0; c < w.cols; ++c) {
        sum += static_cast<double>(row[c]) * static_cast<double>(x[t * w.cols + c]);
      }
      out[t * w.rows + r] = static_cast<float>(sum);
    }
  }
}

void set_blas_threads(int n) {
  if (!blas_allowed()) return;  // more OpenBLAS threads would each want a 128 MiB buffer
  openblas_set_num_threads(std::max(1, n));
}

int blas_threads() {
  return openblas_get_num_threads();
}

}  // namespace snapkv
