// GearCorrection: the low-rank and sparse corrections of GEAR (include/snapkv/kv/codecs/gear.h)
// over the quantized region of a KIVI store, one segment per residual flush. KiviStore owns one
// when its codec is gear and calls it wherever the quantized region changes or is read: at a flush
// (add_segment), at eviction (retain: kept rows keep their coefficients and sparse entries), in
// read / dot_rows / accumulate_rows (add_*), bytes, save and load. Rows are numbered as in the
// quantized region. Private to kv/.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "snapkv/kv/codecs/gear.h"
#include "snapkv/util/fp16.h"

namespace snapkv {
namespace kvc {
class ByteReader;
}

class GearCorrection {
 public:
  // rank < head_dim and sparse in [0, 1] (checked by the store's factory).
  GearCorrection(size_t head_dim, size_t rank, double sparse);

  // A flushed segment of n rows: x the rows as stored before quantization (fp16 values in fp32),
  // dq their KIVI decode, both [n][head_dim]. Appended after the existing rows.
  void add_segment(const float* x, const float* dq, size_t n);
  // Keeps rows keep[i] - base (increasing, within the region) and drops the rest.
  void retain(std::span<const uint32_t> keep, size_t base);

  // out [end - begin][head_dim] += the correction of rows [begin, end).
  void add_rows(float* out, size_t begin, size_t end) const;
  // out[j * stride + i] += q[j] . correction of row i, for every row.  q: [n_q][head_dim].
  void add_dots(float* out, size_t stride, const float* q, size_t n_q) const;
  // out[j][:] += sum_i w[j * stride + i] * correction of row i.  out: [n_q][head_dim].
  void add_accumulate(float* out, const float* w, size_t stride, size_t n_q) const;

  size_t rows() const { return sparse_count_.size(); }
  size_t bytes() const;
  size_t sparse_entries() const { return sparse_.size(); }
  // .kvc (kv/file/kvc_format.h KvcGearCorrection and the arrays of kv/codecs/gear.h); load checks
  // every count and value (snapkv::RuntimeError "[kvc] ...") and needs n_rows == the quantized
  // rows.
  void save(std::vector<uint8_t>& out) const;
  void load(kvc::ByteReader& in, size_t n_rows);

 private:
  // First sparse entry of row `row` (a prefix sum over sparse_count_).
  size_t sparse_begin(size_t row) const;

  size_t head_dim_;
  size_t rank_;
  double sparse_fraction_;
  std::vector<GearSegment> segments_;   // [n_segments]
  std::vector<fp16_t> basis_;           // [n_segments][rank][head_dim]
  std::vector<fp16_t> coeffs_;          // [n_rows][rank]
  std::vector<uint16_t> sparse_count_;  // [n_rows]
  std::vector<GearSparse> sparse_;      // [n_sparse], by row, channels increasing
};

}  // namespace snapkv
