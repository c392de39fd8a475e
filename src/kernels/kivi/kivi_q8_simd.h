// Shared by the integer KIVI key kernels (kivi_q8_simd.cpp: the query side and the entry points,
// kivi_q8_blocks_simd.cpp: the per-block dot kernels), compiled once per ISA level (kernels/isa.h):
// whether the level has AVX-512 VNNI, the query operands' layout, and the block kernels the
// entry points call (defined in kivi_q8_blocks_simd.cpp, in this level's namespace).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/isa.h"
#include "kernels/kivi/kivi_kernels.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__) && \
    defined(__AVX512VL__) && defined(__AVX512DQ__)
// GCC 12's AVX-512 intrinsics start from _mm512_undefined_*(), a self-initialised variable that
// -W(maybe-)uninitialized reports wherever they inline; silenced for the header's lines only.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#define SNAPKV_KIVI_VNNI 1
#endif

#if SNAPKV_KIVI_VNNI

// The loops over accumulators must unroll completely, or the accumulators live in memory.
#if defined(__clang__)
#define SNAPKV_UNROLL _Pragma("unroll")
#elif defined(__GNUC__)
#define SNAPKV_UNROLL _Pragma("GCC unroll 16")
#else
#define SNAPKV_UNROLL
#endif

namespace snapkv::SNAPKV_ISA::kivi_q8 {

// The query side of a pass over up to 4 queries (kivi_key_block_dot_q8_scalar): per query j its
// step, step2, qz, and the int8 parts of q', interleaved so that one pointer serves every
// multiply of a channel quad: per 16 channels (chunk) Parts vectors of 64 bytes (hi, then lo),
// dword 4 n + j of one holding quad n of the chunk for query j (the order packs_epi32 and
// packs_epi16 leave; absent queries are 0). Quad g's operands: ops + quad_offset<Parts>(g) +
// 64 part + 4 j.
struct QueryParams {
  alignas(16) float step[4], step2[4], qz[4], inv[4], inv2[4];
};

// The block kernels: out[f * out_stride + r] = q_f . k_r for the rows r < n_rows of one key block
// (words) and the nq (<= NQ) prepared queries f (ops, qp). 2-bit keys take one int8 part of q',
// 4-bit keys two (hi and lo); key_block_2bit_pair takes 4 queries in prepare_pair's operand order.
// NQ is 1, 2 or 4 (the instantiations kivi_q8_blocks_simd.cpp provides).
template <int NQ>
void key_block_2bit(float* out, size_t out_stride, size_t nq, const int8_t* ops,
                    const QueryParams& qp, const uint8_t* words, size_t n_rows, size_t head_dim);
template <int NQ>
void key_block_4bit(float* out, size_t out_stride, size_t nq, const int8_t* ops,
                    const QueryParams& qp, const uint8_t* words, size_t n_rows, size_t head_dim);
void key_block_2bit_pair(float* out, size_t out_stride, const int8_t* ops, const QueryParams& qp,
                         const uint8_t* words, size_t n_rows, size_t head_dim);

namespace {

template <int Parts>
constexpr size_t quad_offset(size_t g) {
  return g / 4 * 64 * Parts + g % 4 * 16;
}

}  // namespace
}  // namespace snapkv::SNAPKV_ISA::kivi_q8

#endif  // SNAPKV_KIVI_VNNI
