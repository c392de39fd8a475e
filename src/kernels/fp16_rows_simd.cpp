// The fp16 row kernels of kernels/fp16_rows.h, compiled once per ISA level (kernels/isa.h): F16C
// (NEON fcvtl at the arm64 levels) converts, FMA accumulates, 8 lanes at the avx2 level, 16 at
// avx512 and 4 at neon / neon_dot; the scalar level (and a head_dim that is not a multiple of the
// lane count) runs the scalar references.
//   dot:        two rows in flight, each converted once and dotted with up to 4 queries (8
//               accumulators); the 4 sums of a row are reduced together (one hadd tree).
//   accumulate: a tile of rows per slice of 2 vectors of channels, the slice's outputs for up to
//               4 queries held in registers over the tile (loaded and stored once per tile).
//   Both prefetch the rows `prefetch` bytes ahead (kernels/fp16_rows.h,
//   fp16_rows_prefetch_bytes).
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "kernels/fp16_rows.h"
#include "kernels/isa.h"
#include "kernels/unroll.h"
#include "kernels/vec.h"

namespace snapkv::SNAPKV_ISA {
namespace {

#if SNAPKV_VEC

// The queries' accumulators are arrays VecF acc[NQ], every loop over them unroll<NQ>
// (kernels/unroll.h).

// acc[j] += q[j * q_stride] * x for j < NQ.
template <int NQ>
inline void fma_rows(VecF (&acc)[NQ], const float* q, size_t q_stride, VecF x) {
  unroll<NQ>([&](auto j) { acc[j] = fma(load<VecF>(q + j * q_stride), x, acc[j]); });
}

// out[j * stride] = the sum of acc[j]'s lanes for j < NQ (the four sums in one pass, a query past
// NQ summing zeros).
template <int NQ>
inline void store_row_sums(float* out, size_t stride, const VecF (&acc)[NQ]) {
  const auto folded = [&](auto j) {
    if constexpr (j < NQ) {
      return fold(acc[j]);
    } else {
      return fold(zero<VecF>());
    }
  };
  alignas(16) float sums[4];
  store(sums,
        hsum4(folded(std::integral_constant<int, 0>{}), folded(std::integral_constant<int, 1>{}),
              folded(std::integral_constant<int, 2>{}), folded(std::integral_constant<int, 3>{})));
  unroll<NQ>([&](auto j) { out[j * stride] = sums[j]; });
}

// Touches the cache lines of [p + ahead, p + ahead + bytes): a software prefetch `ahead` bytes in
// front of the rows being read (prefetch instructions never fault, past the end included), with
// the T2 hint (docs/KERNELS.md, fp16 rows: what the hints measured).
inline void prefetch_lines(const fp16_t* p, size_t bytes, size_t ahead) {
  // integer arithmetic: the address may lie past the end of the rows' array
  const uintptr_t first = reinterpret_cast<uintptr_t>(p) + ahead;
  for (size_t b = 0; b < bytes; b += 64) prefetch_t2(reinterpret_cast<const void*>(first + b));
}

// NQ (<= 4) queries q: [NQ][head_dim] against rows [0, n); head_dim % kLanes == 0.
template <int NQ>
void dot_nq(float* out, size_t stride, const float* q, const fp16_t* data, size_t n,
            size_t head_dim, size_t prefetch) {
  size_t i = 0;
  for (; i + 2 <= n; i += 2) {
    const fp16_t* r0 = data + i * head_dim;
    const fp16_t* r1 = r0 + head_dim;
    if (prefetch != 0) prefetch_lines(r0, 2 * head_dim * sizeof(fp16_t), prefetch);
    VecF s0[NQ], s1[NQ];
    unroll<NQ>([&](auto j) { s0[j] = s1[j] = zero<VecF>(); });
    for (size_t c = 0; c < head_dim; c += kLanes) {
      const VecF x0 = load_h<VecF>(r0 + c), x1 = load_h<VecF>(r1 + c);
      unroll<NQ>([&](auto j) {
        const VecF qv = load<VecF>(q + j * head_dim + c);
        s0[j] = fma(qv, x0, s0[j]);
        s1[j] = fma(qv, x1, s1[j]);
      });
    }
    store_row_sums<NQ>(out + i, stride, s0);
    store_row_sums<NQ>(out + i + 1, stride, s1);
  }
  if (i < n) {
    VecF s0[NQ];
    unroll<NQ>([&](auto j) { s0[j] = zero<VecF>(); });
    const fp16_t* r0 = data + i * head_dim;
    for (size_t c = 0; c < head_dim; c += kLanes) {
      fma_rows<NQ>(s0, q + c, head_dim, load_h<VecF>(r0 + c));
    }
    store_row_sums<NQ>(out + i, stride, s0);
  }
}

// Rows per tile of the accumulate kernel: 32 rows of head_dim 128 are 8 KiB of fp16 (L1).
constexpr size_t kTileRows = 32;

template <int NQ>
inline void load_acc(VecF (&acc)[NQ], const float* out, size_t head_dim) {
  unroll<NQ>([&](auto j) { acc[j] = load<VecF>(out + j * head_dim); });
}
template <int NQ>
inline void store_acc(float* out, size_t head_dim, const VecF (&acc)[NQ]) {
  unroll<NQ>([&](auto j) { store(out + j * head_dim, acc[j]); });
}

// out: [NQ][head_dim] += sum over rows [0, n) of w[j * stride + i] * row i; head_dim % kLanes == 0.
template <int NQ>
void accumulate_nq(float* out, const float* w, size_t stride, const fp16_t* data, size_t n,
                   size_t head_dim, size_t prefetch) {
  for (size_t i0 = 0; i0 < n; i0 += kTileRows) {
    const size_t i1 = std::min(n, i0 + kTileRows);
    if (prefetch != 0) {
      prefetch_lines(data + i0 * head_dim, (i1 - i0) * head_dim * sizeof(fp16_t), prefetch);
    }
    size_t c = 0;
    for (; c + 2 * kLanes <= head_dim; c += 2 * kLanes) {
      VecF lo[NQ], hi[NQ];
      load_acc<NQ>(lo, out + c, head_dim);
      load_acc<NQ>(hi, out + c + kLanes, head_dim);
      for (size_t i = i0; i < i1; ++i) {
        const fp16_t* row = data + i * head_dim + c;
        const VecF x0 = load_h<VecF>(row), x1 = load_h<VecF>(row + kLanes);
        unroll<NQ>([&](auto j) {
          const VecF b = bcast<VecF>(w + j * stride + i);
          lo[j] = fma(b, x0, lo[j]);
          hi[j] = fma(b, x1, hi[j]);
        });
      }
      store_acc<NQ>(out + c, head_dim, lo);
      store_acc<NQ>(out + c + kLanes, head_dim, hi);
    }
    if (c < head_dim) {  // one vector of channels left
      VecF lo[NQ];
      load_acc<NQ>(lo, out + c, head_dim);
      for (size_t i = i0; i < i1; ++i)
        fma_bcast<NQ>(lo, w + i, stride, load_h<VecF>(data + i * head_dim + c));
      store_acc<NQ>(out + c, head_dim, lo);
    }
  }
}

template <class F>
void for_query_groups(size_t n_q, F&& f) {
  for (size_t j0 = 0; j0 < n_q; j0 += 4) {
    switch (std::min<size_t>(4, n_q - j0)) {
      case 1:
        f(j0, std::integral_constant<int, 1>{});
        break;
      case 2:
        f(j0, std::integral_constant<int, 2>{});
        break;
      case 3:
        f(j0, std::integral_constant<int, 3>{});
        break;
      default:
        f(j0, std::integral_constant<int, 4>{});
    }
  }
}

#endif  // SNAPKV_VEC

}  // namespace

void fp16_rows_dot(float* out, size_t stride, const float* q, size_t n_q, const fp16_t* data,
                   size_t n, size_t head_dim, size_t prefetch) {
#if SNAPKV_VEC
  if (head_dim % kLanes == 0) {
    for_query_groups(n_q, [&](size_t j0, auto nq) {
      dot_nq<decltype(nq)::value>(out + j0 * stride, stride, q + j0 * head_dim, data, n, head_dim,
                                  j0 == 0 ? prefetch : 0);
    });
    return;
  }
#endif
  (void)prefetch;
  snapkv::fp16_rows_dot_scalar(out, stride, q, n_q, data, n, head_dim);
}

void fp16_rows_accumulate(float* out, const float* w, size_t stride, size_t n_q, const fp16_t* data,
                          size_t n, size_t head_dim, size_t prefetch) {
#if SNAPKV_VEC
  if (head_dim % kLanes == 0) {
    for_query_groups(n_q, [&](size_t j0, auto nq) {
      accumulate_nq<decltype(nq)::value>(out + j0 * head_dim, w + j0 * stride, stride, data, n,
                                         head_dim, j0 == 0 ? prefetch : 0);
    });
    return;
  }
#endif
  (void)prefetch;
  snapkv::fp16_rows_accumulate_scalar(out, w, stride, n_q, data, n, head_dim);
}

}  // namespace snapkv::SNAPKV_ISA
