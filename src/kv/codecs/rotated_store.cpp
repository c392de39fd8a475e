// RotatedStore: the rotated roles of the rotated codecs (kv/core/codec_spec.h): the keys and values
// of kivi2r / kivi4r, the values of kivi42r and zipcacher; the codec registry makes the inner
// store (KIVI or zipcache) and a role that is not rotated plainly. It wraps an inner store that
// holds the rows
// turned by the seeded Hadamard rotation R of kv/codecs/rotation.h and keeps the RowStore contract
// in the original coordinates:
//   append  rows -> R rows -> inner (rounded to fp16, then quantized as the inner codec does)
//   dot     q . k == (R q) . (R k): the n_q queries are rotated, the inner key kernel does the rest
//   accum   sum_i w_i v_i == R^T sum_i w_i (R v_i): the inner value kernel sums the stored rows
//           into a [n_q][head_dim] buffer, which is rotated back and added to out
//   read    R^T of the decoded rows (what the policies score and the tests use as reference)
//   settle  goes to the inner store unchanged: a row's saliency does not depend on coordinates
// No dequantized copy of the cache is made by the wrapper; the extra work per call is
// O(n_q head_dim log). Retain, settle, clone and bytes go to the inner store (bytes adds the
// 8-byte seed: the signs are derived from it). The .kvc record is KvcRotatedStore (the seed,
// checked against the config's rotation_seed on load) followed by the inner store's record.
#include <algorithm>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kv/codecs/kivi/kivi_store.h"
#include "kv/codecs/stores.h"
#include "kv/file/kvc_bytes.h"
#include "snapkv/kv/codecs/rotation.h"
#include "snapkv/kv/file/kvc_format.h"
#include "snapkv/util/error.h"

namespace snapkv {
namespace {

class RotatedStore final : public RowStore {
 public:
  RotatedStore(std::unique_ptr<RowStore> inner, uint64_t seed)
      : inner_(std::move(inner)), rotation_(inner_->head_dim(), seed) {}
  RotatedStore(const RotatedStore& o) : inner_(o.inner_->clone()), rotation_(o.rotation_) {}

  size_t rows() const override { return inner_->rows(); }
  size_t head_dim() const override { return inner_->head_dim(); }

  void append(const float* rows, size_t n) override {
    if (n == 0) return;
    std::vector<float> turned(rows, rows + n * head_dim());  // [n][head_dim]
    rotation_.rotate(turned.data(), n);
    inner_->append(turned.data(), n);
  }

  void retain(std::span<const uint32_t> keep) override { inner_->retain(keep); }

  size_t unsettled_rows() const override { return inner_->unsettled_rows(); }
  void settle(std::span<const float> saliency) override { inner_->settle(saliency); }

  void read(float* out, size_t begin, size_t end) const override {
    inner_->read(out, begin, end);
    rotation_.unrotate(out, end - begin);  // inner checked the range
  }

  void dot_rows(float* out, const float* q, size_t n_q) const override {
    thread_local std::vector<float> turned;  // [n_q][head_dim]
    turned.assign(q, q + n_q * head_dim());
    rotation_.rotate(turned.data(), n_q);
    inner_->dot_rows(out, turned.data(), n_q);
  }

  void accumulate_rows(float* out, const float* w, size_t n_q) const override {
    thread_local std::vector<float> sum;  // [n_q][head_dim], in rotated coordinates
    sum.assign(n_q * head_dim(), 0.0f);
    inner_->accumulate_rows(sum.data(), w, n_q);
    rotation_.unrotate(sum.data(), n_q);
    for (size_t i = 0; i < sum.size(); ++i) out[i] += sum[i];
  }

  // Spans as dot_rows / accumulate_rows, per span (the rotation of n_q rows per call).
  size_t span_end(size_t begin, size_t max_rows) const override {
    return inner_->span_end(begin, max_rows);
  }

  void dot_span(float* out, size_t stride, const float* q, size_t n_q, size_t begin,
                size_t end) const override {
    thread_local std::vector<float> turned;  // [n_q][head_dim]
    turned.assign(q, q + n_q * head_dim());
    rotation_.rotate(turned.data(), n_q);
    inner_->dot_span(out, stride, turned.data(), n_q, begin, end);
  }

  void accumulate_span(float* out, const float* w, size_t stride, size_t n_q, size_t begin,
                       size_t end) const override {
    thread_local std::vector<float> sum;  // [n_q][head_dim], in rotated coordinates
    sum.assign(n_q * head_dim(), 0.0f);
    inner_->accumulate_span(sum.data(), w, stride, n_q, begin, end);
    rotation_.unrotate(sum.data(), n_q);
    for (size_t i = 0; i < sum.size(); ++i) out[i] += sum[i];
  }

  bool has_span_kernels() const override { return inner_->has_span_kernels(); }

  size_t bytes() const override { return sizeof(uint64_t) + inner_->bytes(); }

  std::unique_ptr<RowStore> clone() const override { return std::make_unique<RotatedStore>(*this); }

  void save(std::vector<uint8_t>& out) const override {
    kvc::append_pod(out, KvcRotatedStore{rotation_.seed()});
    inner_->save(out);
  }

 private:
  std::unique_ptr<RowStore> inner_;  // KIVI or zipcache store of the rotated rows
  HadamardRotation rotation_;
};

}  // namespace

std::unique_ptr<RowStore> make_rotated_row_store(std::unique_ptr<RowStore> inner,
                                                 uint64_t rotation_seed) {
  return std::make_unique<RotatedStore>(std::move(inner), rotation_seed);
}

std::unique_ptr<RowStore> load_rotated_row_store(
    uint64_t rotation_seed, std::span<const uint8_t> record,
    const std::function<std::unique_ptr<RowStore>(std::span<const uint8_t>)>& load_inner) {
  kvc::ByteReader in(record);
  const auto h = in.pod<KvcRotatedStore>("rotated store header");
  if (h.rotation_seed != rotation_seed) {
    throw_runtime("kvc", "rotated store seed differs from the config's rotation_seed",
                  std::to_string(h.rotation_seed), std::to_string(rotation_seed));
  }
  return std::make_unique<RotatedStore>(load_inner(record.subspan(in.position())), h.rotation_seed);
}

}  // namespace snapkv
