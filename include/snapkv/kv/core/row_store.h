// RowStore: how the kept rows of ONE KV head's keys (or values) are stored. The codec half of the
// policy/codec split: a policy decides which rows live, a RowStore holds them (fp16, KIVI, ...).
// A store never reorders rows; row i is the i-th retained row in position order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "snapkv/kv/core/config.h"

namespace snapkv {

enum class RowRole { key, value };

class RowStore {
 public:
  virtual ~RowStore() = default;

  virtual size_t rows() const = 0;
  virtual size_t head_dim() const = 0;

  // Appends n rows. rows: [n][head_dim] fp32, all finite (the cache checks before calling).
  virtual void append(const float* rows, size_t n) = 0;

  // Keeps exactly the listed rows, in order, and drops the others for good.
  // keep: strictly increasing indices < rows().
  virtual void retain(std::span<const uint32_t> keep) = 0;

  // Decodes rows [begin, end) into out: [end - begin][head_dim].
  virtual void read(float* out, size_t begin, size_t end) const = 0;

  // For n_q query vectors at once (the query heads of one GQA group):
  // out[j][i] = dot(q[j], row i).  q: [n_q][head_dim], out: [n_q][rows()].
  virtual void dot_rows(float* out, const float* q, size_t n_q) const = 0;

  // out[j][:] += sum_i w[j][i] * row i.  w: [n_q][rows()], out: [n_q][head_dim].
  virtual void accumulate_rows(float* out, const float* w, size_t n_q) const = 0;

  // Spans: LayerCache::attend's fused pass reads the rows a span at a time (the scores of one span
  // for the n_q queries, an online-softmax step, then the weighted sum of the same span's rows),
  // so no score buffer over all rows is written and read again.
  // span_end(begin, max_rows): the end of the span that starts at row begin (< rows()), in
  // (begin, rows()]; a store ends it early at a boundary of its layout (a region, a key block)
  // and goes past begin + max_rows only when one unit of its layout is longer than max_rows.
  virtual size_t span_end(size_t begin, size_t max_rows) const;
  // out[j * stride + (i - begin)] = dot(q[j], row i) for i in [begin, end) (any range within
  // rows()). q: [n_q][head_dim], out: [n_q][stride] with stride >= end - begin.
  virtual void dot_span(float* out, size_t stride, const float* q, size_t n_q, size_t begin,
                        size_t end) const;
  // out[j][:] += sum_{i in [begin, end)} w[j * stride + (i - begin)] * row i.
  // w: [n_q][stride], out: [n_q][head_dim].
  virtual void accumulate_span(float* out, const float* w, size_t stride, size_t n_q, size_t begin,
                               size_t end) const;
  // True when dot_span / accumulate_span run the codec's own kernels on the stored codes; the
  // defaults (kv/core/row_store_spans.cpp) decode the span with read() and attend() then keeps the
  // whole-store dot_rows / accumulate_rows pass instead.
  virtual bool has_span_kernels() const { return false; }

  // True bytes held for the rows (payload, scales, zero points, residual), not capacity.
  virtual size_t bytes() const = 0;

  virtual std::unique_ptr<RowStore> clone() const = 0;

  // Codecs that choose a precision per row (zipcache, include/snapkv/kv/codecs/zipcache.h) hold new
  // rows back until the cache says how important they are. unsettled_rows(): rows appended and not
  // yet routed (always 0 for the other codecs). settle(saliency): routes them; saliency is [rows()]
  // (higher = more important, finite), or empty when there are no scores (decode rows).
  virtual size_t unsettled_rows() const { return 0; }
  virtual void settle(std::span<const float> saliency) { (void)saliency; }

  // Persisted caches: appends this store's exact state to `out` as the store record of
  // kv/file/kvc_format.h, so that load_row_store() rebuilds a store that behaves bit for bit the
  // same.
  virtual void save(std::vector<uint8_t>& out) const = 0;
};

// Makes the store for config.codec. Throws std::invalid_argument for an unknown codec or bad
// codec parameters.
std::unique_ptr<RowStore> make_row_store(const CacheConfig& config, RowRole role, size_t head_dim);

// Rebuilds a store from a record that RowStore::save() wrote for the same codec, role and
// head_dim. The record is hostile input: every count and size is checked against it (and it must
// be consumed exactly); a malformed record throws snapkv::RuntimeError "[kvc] ...". A bad config
// is std::invalid_argument as for make_row_store.
std::unique_ptr<RowStore> load_row_store(const CacheConfig& config, RowRole role, size_t head_dim,
                                         std::span<const uint8_t> record);

}  // namespace snapkv
