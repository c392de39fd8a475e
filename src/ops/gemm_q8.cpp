// GemmPrecision::q8 for gemm.cpp: the activation row(s) quantized once (q8_act.cpp), then integer
// dots (q8_dot.cpp) of every weight row with them, rows spread over parallel_for. Handles Q8_0,
// Q4_0 (Q8_0 activations) and Q4_K, Q5_K, Q6_K (Q8_K activations); any other type is left to the
// caller's f32 path.
#include <algorithm>
#include <vector>

#include "ops/q8_dot.h"
#include "snapkv/util/parallel.h"

namespace snapkv::ops_internal {
namespace {

// Token rows per tile of matmul: one weight row (<= a few KiB) stays in L1 while it meets this many
// quantized activation rows (together a few tens of KiB, in L2).
constexpr size_t kTokenTile = 16;

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

template <class WBlock, class ABlock>
using DotFn = float (*)(const WBlock*, const ABlock*, size_t);

// Calls f(dot kernel) for a type with an integer kernel; false for the others.
template <class F>
bool with_q8_kernel(WeightType type, F&& f) {
  switch (type) {
    case WeightType::q8_0:
      f(&dot_q8_0_q8_0);
      return true;
    case WeightType::q4_0:
      f(&dot_q4_0_q8_0);
      return true;
    case WeightType::q4_K:
      f(&dot_q4_K_q8_K);
      return true;
    case WeightType::q5_K:
      f(&dot_q5_K_q8_K);
      return true;
    case WeightType::q6_K:
      f(&dot_q6_K_q8_K);
      return true;
    default:
      return false;
  }
}

template <class WBlock>
const WBlock* row_blocks(const WeightMatrix& w, size_t r) {
  return reinterpret_cast<const WBlock*>(static_cast<const uint8_t*>(w.data) + r * w.row_bytes());
}

// out [n_tokens][rows] = x [n_tokens][cols] W^T through quantized activations.
template <class WBlock, class ABlock>
void run(float* out, const float* x, const WeightMatrix& w, size_t n_tokens,
         DotFn<WBlock, ABlock> dot) {
  const size_t n_act_blocks = w.cols / kActBlockElems<ABlock>;
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
    for (size_t t0 = 0; t0 < n_tokens; t0 += kTokenTile) {
      const size_t t1 = std::min(n_tokens, t0 + kTokenTile);
      for (size_t r = r0; r < r1; ++r) {
        const WBlock* row = row_blocks<WBlock>(w, r);
        for (size_t t = t0; t < t1; ++t) {
          out[t * w.rows + r] = dot(row, act + t * n_act_blocks, w.cols);
        }
      }
    }
  });
}

}  // namespace

bool matmul_q8(float* out, const float* x, const WeightMatrix& w, size_t n_tokens) {
  return with_q8_kernel(w.type, [&](auto dot) { run(out, x, w, n_tokens, dot); });
}

}  // namespace snapkv::ops_internal
