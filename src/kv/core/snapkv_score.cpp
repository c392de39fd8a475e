// SnapKV window scores (sgemm logits + stable softmax per window row), pooling and selection.
#include "snapkv/kv/core/snapkv_score.h"

#include "kv/core/scratch.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "snapkv/ops/dot.h"
#include "snapkv/ops/gemm.h"
#include "snapkv/ops/pool.h"
#include "snapkv/ops/softmax.h"
#include "snapkv/ops/topk.h"
#include "snapkv/util/error.h"

namespace snapkv {
namespace {

// Query rows per pass (bounds the logits scratch to kRowChunk * n_rows floats, 32 MiB at 64K) and
// key columns per sgemm call (a [kRowChunk][kColBlock] logits tile, 512 KiB, stays in L2). The
// scratch holds the tiles one after another, [n_tiles][chunk][<= kColBlock]: a tile is contiguous,
// where rows of the whole [chunk][n_rows] matrix would put its rows n_rows floats apart (256 KiB
// at 64K rows, a stride that maps every row of the tile to the same cache sets).
constexpr size_t kRowChunk = 128;
constexpr size_t kColBlock = 1024;

void check_score_args(size_t n_rows, size_t head_dim, size_t n_group, size_t n_window) {
  if (n_rows == 0 || head_dim == 0 || n_group == 0 || n_window == 0) {
    throw_invalid("snapkv_score", "sizes must be positive",
                  "n_rows " + std::to_string(n_rows) + ", head_dim " + std::to_string(head_dim) +
                      ", n_group " + std::to_string(n_group) + ", n_window " +
                      std::to_string(n_window),
                  "all >= 1");
  }
  if (n_rows > static_cast<size_t>(std::numeric_limits<int>::max() / 2)) {
    throw_invalid("snapkv_score", "too many rows for BLAS", std::to_string(n_rows), "< 2^30");
  }
}

// The keys of one scoring call: fp32 rows [n_rows][head_dim] in memory, or (keys null) a reader.
struct KeyTiles {
  const float* keys = nullptr;
  const KeyRowReader* reader = nullptr;
  // Rows [c0, c0 + nc): a pointer into keys, or the rows read into buf [nc][head_dim].
  const float* rows(float* buf, size_t c0, size_t nc, size_t head_dim) const {
    if (keys != nullptr) return keys + c0 * head_dim;
    (*reader)(buf, c0, c0 + nc);
    return buf;
  }
};

// Scores from window rows [row_begin, row_begin + w) of each group head, where the query block of
// one head holds `rows_per_head` rows. Row row_begin + r is the r-th of the w used rows.
//
// One pass over the keys per chunk of query rows, column tile by column tile: sgemm the tile's
// logits, then (while the tile is in cache) fold it into each row's running max m and running sum
// l of exp(logit - m) (online softmax), storing exp(logit - m_tile) in place. A second sweep adds
// exp(logit - m_tile) * exp(m_tile - m) / l to the scores, reading each tile once. Masked
// (causal) columns are never exponentiated.
//
// The keys come from `keys` (KeyTiles): fp32 rows in memory, or a reader that writes one column
// tile into a per-thread buffer that stays in cache. Either way each sgemm_nt sees the same values
// with the same shape, so the scores are the same to the bit.
void window_scores_rows(float* out, const KeyTiles& keys, size_t n_rows, size_t head_dim,
                        const float* queries, size_t n_group, size_t rows_per_head,
                        size_t row_begin, size_t w, bool causal) {
  std::fill(out, out + n_rows, 0.0f);
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  const size_t n_total = n_group * w;  // query rows, ordered [n_group][w]
  const size_t n_tiles = (n_rows + kColBlock - 1) / kColBlock;
  const size_t chunk = std::min(kRowChunk, n_total);
  std::vector<float> q(chunk * head_dim);         // [chunk][head_dim] contiguous query rows
  const size_t ld = std::min(kColBlock, n_rows);  // a tile's row stride
  // [n_tiles][chunk][ld]: tile t at logits + t * chunk * ld
  float* logits = scratch_floats(ScratchSlot::logits, n_tiles * chunk * ld);
  std::vector<float> tile_max(chunk * n_tiles);  // [chunk][n_tiles] shift used per tile
  std::vector<float> row_max(chunk), row_sum(chunk);
  float* tile_keys =
      keys.keys != nullptr ? nullptr : scratch_floats(ScratchSlot::key_tile, kColBlock * head_dim);
  const float neg_inf = -std::numeric_limits<float>::infinity();
  for (size_t r0 = 0; r0 < n_total; r0 += chunk) {
    const size_t m = std::min(chunk, n_total - r0);
    for (size_t i = 0; i < m; ++i) {
      const size_t g = (r0 + i) / w, r = (r0 + i) % w;
      std::copy_n(queries + (g * rows_per_head + row_begin + r) * head_dim, head_dim,
                  q.data() + i * head_dim);
    }
    // Keys visible to chunk row i: [0, visible(i)). Window row r sits at index n_rows - w + r.
    const auto visible = [&](size_t i) { return causal ? n_rows - w + (r0 + i) % w + 1 : n_rows; };
    std::fill(row_max.begin(), row_max.end(), neg_inf);
    std::fill(row_sum.begin(), row_sum.end(), 0.0f);
    for (size_t t = 0; t < n_tiles; ++t) {
      const size_t c0 = t * kColBlock;
      const size_t nc = std::min(kColBlock, n_rows - c0);
      float* tile = logits + t * chunk * ld;
      sgemm_nt(tile, q.data(), keys.rows(tile_keys, c0, nc, head_dim), m, nc, head_dim, scale, ld);
      for (size_t i = 0; i < m; ++i) {
        const size_t end = std::min(visible(i), c0 + nc);
        float& shift = tile_max[i * n_tiles + t];
        if (end <= c0) {
          shift = neg_inf;  // the whole tile is masked for this row
          continue;
        }
        float* row = tile + i * ld;
        const float new_max = std::max(row_max[i], max_value(row, end - c0));
        const float tile_sum = exp_shift_sum(row, end - c0, new_max);
        row_sum[i] = row_sum[i] * exp_approx(row_max[i] - new_max) + tile_sum;
        row_max[i] = new_max;
        shift = new_max;
      }
    }
    for (size_t t = 0; t < n_tiles; ++t) {
      const size_t c0 = t * kColBlock;
      const size_t nc = std::min(kColBlock, n_rows - c0);
      for (size_t i = 0; i < m; ++i) {
        const float shift = tile_max[i * n_tiles + t];
        if (shift == neg_inf) continue;
        const size_t end = std::min(visible(i), c0 + nc);
        // row_sum >= 1: the row's maximum contributes exp(0).
        const float factor = exp_approx(shift - row_max[i]) / row_sum[i];
        axpy(out + c0, factor, logits + (t * chunk + i) * ld, end - c0);
      }
    }
  }
  const float inv = 1.0f / static_cast<float>(n_total);
  for (size_t j = 0; j < n_rows; ++j) out[j] *= inv;
}

// proxy_candidate_scores over KeyTiles: only the window's rows are read whole (they are the
// queries); the candidates before it are read tile by tile.
void proxy_candidate_scores_tiles(float* out, const KeyTiles& keys, size_t n_rows, size_t head_dim,
                                  size_t window) {
  const size_t w = std::min(window, n_rows);
  const size_t n_before = n_rows - w;
  std::vector<float> read_window;  // [w][head_dim] when keys come from a reader
  const float* window_keys = keys.keys != nullptr ? keys.keys + n_before * head_dim : nullptr;
  if (window_keys == nullptr) {
    read_window.resize(w * head_dim);
    (*keys.reader)(read_window.data(), n_before, n_rows);
    window_keys = read_window.data();
  }
  if (n_before == 0) {  // no candidate outside the window: the plain proxy scores
    proxy_window_scores(out, window_keys, n_rows, head_dim, window, true);
    return;
  }
  // Every window row sees every candidate before the window, so the causal mask changes nothing.
  window_scores_rows(out, keys, n_before, head_dim, window_keys, 1, w, 0, w, false);
  std::fill(out + n_before, out + n_rows, 1.0f);
}

}  // namespace

void window_scores(float* out, const float* keys, size_t n_rows, size_t head_dim,
                   const float* queries, size_t n_group, size_t n_window, bool causal) {
  check_score_args(n_rows, head_dim, n_group, n_window);
  const size_t w = std::min(n_window, n_rows);
  window_scores_rows(out, KeyTiles{keys}, n_rows, head_dim, queries, n_group, n_window,
                     n_window - w, w, causal);
}

void proxy_window_scores(float* out, const float* keys, size_t n_rows, size_t head_dim,
                         size_t window, bool causal) {
  check_score_args(n_rows, head_dim, 1, window);
  const size_t w = std::min(window, n_rows);
  window_scores_rows(out, KeyTiles{keys}, n_rows, head_dim, keys + (n_rows - w) * head_dim, 1, w, 0,
                     w, causal);
}

void proxy_candidate_scores(float* out, const float* keys, size_t n_rows, size_t head_dim,
                            size_t window) {
  check_score_args(n_rows, head_dim, 1, window);
  proxy_candidate_scores_tiles(out, KeyTiles{keys}, n_rows, head_dim, window);
}

void window_scores_ref(double* out, const float* keys, size_t n_rows, size_t head_dim,
                       const float* queries, size_t n_group, size_t n_window, bool causal) {
  check_score_args(n_rows, head_dim, n_group, n_window);
  const size_t w = std::min(n_window, n_rows);
  std::fill(out, out + n_rows, 0.0);
  const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
  std::vector<double> logits(n_rows);
  for (size_t g = 0; g < n_group; ++g) {
    for (size_t r = 0; r < w; ++r) {
      const float* q = queries + (g * n_window + (n_window - w) + r) * head_dim;
      const size_t visible = causal ? n_rows - w + r + 1 : n_rows;
      double max_logit = -std::numeric_limits<double>::infinity();
      for (size_t j = 0; j < visible; ++j) {
        double s = 0.0;
        for (size_t d = 0; d < head_dim; ++d) {
          s += static_cast<double>(q[d]) * static_cast<double>(keys[j * head_dim + d]);
        }
        logits[j] = s * scale;
        max_logit = std::max(max_logit, logits[j]);
      }
      double sum = 0.0;
      for (size_t j = 0; j < visible; ++j) {
        logits[j] = std::exp(logits[j] - max_logit);
        sum += logits[j];
      }
      for (size_t j = 0; j < visible; ++j) out[j] += logits[j] / sum;
    }
  }
  for (size_t j = 0; j < n_rows; ++j) out[j] /= static_cast<double>(n_group * w);
}

void pool_scores(float* out, const float* in, size_t n, PoolKind kind, size_t kernel) {
  switch (kind) {
    case PoolKind::none:
      std::copy_n(in, n, out);
      return;
    case PoolKind::max:
      max_pool1d(out, in, n, kernel);
      return;
    case PoolKind::avg:
      avg_pool1d(out, in, n, kernel);
      return;
    case PoolKind::causal_max:
      causal_max_pool1d(out, in, n, kernel);
      return;
  }
  throw_invalid("snapkv_score", "unknown pool kind", std::to_string(static_cast<int>(kind)),
                "none|max|avg|causal_max");
}

std::vector<uint32_t> select_rows(const float* scores, size_t n_rows, size_t budget, size_t n_sink,
                                  size_t n_forced_tail) {
  if (n_rows > std::numeric_limits<uint32_t>::max()) {
    throw_invalid("select_rows", "too many rows", std::to_string(n_rows), "<= 2^32 - 1");
  }
  const size_t n_keep = std::min(budget, n_rows);
  std::vector<uint8_t> forced(n_rows, 0);
  for (size_t i = 0; i < std::min(n_sink, n_rows); ++i) forced[i] = 1;
  for (size_t i = n_rows - std::min(n_forced_tail, n_rows); i < n_rows; ++i) forced[i] = 1;
  size_t n_forced = 0;
  for (const uint8_t f : forced) n_forced += f;
  if (n_forced > n_keep) {
    throw_invalid("select_rows", "budget cannot hold the sinks and the kept window",
                  "budget " + std::to_string(budget),
                  ">= " + std::to_string(n_forced) + " forced rows");
  }
  // Forced rows rank above every score: +inf, and ties among them go to the earlier row.
  std::vector<float> ranked(scores, scores + n_rows);
  for (size_t i = 0; i < n_rows; ++i) {
    if (forced[i])
      ranked[i] = std::numeric_limits<float>::infinity();
    else if (std::isnan(ranked[i])) {
      throw_invalid("select_rows", "NaN score at row " + std::to_string(i), "NaN", "a number");
    } else if (ranked[i] == std::numeric_limits<float>::infinity()) {
      ranked[i] = std::numeric_limits<float>::max();  // keep forced rows strictly first
    }
  }
  std::vector<uint32_t> keep = topk_indices(ranked.data(), n_rows, n_keep);
  std::sort(keep.begin(), keep.end());
  return keep;
}

size_t kept_window_rows(const CacheConfig& config, size_t n_rows) {
  return keeps_window(config) ? std::min(config.window, n_rows) : 0;
}

std::vector<float> snapkv_candidate_scores(const SelectionInput& in, const CacheConfig& config) {
  if ((in.keys == nullptr && in.key_rows == nullptr) || in.n_rows == 0 || in.head_dim == 0) {
    throw_invalid(
        "snapkv_score", "selection input has no keys",
        "n_rows " + std::to_string(in.n_rows) + ", head_dim " + std::to_string(in.head_dim),
        "keys with n_rows, head_dim >= 1");
  }
  std::vector<float> raw(in.n_rows);
  const KeyTiles keys{in.keys, in.key_rows};
  if (in.queries != nullptr) {
    if (in.n_group == 0 || in.n_window == 0) {
      throw_invalid(
          "snapkv_score", "queries given without their shape",
          "n_group " + std::to_string(in.n_group) + ", n_window " + std::to_string(in.n_window),
          "both >= 1");
    }
    const size_t w = std::min({in.n_window, config.window, in.n_rows});
    window_scores_rows(raw.data(), keys, in.n_rows, in.head_dim, in.queries, in.n_group,
                       in.n_window, in.n_window - w, w, config.causal);
  } else {
    check_score_args(in.n_rows, in.head_dim, 1, config.window);
    proxy_candidate_scores_tiles(raw.data(), keys, in.n_rows, in.head_dim, config.window);
  }
  if (config.pool == PoolKind::none || config.kernel == 1) return raw;
  std::vector<float> pooled(in.n_rows);
  pool_scores(pooled.data(), raw.data(), in.n_rows, config.pool, config.kernel);
  return pooled;
}

}  // namespace snapkv
