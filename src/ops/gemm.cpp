// Weight-format-aware GEMV/GEMM: F32, F16, BF16, Q8_0, Q4_0 and Q2_K..Q6_K rows decoded inside
// the kernels. Validation, threading, the BLAS calls and the double-precision references are
// here; the inner loops (row dots and dequantization) are the active ISA level's kernels
// (gemm_simd.cpp, dispatched through kernels/registry.h). GemmPrecision::q8 (and `fastest` where it
// resolves to q8) hands Q8_0 / Q4_0 / Q4_K / Q5_K / Q6_K weights to gemm_q8.cpp (quantized
// activations, integer dots) instead.
#include "snapkv/ops/gemm.h"

#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/registry.h"
#include "ops/cblas.h"
#include "ops/gemm_internal.h"
#include "snapkv/ops/dot.h"
#include "snapkv/util/error.h"
#include "snapkv/util/parallel.h"

namespace snapkv {
namespace {

constexpr size_t kTileBytes = size_t{4} << 20;  // fp32 scratch per dequantized tile (at most)
constexpr size_t kTileMaxRows = 256;            // weight rows per matmul task (at most)

// OpenBLAS runs one thread inside each of our tasks: its own pthread workers would spin beside
// ours on the same cores, and concurrent multi-threaded calls serialise on its level-3 lock.
// Pinned once, at the first product (apply_threads in the CLI pins it too).
void pin_blas_to_one_thread() {
  static const bool pinned = [] {
#if !defined(SNAPKV_BLAS_ACCELERATE)
    openblas_set_num_threads(1);
#endif
    return true;
  }();
  (void)pinned;
}

const uint8_t* row_ptr(const WeightMatrix& w, size_t r) {
  return static_cast<const uint8_t*>(w.data) + r * w.row_bytes();
}

// Element c of a row of Block, through the reference decoder (the block is copied first, so the
// row may have any alignment).
template <class Block>
float ref_value(const uint8_t* row, size_t c, float (*value)(const Block&, size_t)) {
  constexpr size_t kN = std::is_same_v<Block, BlockQ4_0> ? kQ4_0BlockSize : kQK_K;
  Block block;
  std::memcpy(&block, row + (c / kN) * sizeof(Block), sizeof block);
  return value(block, c % kN);
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
  if (s == "fastest") return GemmPrecision::fastest;
  throw_invalid("gemm", "SNAPKV_GEMM_PRECISION not a known precision", s, "f32, q8 or fastest");
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
  switch (p) {
    case GemmPrecision::f32:
      return "f32";
    case GemmPrecision::q8:
      return "q8";
    case GemmPrecision::fastest:
      return "fastest";
  }
  return "?";
}

GemmPrecision resolve_precision(GemmPrecision p, WeightType type, size_t n_tokens) {
  if (p != GemmPrecision::fastest) return p;
  if (n_tokens < kGemmMinTokens) return GemmPrecision::q8;
  return type == WeightType::q8_0 || type == WeightType::q4_0 ? GemmPrecision::q8
                                                              : GemmPrecision::f32;
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
  kernels::active().ops.dequantize_rows(out, w, row_begin, row_end);
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
  if (resolve_precision(precision, w.type, 1) == GemmPrecision::q8 &&
      ops_internal::matmul_q8(out, x, w, 1)) {
    return;
  }
  if (w.type == WeightType::f16) {
    ops_internal::gemv_f16(out, x, w, ops_internal::f16_gemv_kernel());
    return;
  }
  const size_t per_task = rows_per_task(w.rows, w.cols);
  const size_t n_tasks = (w.rows + per_task - 1) / per_task;
  const auto& kernels = kernels::active().ops;
  parallel_for(n_tasks, [&](size_t task) {
    const size_t r0 = task * per_task;
    const size_t r1 = std::min(w.rows, r0 + per_task);
    kernels.gemv_rows(out + r0, x, w, r0, r1);
  });
}

void gemv_multi(float* const* outs, const float* x, const WeightMatrix* ws, size_t count) {
  if (count == 0) return;
  constexpr size_t kMaxProducts = 8;
  if (count > kMaxProducts) {
    throw_invalid("gemm", "gemv_multi: too many products", std::to_string(count),
                  "at most " + std::to_string(kMaxProducts));
  }
  for (size_t i = 0; i < count; ++i) {
    validate_weight(ws[i], "gemv_multi weight");
    if (ws[i].cols != ws[0].cols) {
      throw_invalid("gemm", "gemv_multi: widths differ", std::to_string(ws[i].cols),
                    std::to_string(ws[0].cols) + " (the width of the first product)");
    }
  }
  // Per product: integer path (prepared activations) or the fp32 row kernels, as gemv decides;
  // then one parallel region over every product's tasks (the tasks of gemv, F16 ones in whole
  // groups of rows in flight), so each output has gemv's bits.
  // Per calling thread; the workers read the caller's copy through `act` (a thread_local named
  // inside the lambda would be each worker's own).
  thread_local ops_internal::Q8Activations act_storage;
  ops_internal::Q8Activations& act = act_storage;
  act.reset();
  const GemmPrecision precision = gemv_precision();
  struct Product {
    bool q8;
    size_t per_task, first_task;
  };
  Product products[kMaxProducts];
  size_t n_tasks = 0;
  for (size_t i = 0; i < count; ++i) {
    const WeightMatrix& w = ws[i];
    Product& p = products[i];
    p.q8 = resolve_precision(precision, w.type, 1) == GemmPrecision::q8 &&
           ops_internal::has_q8_kernel(w.type);
    if (p.q8) act.prepare(x, w.cols, w.type);
    p.per_task = rows_per_task(w.rows, w.cols);
    if (w.type == WeightType::f16) {
      constexpr size_t kGroup = ops_internal::kF16RowsInFlight;
      p.per_task = (p.per_task + kGroup - 1) / kGroup * kGroup;
    }
    p.first_task = n_tasks;
    n_tasks += (w.rows + p.per_task - 1) / p.per_task;
  }
  const auto& kernels = kernels::active().ops;
  const ops_internal::F16GemvKernel f16_kernel = ops_internal::f16_gemv_kernel();
  parallel_for(n_tasks, [&](size_t task) {
    size_t i = count - 1;
    while (products[i].first_task > task) --i;
    const Product& p = products[i];
    const WeightMatrix& w = ws[i];
    const size_t r0 = (task - p.first_task) * p.per_task;
    const size_t r1 = std::min(w.rows, r0 + p.per_task);
    if (p.q8) {
      ops_internal::gemv_q8_rows(outs[i] + r0, act, w, r0, r1);
    } else if (w.type == WeightType::f16) {
      kernels.gemv_rows_f16(outs[i] + r0, x, w, r0, r1, f16_kernel);
    } else {
      kernels.gemv_rows(outs[i] + r0, x, w, r0, r1);
    }
  });
}

namespace ops_internal {
F16GemvKernel f16_gemv_kernel() {
  static const F16GemvKernel kernel = [] {
    const char* env = std::getenv("SNAPKV_F16_GEMV");
    if (env == nullptr || *env == '\0') return kDefaultF16GemvKernel;
    const std::string s(env);
    if (s == "per_row") return F16GemvKernel::per_row;
    if (s == "rows") return F16GemvKernel::rows;
    if (s == "rows_prefetch") return F16GemvKernel::rows_prefetch;
    if (s == "row_acc8") return F16GemvKernel::row_acc8;
    if (s == "row_acc8_prefetch") return F16GemvKernel::row_acc8_prefetch;
    if (s == "by_width") return F16GemvKernel::by_width;
    throw_invalid("gemm", "SNAPKV_F16_GEMV not a known kernel", s,
                  "per_row, rows, rows_prefetch, row_acc8, row_acc8_prefetch or by_width");
  }();
  return kernel;
}

void gemv_f16(float* out, const float* x, const WeightMatrix& w, F16GemvKernel kernel) {
  validate_weight(w, "gemv_f16 weight");
  if (w.type != WeightType::f16) {
    throw_invalid("gemm", "gemv_f16 on another weight type", to_string(w.type), "f16");
  }
  // Tasks of whole groups of rows in flight, so only the matrix's last task has a partial group.
  constexpr size_t kGroup = kF16RowsInFlight;
  const size_t per_task = (rows_per_task(w.rows, w.cols) + kGroup - 1) / kGroup * kGroup;
  const size_t n_tasks = (w.rows + per_task - 1) / per_task;
  const auto& kernels = kernels::active().ops;
  parallel_for(n_tasks, [&](size_t task) {
    const size_t r0 = task * per_task;
    const size_t r1 = std::min(w.rows, r0 + per_task);
    kernels.gemv_rows_f16(out + r0, x, w, r0, r1, kernel);
  });
}
}  // namespace ops_internal

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
    pin_blas_to_one_thread();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(m), static_cast<int>(n),
                static_cast<int>(k), alpha, a, static_cast<int>(k), b, static_cast<int>(k), 0.0f, c,
                static_cast<int>(ldc));
    return;
  }
  parallel_for(m, [&](size_t i) {
    for (size_t j = 0; j < n; ++j) c[i * ldc + j] = alpha * dot(b + j * k, a + i * k, k);
  });
}

