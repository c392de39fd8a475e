// Mixing a learned prior with the observation window's attention (policy kvzap_snapkv, method
// names kvzap-snapkv and kvzap-proxy): per KV head, two per-row scores on unrelated scales, the
// prior (kvzap's learned estimate of KVzip's score, from each key alone) and the window's
// attention (snapkv's scores, with the real queries or the proxy keys), are each divided by their
// sum over the candidates the window scored, rows [n_sink, n_candidates) (the sinks are kept
// whatever they score, and would dominate a sum), so both become distributions over the same rows,
// and mixed:
//
//   out[i] = weight * prior[i] / P + (1 - weight) * window[i] / W,   i < n_candidates
//
// P and W the two sums. Rows from n_candidates on are the proxy's own window rows, which the proxy
// does not score against each other (kv/core/snapkv_score.h, proxy_candidate_scores): their window
// term is the largest of the candidates' (they rank as the best candidate would on the window's
// side) and their prior term their own, so they compete with the candidates on the prior. A sum
// of zero (a head whose candidates all score 0 on one side) leaves that side out.
// Leaves out: pooling (the policy pools the mixture as configured) and selection.
#pragma once

#include <cstddef>

namespace snapkv {

// out, prior, window: [n_rows]; prior and window >= 0 and finite; n_sink <= n_candidates <= n_rows;
// weight in [0, 1]. Throws std::invalid_argument "[prior_mix] ..." on bad sizes or weight.
void mix_prior_scores(float* out, const float* prior, const float* window, size_t n_rows,
                      size_t n_sink, size_t n_candidates, double weight);

}  // namespace snapkv
