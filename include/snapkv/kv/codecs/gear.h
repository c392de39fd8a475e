// GEAR codec (arXiv 2403.05527, "GEAR: an efficient KV cache compression recipe"): a KIVI store
// (include/snapkv/kv/codecs/kivi.h, at gear_bits) whose quantized rows carry two corrections of
// their quantization error, so that a row decodes as
//   x' = D + L + S        D: the KIVI decode, L: a low-rank term, S: a sparse term.
// Promises: the byte layouts below (pinned by static_assert), exact bytes(), the no-drift eviction
// of KIVI extended to the corrections (kept rows keep their factors and sparse entries, nothing
// is recomputed), and attention over the stored form: q.x' = q.D + (B q).a + sum q_c s_c, and
// sum_r w_r x'_r = sum_r w_r D_r + B^T (sum_r w_r a_r) + sparse scatter, without a decoded copy.
// Leaves out: the paper's outlier extraction before quantization (here the
// sparse term holds the entries with the largest error left after D and L), and its streaming
// buffer (the KIVI fp16 residual plays that role).
//
// Segments. The corrections are computed when the KIVI store quantizes its residual: each flush
// of R rows is one segment. For the segment's error E = X - D ([R][head_dim], X the fp16 rows):
//   1. L = A B with B [r][head_dim] the top-r right singular vectors of E (low_rank_factor below)
//      and A = E B^T [R][r]; both rounded to fp16.
//   2. k = round(gear_sparse * R * head_dim) entries with the largest |E - L| (L from the rounded
//      factors; ties to the lower row-major index) are kept: S = X - D - L there, in fp16.
// Decode (fp32, -ffp-contract=off): x'_c = D_c + sum_k a_k * b_kc, then + s_c where a sparse
// entry exists. Per element, away from sparse entries, |x - x'| is the rank-r residual of E plus
// the fp16 rounding of the factors; at a sparse entry it is the fp16 rounding of s.
//
// Layout of the corrections (after the KIVI record in a .kvc store record, kv/file/kvc_format.h):
//   KvcGearCorrection header (counts)
//   GearSegment  segments[n_segments]           row_end of each segment in the quantized region
//   fp16         basis[n_segments][r][head_dim] B of each segment
//   fp16         coeffs[n_quant][r]             a of each quantized row
//   uint16       sparse_count[n_quant]          sparse entries of each row
//   GearSparse   sparse[n_sparse]               by row, channels strictly increasing in a row
// bytes() adds exactly these arrays (the header is not stored in memory and not counted).
#pragma once

#include <cstddef>
#include <cstdint>

#include "snapkv/util/fp16.h"

namespace snapkv {

struct GearSegment {
  uint32_t row_end;  // segment rows are [previous row_end, row_end) of the quantized region
};
static_assert(sizeof(GearSegment) == 4, "GearSegment is one uint32");

struct GearSparse {
  uint16_t channel;  // < head_dim
  fp16_t value;      // s = x - D - L at that channel
};
static_assert(sizeof(GearSparse) == 4, "GearSparse is uint16 channel + binary16 value");
static_assert(offsetof(GearSparse, value) == 2, "GearSparse field order");

// Best rank-r approximation of e ([n][d], fp32) in the Frobenius norm: e ~= a b with b [r][d]
// orthonormal rows (the top-r right singular vectors, from a cyclic Jacobi eigendecomposition of
// e^T e in double) and a = e b^T [n][r]. Directions of zero singular value give zero rows of b
// (and zero columns of a). Requires 1 <= r < d and n >= 1 (std::invalid_argument otherwise).
// Deterministic: the same e gives bit-identical factors.
void low_rank_factor(float* a, float* b, const float* e, size_t n, size_t d, size_t r);

}  // namespace snapkv
