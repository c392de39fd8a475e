// Question-agnostic row scorers as pure functions over plain arrays (higher score = keep), each
// with a plain double-precision reference that the tests hold it to. The policies keydiff and
// expected_attention (src/kv/*_policy.cpp) call them and select with select_rows.
//
// keydiff (KeyDiff, arXiv 2504.15364): anchor a = mean over the candidates of the unit keys
//   k_i / |k_i| (a zero key counts as the zero vector); score_i = -cos(k_i, a), in [-1, 1]
//   (0 when k_i or a is zero). Needs no queries: keys far from the common direction are kept.
//
// expected_attention (Expected Attention, arXiv 2510.00636): the next queries of each query head
//   g of the KV head's group are modelled as a Gaussian with the mean mu_g and covariance Sigma_g
//   (1/n normalisation) of the n window query rows the cache was given. With z = q.k / sqrt(d),
//   E[exp(z)] = exp(mu_g.k / sqrt(d) + k^T Sigma_g k / (2 d)); these are normalised over the
//   non-sink candidates (a softmax of the exponents), averaged over the group, and multiplied by
//   |v_i| (the value norm: a row moves the output in proportion to it). Sink rows (the first
//   min(n_sink, n_rows)) are left out of the normalisation, as in the paper's implementation, and
//   get the largest non-sink score (they are kept anyway).
//   The paper models the next queries before RoPE and rotates the model by the mean rotation over
//   the next n positions; the cache holds rotated queries, so the policy first maps each sample
//   row to that form with expected_future_queries() (below) when it knows the model's RoPE
//   (SelectionInput::rope, set by the engine through LayerCache::set_rope). Mean and covariance
//   are linear-covariant, so the statistics of the mapped rows are exactly R mu and R Sigma R^T
//   of the pre-RoPE statistics (R the mean rotation). Without RoPE parameters (a lone cache) the
//   rotated rows are used as they are. Without queries (proxy mode) the last `window` keys are
//   the sample, mapped the same way.
// Leaves out: selection (select_rows), pooling (these scorers do not pool).
#pragma once

#include <cstddef>
#include <cstdint>

#include "snapkv/ops/rope.h"

namespace snapkv {

// out [n_rows]; keys [n_rows][head_dim]; n_rows, head_dim >= 1.
void keydiff_scores(float* out, const float* keys, size_t n_rows, size_t head_dim);
void keydiff_scores_ref(double* out, const float* keys, size_t n_rows, size_t head_dim);

// out [n_rows]; keys, values [n_rows][head_dim]; queries [n_group][n_window][head_dim] (the
// sample of each query head of the group). n_rows, head_dim, n_group, n_window >= 1; n_sink may
// exceed n_rows (then every row is a sink and every score is 1).
void expected_attention_scores(float* out, const float* keys, const float* values, size_t n_rows,
                               size_t head_dim, const float* queries, size_t n_group,
                               size_t n_window, size_t n_sink);
void expected_attention_scores_ref(double* out, const float* keys, const float* values,
                                   size_t n_rows, size_t head_dim, const float* queries,
                                   size_t n_group, size_t n_window, size_t n_sink);

// The RoPE step of expected_attention. sample [n][head_dim]: rows rotated by RoPE at their
// positions [n] (each >= 0 and < next_position); out [n][head_dim]: each row un-rotated to its
// pre-RoPE form x and rotated by the mean rotation of the next n_future positions,
//   out_r = (1 / n_future) * sum_{j < n_future} R(next_position + j) x_r
//         = (1 / n_future) * sum_{j < n_future} R(next_position + j - positions[r]) sample_r,
// pair by pair in the layout of `rope` (dimensions >= rope.n_rot unchanged). Angles in double.
// n, head_dim, n_future >= 1; head_dim >= rope.n_rot; std::invalid_argument otherwise.
void expected_future_queries(float* out, const float* sample, const int64_t* positions, size_t n,
                             size_t head_dim, int64_t next_position, size_t n_future,
                             const RopeParams& rope);

}  // namespace snapkv