void matmul(float* out, const float* x, const WeightMatrix& w, size_t n_tokens) {
  matmul(out, x, w, n_tokens, n_tokens < kGemmMinTokens ? gemv_precision() : matmul_precision());
}

void matmul(float* out, const float* x, const WeightMatrix& w, size_t n_tokens,
            GemmPrecision precision) {
  validate_weight(w, "matmul weight");
  if (n_tokens == 0) return;
  if (resolve_precision(precision, w.type, n_tokens) == GemmPrecision::q8 &&
      ops_internal::matmul_q8(out, x, w, n_tokens)) {
    return;
  }
  if (n_tokens < kGemmMinTokens || !blas_allowed()) {
    for (size_t t = 0; t < n_tokens; ++t) {
      gemv(out + t * w.rows, x + t * w.cols, w, GemmPrecision::f32);
    }
    return;
  }
  // One thread pool: tiles of weight rows are spread over parallel_for, and each task dequantizes
  // its tile into its own scratch [tile][cols] (F32 rows are used in place) and runs a
  // single-threaded sgemm into the matching columns of out. The tiling depends on the shape only,
  // never on the thread count, so every thread count computes each output with the same call.
  pin_blas_to_one_thread();
  const int m = static_cast<int>(n_tokens), k = static_cast<int>(w.cols);
  const size_t tile = std::clamp<size_t>(kTileBytes / (w.cols * sizeof(float)), 16, kTileMaxRows);
  const size_t n_tiles = (w.rows + tile - 1) / tile;
  parallel_for(n_tiles, [&](size_t t) {
    const size_t r0 = t * tile;
    const size_t n_rows = std::min(tile, w.rows - r0);
    const float* rows = nullptr;
    if (w.type == WeightType::f32) {
      rows = reinterpret_cast<const float*>(row_ptr(w, r0));
    } else {
      thread_local std::vector<float> scratch;
      scratch.resize(n_rows * w.cols);
      dequantize_rows(scratch.data(), w, r0, r0 + n_rows);
      rows = scratch.data();
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, static_cast<int>(n_rows), k, 1.0f, x, k,
                rows, k, 0.0f, out + r0, static_cast<int>(w.rows));
  });
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
#if defined(SNAPKV_BLAS_ACCELERATE)
  (void)n;  // Accelerate schedules its own threads
#else
  openblas_set_num_threads(std::max(1, n));
#endif
}

int blas_threads() {
#if defined(SNAPKV_BLAS_ACCELERATE)
  return 1;
#else
  return openblas_get_num_threads();
#endif
}

}  // namespace snapkv
