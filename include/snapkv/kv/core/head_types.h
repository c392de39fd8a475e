// Head types (DuoAttention's idea, arXiv 2410.10819): some KV heads of a model only ever look at
// the first rows (the attention sinks) and the most recent ones ("streaming heads"); the others
// fetch from anywhere in the context ("retrieval heads"). Under head_allocation duo / duo_ada
// (method prefix duo-) a streaming head keeps its sinks and most recent rows only, and the rows it
// frees go to the retrieval heads of the same layer.
//
// Per layer with per-head budget b (kv/core/allocation.h), H KV heads of which S stream and
// n_h candidates in head h:
//   a streaming head keeps k_h = min(n_h, s) rows, s = min(b, n_sink + duo_recent): its first
//     min(n_sink, k_h) rows and its last k_h - min(n_sink, k_h) rows (StreamingLLM's choice);
//   the retrieval heads share T = min(H b - sum of the streaming k_h, sum of their n_h) rows:
//     duo: each gets floor(T / R) (+ 1 for the first T mod R heads), and what a head cannot hold
//       (n_h below its share) goes to the next heads with room, in head order; each keeps its
//       share by the policy's selection;
//     duo_ada: AdaKV's selection over the retrieval heads (allocation.h) with T rows in all.
//   A layer whose heads all stream keeps S k_h rows (nothing to give the freed rows to).
// Which heads stream is the model's (model/head_types.h measures it); the cache receives a mask
// per layer (LayerCache::set_head_types). Leaves out: measuring the heads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "snapkv/kv/core/config.h"

namespace snapkv {

// Rows a streaming head keeps at most: min(budget, n_sink + duo_recent).
size_t duo_streaming_rows(const CacheConfig& config, size_t budget);

// A streaming head's kept candidate indices out of n_rows: the first min(n_sink, keep) and the
// last keep - that, increasing (keep <= n_rows).
std::vector<uint32_t> streaming_keep(size_t n_rows, size_t keep, size_t n_sink);

// Per-head row counts of one layer (see above). streaming [H] (nonzero = streaming head), n_rows
// [H] candidates per head. `retrieval_total` is T (0 without retrieval heads).
struct DuoBudgets {
  std::vector<size_t> rows;  // [H]: what each head keeps (duo); streaming heads' k_h under duo_ada
  size_t retrieval_total = 0;
};
DuoBudgets duo_budgets(std::span<const uint8_t> streaming, std::span<const size_t> n_rows,
                       size_t budget, const CacheConfig& config);

// Which heads stream: retrieval_scores holds one score per head (higher = more retrieval); the
// round(fraction * size) heads of lowest score stream (ties: the earlier index first). Returns a
// mask of the same size (1 = streaming). fraction in [0, 1].
std::vector<uint8_t> streaming_heads(std::span<const float> retrieval_scores, double fraction);

// The measurement behind a head's retrieval score: the attention probabilities `probs` [q + 1]
// of the query at position q over positions 0..q; returns the probability mass outside
// [0, n_sink) and (q - recent, q], i.e. what a streaming head keeping n_sink sinks and `recent`
// recent rows would lose.
double mass_outside_window(std::span<const float> probs, size_t n_sink, size_t recent);

}  // namespace snapkv
