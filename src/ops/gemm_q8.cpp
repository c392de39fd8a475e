// GemmPrecision::q8 for gemm.cpp: the activation row(s) quantized once (kernels/q8_act.cpp), then
// the integer kernels of q8_dot.h over blocks of weight rows, spread over parallel_for. Handles
// Q8_0, Q4_0 (Q8_0 activations; the multi-row kernel, 8 weight rows x up to 8 activation rows per
// step, for one token as for a decode batch or a prefill) and Q4_K, Q5_K, Q6_K (Q8_K activations;
// the pair dots in a loop); any other type is left to the caller's f32 path. Each output has the
// bits of the per-pair dot (dot_* in q8_dot.h), whatever the batch, the tiling or the thread
// count: a greedy stream decodes the same alone or in a batch.
#include <algorithm>
#include <tuple>
#include <type_traits>
#include <vector>

#include "ops/gemm_internal.h"
#include "snapkv/util/error.h"
#include "snapkv/util/parallel.h"

namespace snapkv::ops_internal {
namespace {

template <class ABlock>
constexpr size_t kActBlockElems = kQK_K;
template <>
constexpr size_t kActBlockElems<BlockQ8_0> = kQ8BlockSize;

void quantize_act(BlockQ8_0* out, const float* x, size_t n) {
  quantize_act_q8_0(out, x, n);
}
void quantize_act(BlockQ8_K* out, const float* x, size_t n) {
  quantize_act_q8_K(out, x, n);
}

// out [n_tokens][ldo] for n_rows weight rows (q8_dot.h gemm_*).
template <class WBlock, class ABlock>
using GemmFn = void (*)(float*, size_t, const WBlock*, size_t, const ABlock*, size_t, size_t);

// The argument types of a GemmFn, as a tuple.
template <class F>
struct FnArgs;
template <class R, class... Args>
struct FnArgs<R (*)(Args...)> {
  using type = std::tuple<Args...>;
};

// Calls f(gemm kernel) for a type with an integer kernel; false for the others.
template <class F>
bool with_q8_kernel(WeightType type, F&& f) {
  switch (type) {
    case WeightType::q8_0:
      f(&gemm_q8_0_q8_0);
      return true;
    case WeightType::q4_0:
      f(&gemm_q4_0_q8_0);
      return true;
    case WeightType::q4_K:
      f(&gemm_q4_K_q8_K);
      return true;
    case WeightType::q5_K:
      f(&gemm_q5_K_q8_K);
      return true;
    case WeightType::q6_K:
      f(&gemm_q6_K_q8_K);
      return true;
    default:
      return false;
  }
}

// out [n_tokens][rows] = x [n_tokens][cols] W^T through quantized activations.
template <class WBlock, class ABlock>
void run(float* out, const float* x, const WeightMatrix& w, size_t n_tokens,
         GemmFn<WBlock, ABlock> gemm) {
  const size_t n_act_blocks = w.cols / kActBlockElems<ABlock>;
  const size_t row_bytes = w.row_bytes();
  // Per calling thread (the workers read it through `act` while this thread waits).
  thread_local std::vector<ABlock> act_storage;
  act_storage.resize(n_tokens * n_act_blocks);
  ABlock* act = act_storage.data();
  if (n_tokens == 1) {
    quantize_act(act, x, w.cols);
  } else {
    parallel_for(n_tokens,
                 [&](size_t t) { quantize_act(act + t * n_act_blocks, x + t * w.cols, w.cols); });
  }
  const size_t per_task = rows_per_task(w.rows, w.cols);
  const size_t n_tasks = (w.rows + per_task - 1) / per_task;
  parallel_for(n_tasks, [&](size_t task) {
    const size_t r0 = task * per_task;
    const size_t r1 = std::min(w.rows, r0 + per_task);
    const auto* rows =
        reinterpret_cast<const WBlock*>(static_cast<const uint8_t*>(w.data) + r0 * row_bytes);
    gemm(out + r0, w.rows, rows, r1 - r0, act, n_tokens, w.cols);
  });
}

// Rows [r0, r1) of w against one quantized activation row, as run() does for a single token.
template <class WBlock, class ABlock>
void rows_one_token(float* out, const ABlock* act, const WeightMatrix& w, size_t r0, size_t r1,
                    GemmFn<WBlock, ABlock> gemm) {
  const size_t row_bytes = w.row_bytes();
  const auto* rows =
      reinterpret_cast<const WBlock*>(static_cast<const uint8_t*>(w.data) + r0 * row_bytes);
  gemm(out, r1 - r0, rows, r1 - r0, act, 1, w.cols);
}

}  // namespace

bool has_q8_kernel(WeightType type) {
  return with_q8_kernel(type, [](auto) {});
}

void Q8Activations::prepare(const float* x, size_t cols, WeightType type) {
  with_q8_kernel(type, [&](auto gemm) {
    using ABlock = std::remove_cv_t<
        std::remove_pointer_t<std::tuple_element_t<4, typename FnArgs<decltype(gemm)>::type>>>;
    (void)gemm;
    if constexpr (std::is_same_v<ABlock, BlockQ8_0>) {
      if (q8_0_cols == cols) return;
      q8_0.resize(cols / kQ8BlockSize);
      quantize_act(q8_0.data(), x, cols);
      q8_0_cols = cols;
    } else {
      if (q8_K_cols == cols) return;
      q8_K.resize(cols / kQK_K);
      quantize_act(q8_K.data(), x, cols);
      q8_K_cols = cols;
    }
  });
}

void gemv_q8_rows(float* out, const Q8Activations& act, const WeightMatrix& w, size_t r0,
                  size_t r1) {
  with_q8_kernel(w.type, [&](auto gemm) {
    using ABlock = std::remove_cv_t<
        std::remove_pointer_t<std::tuple_element_t<4, typename FnArgs<decltype(gemm)>::type>>>;
    if constexpr (std::is_same_v<ABlock, BlockQ8_0>) {
      SNAPKV_CHECK(act.q8_0_cols == w.cols);
      rows_one_token(out, act.q8_0.data(), w, r0, r1, gemm);
    } else {
      SNAPKV_CHECK(act.q8_K_cols == w.cols);
      rows_one_token(out, act.q8_K.data(), w, r0, r1, gemm);
    }
  });
}

bool matmul_q8(float* out, const float* x, const WeightMatrix& w, size_t n_tokens) {
  return with_q8_kernel(w.type, [&](auto gemm) { run(out, x, w, n_tokens, gemm); });
}

}  // namespace snapkv::ops_internal
