// The fp16 RowStore: rows kept as IEEE binary16, contiguous [rows][head_dim] in a RowBuffer (huge
// pages when large, geometric growth). Reads go through the multi-query F16C kernels of
// kernels/fp16_rows.h, so attention never builds an fp32 copy.
#include <algorithm>
#include <string>
#include <vector>

#include "kernels/fp16_rows.h"
#include "kv/codecs/row_buffer.h"
#include "kv/codecs/stores.h"
#include "kv/file/kvc_bytes.h"
#include "snapkv/kv/file/kvc_format.h"
#include "snapkv/ops/dot.h"
#include "snapkv/util/error.h"
#include "snapkv/util/fp16.h"

namespace snapkv {
namespace {

class Fp16RowStore final : public RowStore {
 public:
  explicit Fp16RowStore(size_t head_dim) : head_dim_(head_dim) {}

  size_t rows() const override { return rows_; }
  size_t head_dim() const override { return head_dim_; }

  void append(const float* rows, size_t n) override {
    if (n == 0) return;
    // Converted through a small buffer and appended: resize() would zero-fill the new rows first,
    // one more pass over memory than the conversion itself (16 MiB per head at 64K rows).
    const size_t count = n * head_dim_;
    reserve_for_append(data_, count);  // geometric: a decode step does not copy the whole store
    constexpr size_t kBlock = 4096;
    fp16_t block[kBlock];
    for (size_t i = 0; i < count; i += kBlock) {
      const size_t len = std::min(kBlock, count - i);
      fp32_to_fp16_n(block, rows + i, len);
      data_.insert(data_.end(), block, block + len);
    }
    rows_ += n;
  }

  void retain(std::span<const uint32_t> keep) override {
    for (size_t i = 0; i < keep.size(); ++i) {
      const size_t row = keep[i];
      if (row >= rows_ || (i > 0 && row <= keep[i - 1])) {
        throw_invalid("fp16_store", "retain indices must be strictly increasing and < rows",
                      "index " + std::to_string(row) + " at " + std::to_string(i),
                      "< " + std::to_string(rows_) + " and above the previous one");
      }
    }
    fp16_rows_compact(data_, keep, 0, head_dim_);
    rows_ = keep.size();
    data_.shrink_to_fit();  // eviction is meant to give memory back
  }

  void read(float* out, size_t begin, size_t end) const override {
    if (begin > end || end > rows_) {
      throw_invalid("fp16_store", "read range out of bounds",
                    "[" + std::to_string(begin) + ", " + std::to_string(end) + ")",
                    "a range within [0, " + std::to_string(rows_) + ")");
    }
    fp16_to_fp32_n(out, data_.data() + begin * head_dim_, (end - begin) * head_dim_);
  }

  void dot_rows(float* out, const float* q, size_t n_q) const override {
    fp16_rows_dot(out, rows_, q, n_q, data_.data(), rows_, head_dim_);
  }

  void accumulate_rows(float* out, const float* w, size_t n_q) const override {
    fp16_rows_accumulate(out, w, rows_, n_q, data_.data(), rows_, head_dim_);
  }

  void dot_span(float* out, size_t stride, const float* q, size_t n_q, size_t begin,
                size_t end) const override {
    check_span(begin, end);
    fp16_rows_dot(out, stride, q, n_q, data_.data() + begin * head_dim_, end - begin, head_dim_);
  }

  void accumulate_span(float* out, const float* w, size_t stride, size_t n_q, size_t begin,
                       size_t end) const override {
    check_span(begin, end);
    fp16_rows_accumulate(out, w, stride, n_q, data_.data() + begin * head_dim_, end - begin,
                         head_dim_);
  }

  bool has_span_kernels() const override { return true; }

  size_t bytes() const override { return data_.size() * sizeof(fp16_t); }

  std::unique_ptr<RowStore> clone() const override { return std::make_unique<Fp16RowStore>(*this); }

  // --- persisted state (kv/file/kvc_format.h: KvcFp16Store, then the rows) ---
  void save(std::vector<uint8_t>& out) const override {
    kvc::append_pod(out, KvcFp16Store{rows_});
    kvc::append_array(out, data_.data(), data_.size());
  }

  static std::unique_ptr<RowStore> load(size_t head_dim, std::span<const uint8_t> record) {
    kvc::ByteReader in(record);
    const auto header = in.pod<KvcFp16Store>("fp16 store header");
    auto store = std::make_unique<Fp16RowStore>(head_dim);
    if (header.rows > UINT32_MAX) {
      throw_runtime("kvc", "fp16 store row count", std::to_string(header.rows), "< 2^32");
    }
    store->rows_ = static_cast<size_t>(header.rows);
    const std::vector<fp16_t> rows =
        in.array<fp16_t>(kvc::checked_mul(store->rows_, head_dim, "fp16 rows"), "fp16 store rows");
    store->data_.assign(rows.begin(), rows.end());
    kvc::check_fp16_values(store->data_, "fp16 store rows", true);
    if (in.remaining() != 0) {
      throw_runtime("kvc", "fp16 store record longer than its rows",
                    std::to_string(in.remaining()) + " extra bytes", "0");
    }
    return store;
  }

 private:
  void check_span(size_t begin, size_t end) const {
    if (begin > end || end > rows_) {
      throw_invalid("fp16_store", "span out of bounds",
                    "[" + std::to_string(begin) + ", " + std::to_string(end) + ")",
                    "a range within [0, " + std::to_string(rows_) + "]");
    }
  }

  size_t head_dim_;
  size_t rows_ = 0;
  RowBuffer<fp16_t> data_;  // [rows_][head_dim_], huge pages when large (kv/codecs/row_buffer.h)
};

}  // namespace

std::unique_ptr<RowStore> make_fp16_row_store(size_t head_dim) {
  if (head_dim == 0) throw_invalid("fp16_store", "head_dim must be positive", "0", ">= 1");
  return std::make_unique<Fp16RowStore>(head_dim);
}

std::unique_ptr<RowStore> load_fp16_row_store(size_t head_dim, std::span<const uint8_t> record) {
  if (head_dim == 0) throw_invalid("fp16_store", "head_dim must be positive", "0", ">= 1");
  return Fp16RowStore::load(head_dim, record);
}

}  // namespace snapkv
