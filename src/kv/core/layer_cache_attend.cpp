// LayerCache::attend: the chunk's queries over the kept rows and the chunk's own rows (causal), by
// GQA group and blocks of query rows; the fused span path when both stores have span kernels.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kv/core/layer_cache_checks.h"
#include "kv/core/span_attention.h"
#include "snapkv/kv/core/layer_cache.h"
#include "snapkv/ops/dot.h"
#include "snapkv/ops/softmax.h"
#include "snapkv/util/error.h"
#include "snapkv/util/parallel.h"

namespace snapkv {
namespace {

using layer_cache_checks::check_tensor;
using layer_cache_checks::check_values;
using layer_cache_checks::kComponent;

// Query rows per attention work unit (bounds the logits scratch to kAttendBlock * rows floats).
constexpr size_t kAttendBlock = 32;

// Stable softmax over two segments taken as one row: a [na], b [nb], na + nb >= 1.
void softmax_two(float* a, size_t na, float* b, size_t nb) {
  float m = -std::numeric_limits<float>::infinity();
  if (na > 0) m = std::max(m, max_value(a, na));
  if (nb > 0) m = std::max(m, max_value(b, nb));
  const float sum = exp_shift_sum(a, na, m) + exp_shift_sum(b, nb, m);
  const float inv = 1.0f / sum;  // >= 1 term equal to 1
  for (size_t i = 0; i < na; ++i) a[i] *= inv;
  for (size_t i = 0; i < nb; ++i) b[i] *= inv;
}

}  // namespace

void LayerCache::attend(float* out, Tensor3 q, Tensor3 k, Tensor3 v) const {
  check_tensor(q, "q", dims_.n_heads, "n_heads", dims_.head_dim);
  check_tensor(k, "k", dims_.n_kv_heads, "n_kv_heads", dims_.head_dim);
  check_tensor(v, "v", dims_.n_kv_heads, "n_kv_heads", dims_.head_dim);
  if (k.dim1 != q.dim1 || v.dim1 != q.dim1) {
    throw_invalid(kComponent, "attend token counts differ",
                  "q " + num(q.dim1) + ", k " + num(k.dim1) + ", v " + num(v.dim1),
                  "the same S for q, k and v");
  }
  if (out == nullptr) throw_invalid(kComponent, "attend output", "null", "a pointer");
  check_values(q, "q", false);
  check_values(k, "k", true);
  check_values(v, "v", true);

  const size_t n_new = q.dim1;
  const size_t head_dim = dims_.head_dim;
  const size_t n_group = dims_.n_heads / dims_.n_kv_heads;
  const size_t n_blocks = (n_new + kAttendBlock - 1) / kAttendBlock;
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  // One work unit = one KV head x one block of query rows, for all n_group query heads of the
  // group at once: the kept rows of a store are read once per unit (dot_rows/accumulate_rows take
  // the group's n_group * m query rows together), not once per query head.
  parallel_for(dims_.n_kv_heads * n_blocks, [&](size_t unit) {
    const size_t kv = unit / n_blocks;
    const size_t s0 = (unit % n_blocks) * kAttendBlock;
    const size_t m = std::min(kAttendBlock, n_new - s0);
    const size_t n_kept = key_stores_[kv]->rows();        // this head's retained rows
    const size_t n_rows = n_group * m;                    // query rows of this unit
    const float* k_new = k.data + kv * n_new * head_dim;  // [S][head_dim]
    const float* v_new = v.data + kv * n_new * head_dim;  // [S][head_dim]

    std::vector<float> q_rows(n_rows * head_dim);  // [n_group][m][head_dim], gathered
    for (size_t g = 0; g < n_group; ++g) {
      const float* src = q.data + ((kv * n_group + g) * n_new + s0) * head_dim;
      std::copy(src, src + m * head_dim, q_rows.data() + g * m * head_dim);
    }
    const RowStore& keys = *key_stores_[kv];
    const RowStore& values = *value_stores_[kv];
    if (keys.has_span_kernels() && values.has_span_kernels()) {
      // Fused: one pass over the kept rows for the whole group (kv/core/span_attention.h), then the
      // chunk's own rows merged into the same online softmax.
      std::vector<float> acc(n_rows * head_dim);  // [n_group*m][head_dim], unnormalised
      std::vector<float> row_max(n_rows), row_sum(n_rows), logits(n_new);
      span_attention(acc.data(), row_max.data(), row_sum.data(), q_rows.data(), n_rows, keys,
                     values, scale);
      for (size_t r = 0; r < n_rows; ++r) {
        const size_t visible = s0 + r % m + 1;  // causal inside the chunk
        float* acc_row = acc.data() + r * head_dim;
        for (size_t j = 0; j < visible; ++j) {
          logits[j] = dot(q_rows.data() + r * head_dim, k_new + j * head_dim, head_dim);
        }
        online_softmax_merge(logits.data(), visible, scale, acc_row, head_dim, row_max[r],
                             row_sum[r]);
        for (size_t j = 0; j < visible; ++j) {
          axpy(acc_row, logits[j], v_new + j * head_dim, head_dim);
        }
        const float inv = 1.0f / row_sum[r];  // >= 1 term equal to 1
        for (size_t c = 0; c < head_dim; ++c) acc_row[c] *= inv;
      }
      for (size_t g = 0; g < n_group; ++g) {
        float* dst = out + ((kv * n_group + g) * n_new + s0) * head_dim;
        std::copy(acc.data() + g * m * head_dim, acc.data() + (g + 1) * m * head_dim, dst);
      }
      return;
    }
    std::vector<float> w_kept(n_rows * n_kept);  // [n_group*m][n_kept]
    std::vector<float> w_new(n_rows * n_new);    // [n_group*m][S], row (g,i) uses s0 + i + 1
    if (n_kept > 0) keys.dot_rows(w_kept.data(), q_rows.data(), n_rows);
    for (size_t r = 0; r < n_rows; ++r) {
      const size_t i = r % m;
      float* kept_row = w_kept.data() + r * n_kept;
      float* new_row = w_new.data() + r * n_new;
      const size_t visible = s0 + i + 1;  // causal inside the chunk
      for (size_t j = 0; j < n_kept; ++j) kept_row[j] *= scale;
      for (size_t j = 0; j < visible; ++j) {
        new_row[j] = scale * dot(q_rows.data() + r * head_dim, k_new + j * head_dim, head_dim);
      }
      softmax_two(kept_row, n_kept, new_row, visible);
    }
    std::vector<float> out_rows(n_rows * head_dim, 0.0f);  // [n_group*m][head_dim]
    if (n_kept > 0) values.accumulate_rows(out_rows.data(), w_kept.data(), n_rows);
    for (size_t r = 0; r < n_rows; ++r) {
      const size_t i = r % m;
      const float* new_row = w_new.data() + r * n_new;
      for (size_t j = 0; j <= s0 + i; ++j) {
        axpy(out_rows.data() + r * head_dim, new_row[j], v_new + j * head_dim, head_dim);
      }
    }
    for (size_t g = 0; g < n_group; ++g) {
      float* dst = out + ((kv * n_group + g) * n_new + s0) * head_dim;
      std::copy(out_rows.data() + g * m * head_dim, out_rows.data() + (g + 1) * m * head_dim, dst);
    }
  });
}
}  // namespace snapkv
