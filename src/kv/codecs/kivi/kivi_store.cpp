// KiviStore, the part of the KIVI RowStores that keys and values share
// (kv/codecs/kivi/kivi_store.h): the fp16 sinks and residual around the quantized region, the
// residual flush R rows at a time, retain's split of the kept rows into the three regions, and
// range checks. Also the factory that checks the KIVI parameters and picks the key or the value
// store.
#include "kv/codecs/kivi/kivi_store.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "kernels/fp16_rows.h"
#include "kv/codecs/stores.h"
#include "kv/file/kvc_bytes.h"
#include "snapkv/kv/codecs/kivi.h"
#include "snapkv/kv/file/kvc_format.h"
#include "snapkv/ops/dot.h"
#include "snapkv/util/error.h"
#include "snapkv/util/text.h"

namespace snapkv {

KiviStore::KiviStore(int bits, size_t head_dim, size_t group, size_t residual, size_t fp16_sinks)
    : bits_(bits),
      head_dim_(head_dim),
      group_(group),
      residual_cap_(residual),
      word_bytes_(kivi_word_bytes(bits)),
      sink_slots_left_(fp16_sinks) {}

void KiviStore::append(const float* data, size_t n) {
  if (n == 0) return;
  for (size_t i = 0; i < n * head_dim_; ++i) {  // checked before anything changes
    if (!(std::fabs(data[i]) <= kFp16Max)) {
      throw_invalid("kivi", "row value outside the fp16 range",
                    "row " + num(i / head_dim_) + " channel " + num(i % head_dim_) + " = " +
                        std::to_string(data[i]),
                    "a finite value with |x| <= 65504");
    }
  }
  if (rows() + n > UINT32_MAX) {
    throw_invalid("kivi", "too many rows", num(rows() + n), "< 2^32");
  }
  const size_t to_sinks = std::min(n, sink_slots_left_);
  if (to_sinks > 0) {
    const size_t old = sinks_.size();
    sinks_.resize(old + to_sinks * head_dim_);
    fp32_to_fp16_n(sinks_.data() + old, data, to_sinks * head_dim_);
    n_sinks_ += to_sinks;
    sink_slots_left_ -= to_sinks;
  }
  if (to_sinks == n) return;
  // Rows of earlier appends that filled the residual are quantized now, R at a time, oldest
  // first; this append's rows wait in the residual, fp16, until the next append. An eviction
  // that follows an append (LayerCache appends a chunk, then selects) thus drops fresh rows
  // while they are still fp16 and never punches holes into freshly packed key blocks.
  while (n_resid_ >= residual_cap_) flush_residual_front();
  const size_t take = n - to_sinks;
  residual_.resize((n_resid_ + take) * head_dim_);
  fp32_to_fp16_n(residual_.data() + n_resid_ * head_dim_, data + to_sinks * head_dim_,
                 take * head_dim_);
  n_resid_ += take;
}

void KiviStore::retain(std::span<const uint32_t> keep) {
  const size_t total = rows();
  for (size_t i = 0; i < keep.size(); ++i) {
    if (keep[i] >= total || (i > 0 && keep[i] <= keep[i - 1])) {
      throw_invalid("kivi", "retain indices must be strictly increasing and < rows",
                    "index " + num(keep[i]) + " at " + num(i),
                    "< " + num(total) + " and above the previous one");
    }
  }
  const auto quant_begin = std::lower_bound(keep.begin(), keep.end(), n_sinks_);
  const auto resid_begin = std::lower_bound(quant_begin, keep.end(), n_sinks_ + n_quant_);
  const std::span<const uint32_t> keep_sinks(keep.begin(), quant_begin);
  const std::span<const uint32_t> keep_quant(quant_begin, resid_begin);
  const std::span<const uint32_t> keep_resid(resid_begin, keep.end());

  const size_t quant_base = n_sinks_, resid_base = n_sinks_ + n_quant_;  // before any change
  fp16_rows_compact(sinks_, keep_sinks, 0, head_dim_);
  n_sinks_ = keep_sinks.size();
  retain_quantized(keep_quant, quant_base);
  if (gear_) gear_->retain(keep_quant, quant_base);
  n_quant_ = keep_quant.size();
  fp16_rows_compact(residual_, keep_resid, resid_base, head_dim_);
  n_resid_ = keep_resid.size();
}

void KiviStore::read(float* out, size_t begin, size_t end) const {
  if (begin > end || end > rows()) {
    throw_invalid("kivi", "read range out of bounds", "[" + num(begin) + ", " + num(end) + ")",
                  "a range within [0, " + num(rows()) + ")");
  }
  for (size_t row = begin; row < end;) {
    float* dst = out + (row - begin) * head_dim_;
    if (row < n_sinks_) {
      const size_t stop = std::min(end, n_sinks_);
      fp16_to_fp32_n(dst, sinks_.data() + row * head_dim_, (stop - row) * head_dim_);
      row = stop;
    } else if (row < n_sinks_ + n_quant_) {
      const size_t stop = std::min(end, n_sinks_ + n_quant_);
      read_quantized(dst, row - n_sinks_, stop - n_sinks_);
      if (gear_) gear_->add_rows(dst, row - n_sinks_, stop - n_sinks_);
      row = stop;
    } else {
      const size_t r = row - n_sinks_ - n_quant_;
      fp16_to_fp32_n(dst, residual_.data() + r * head_dim_, (end - row) * head_dim_);
      row = end;
    }
  }
}

void KiviStore::dot_rows(float* out, const float* q, size_t n_q) const {
  const size_t stride = rows();
  fp16_rows_dot(out, stride, q, n_q, sinks_.data(), n_sinks_, head_dim_);
  dot_quantized(out + n_sinks_, stride, q, n_q);
  if (gear_) gear_->add_dots(out + n_sinks_, stride, q, n_q);
  fp16_rows_dot(out + n_sinks_ + n_quant_, stride, q, n_q, residual_.data(), n_resid_, head_dim_);
}

void KiviStore::accumulate_rows(float* out, const float* w, size_t n_q) const {
  const size_t stride = rows();
  fp16_rows_accumulate(out, w, stride, n_q, sinks_.data(), n_sinks_, head_dim_);
  accumulate_quantized(out, w + n_sinks_, stride, n_q);
  if (gear_) gear_->add_accumulate(out, w + n_sinks_, stride, n_q);
  fp16_rows_accumulate(out, w + n_sinks_ + n_quant_, stride, n_q, residual_.data(), n_resid_,
                       head_dim_);
}

size_t KiviStore::bytes() const {
  return (n_sinks_ + n_resid_) * head_dim_ * sizeof(fp16_t) + quantized_bytes() +
         (gear_ ? gear_->bytes() : 0);
}

void KiviStore::dot_quantized(float* out, size_t stride, const float* q, size_t n_q) const {
  thread_local std::vector<float> buf;
  for (size_t r0 = 0; r0 < n_quant_; r0 += kDecodeRows) {
    const size_t nr = std::min(kDecodeRows, n_quant_ - r0);
    buf.resize(nr * head_dim_);
    read_quantized(buf.data(), r0, r0 + nr);
    for (size_t r = 0; r < nr; ++r) {
      for (size_t j = 0; j < n_q; ++j) {
        out[j * stride + r0 + r] = dot(q + j * head_dim_, buf.data() + r * head_dim_, head_dim_);
      }
    }
  }
}

void KiviStore::accumulate_quantized(float* out, const float* w, size_t stride, size_t n_q) const {
  thread_local std::vector<float> buf;
  for (size_t r0 = 0; r0 < n_quant_; r0 += kDecodeRows) {
    const size_t nr = std::min(kDecodeRows, n_quant_ - r0);
    buf.resize(nr * head_dim_);
    read_quantized(buf.data(), r0, r0 + nr);
    for (size_t r = 0; r < nr; ++r) {
      for (size_t j = 0; j < n_q; ++j) {
        axpy(out + j * head_dim_, w[j * stride + r0 + r], buf.data() + r * head_dim_, head_dim_);
      }
    }
  }
}

void KiviStore::save(std::vector<uint8_t>& out) const {
  uint64_t n_blocks = 0, n_octets = 0;
  quantized_counts(n_blocks, n_octets);
  kvc::append_pod(out,
                  KvcKiviStore{n_sinks_, n_quant_, n_resid_, sink_slots_left_, n_blocks, n_octets});
  kvc::append_array(out, sinks_.data(), sinks_.size());
  kvc::append_array(out, residual_.data(), residual_.size());
  save_quantized(out);
  if (gear_) gear_->save(out);
}

void KiviStore::load(std::span<const uint8_t> record, size_t fp16_sinks) {
  kvc::ByteReader in(record);
  const auto h = in.pod<KvcKiviStore>("kivi store header");
  const uint64_t total = h.n_sinks + h.n_quant + h.n_resid;  // each checked below first
  if (h.n_sinks > UINT32_MAX || h.n_quant > UINT32_MAX || h.n_resid > UINT32_MAX ||
      total > UINT32_MAX) {
    throw_runtime("kvc", "kivi store row counts",
                  num(h.n_sinks) + " + " + num(h.n_quant) + " + " + num(h.n_resid), "< 2^32");
  }
  if (h.sink_slots_left > fp16_sinks || h.n_sinks > fp16_sinks - h.sink_slots_left) {
    throw_runtime("kvc", "kivi sink rows exceed kivi_fp16_sinks",
                  num(h.n_sinks) + " rows + " + num(h.sink_slots_left) + " slots left",
                  "<= " + num(fp16_sinks));
  }
  if (h.sink_slots_left > 0 && h.n_quant + h.n_resid > 0) {
    throw_runtime("kvc", "kivi rows past the sinks while sink slots are left",
                  num(h.n_quant + h.n_resid) + " rows, " + num(h.sink_slots_left) + " slots",
                  "no quantized or residual rows until the sinks are full");
  }
  n_sinks_ = static_cast<size_t>(h.n_sinks);
  n_quant_ = static_cast<size_t>(h.n_quant);
  n_resid_ = static_cast<size_t>(h.n_resid);
  sink_slots_left_ = static_cast<size_t>(h.sink_slots_left);
  sinks_ = in.array<fp16_t>(kvc::checked_mul(n_sinks_, head_dim_, "kivi sinks"), "kivi sinks");
  kvc::check_fp16_values(sinks_, "kivi sinks", false);
  residual_ =
      in.array<fp16_t>(kvc::checked_mul(n_resid_, head_dim_, "kivi residual"), "kivi residual");
  kvc::check_fp16_values(residual_, "kivi residual", false);
  load_quantized(in, h.n_blocks, h.n_octets);
  if (gear_) gear_->load(in, n_quant_);
  if (in.remaining() != 0) {
    throw_runtime("kvc", "kivi store record longer than its regions",
                  num(in.remaining()) + " extra bytes", "0");
  }
}

void KiviStore::enable_gear(size_t rank, double sparse) {
  SNAPKV_CHECK(rows() == 0);
  gear_.emplace(head_dim_, rank, sparse);
}

void KiviStore::check_params(fp16_t scale, fp16_t zero, const char* field) {
  const fp16_t pair[2] = {scale, zero};
  kvc::check_fp16_values(pair, field, false);
  if ((scale & 0x8000u) != 0) {
    throw_runtime("kvc", std::string(field) + " has a negative scale",
                  std::to_string(fp16_to_fp32(scale)), ">= 0");
  }
}

// Quantizes the oldest R residual rows and moves them to the quantized region.
void KiviStore::flush_residual_front() {
  SNAPKV_CHECK(n_resid_ >= residual_cap_);
  std::vector<float> x(residual_cap_ * head_dim_);  // [R][head_dim], the fp16 values in fp32
  fp16_to_fp32_n(x.data(), residual_.data(), x.size());
  quantize_rows(x.data(), residual_cap_);
  if (gear_) {
    std::vector<float> decoded(x.size());  // [R][head_dim], the KIVI decode of the new rows
    read_quantized(decoded.data(), n_quant_, n_quant_ + residual_cap_);
    gear_->add_segment(x.data(), decoded.data(), residual_cap_);
  }
  residual_.erase(residual_.begin(),
                  residual_.begin() + static_cast<std::ptrdiff_t>(residual_cap_ * head_dim_));
  n_quant_ += residual_cap_;
  n_resid_ -= residual_cap_;
}

std::unique_ptr<RowStore> make_kivi_row_store(RowRole role, int bits, size_t head_dim, size_t group,
                                              size_t residual, size_t fp16_sinks,
                                              size_t boost_channels, bool mixed_keys) {
  if (bits != 2 && bits != 3 && bits != 4) {
    throw_invalid("kivi", "unsupported bit width", num(static_cast<size_t>(bits)), "2, 3 or 4");
  }
  if (bits == 3 && role != RowRole::key) {
    throw_invalid("kivi", "3-bit codes are for key stores only (values: 2 or 4 bits)",
                  "a 3-bit value store", "2 or 4 bits");
  }
  if (head_dim == 0) throw_invalid("kivi", "head_dim must be positive", "0", ">= 1");
  if (group == 0) throw_invalid("kivi", "kivi_group must be positive", "0", ">= 1");
  if (residual == 0 || residual % group != 0) {
    throw_invalid("kivi", "kivi_residual must be a positive multiple of kivi_group",
                  "kivi_residual " + num(residual),
                  "a multiple of kivi_group = " + num(group) + ", at least " + num(group));
  }
  if (group > UINT32_MAX || residual > (size_t{1} << 24)) {
    throw_invalid("kivi", "kivi_residual too large", num(residual), "<= 2^24");
  }
  if (boost_channels >= head_dim || boost_channels > kMaxKittyChannels) {
    throw_invalid("kivi", "kitty_channels must be below head_dim",
                  "kitty_channels " + num(boost_channels), "< head_dim = " + num(head_dim));
  }
  if (mixed_keys && (role != RowRole::key || bits != 2 || boost_channels != 0 || head_dim < 2)) {
    throw_invalid("kivi", "mixed 2/4-bit channels are for 2-bit key stores of head_dim >= 2",
                  std::string(role == RowRole::key ? "a key" : "a value") + " store of " +
                      num(static_cast<size_t>(bits)) + " bits, head_dim " + num(head_dim) +
                      ", kitty channels " + num(boost_channels),
                  "a 2-bit key store, head_dim >= 2, no kitty channels");
  }
  return role == RowRole::key ? make_kivi_key_store(bits, head_dim, group, residual, fp16_sinks,
                                                    boost_channels, mixed_keys)
                              : make_kivi_value_store(bits, head_dim, group, residual, fp16_sinks);
}

std::unique_ptr<RowStore> make_gear_row_store(const CacheConfig& config, RowRole role,
                                              size_t head_dim) {
  if (config.gear_rank >= head_dim) {
    throw_invalid("gear", "gear_rank must be below head_dim", num(config.gear_rank),
                  "< head_dim = " + num(head_dim));
  }
  if (config.gear_rank > 64) {
    throw_invalid("gear", "gear_rank too large", num(config.gear_rank), "<= 64");
  }
  if (!(config.gear_sparse >= 0.0 && config.gear_sparse <= 1.0)) {
    throw_invalid("gear", "gear_sparse out of range", std::to_string(config.gear_sparse), "[0, 1]");
  }
  if (config.gear_bits != 2 && config.gear_bits != 4) {
    throw_invalid("gear", "gear_bits unsupported", num(config.gear_bits), "2 or 4");
  }
  std::unique_ptr<RowStore> store =
      make_kivi_row_store(role, static_cast<int>(config.gear_bits), head_dim, config.kivi_group,
                          kivi_residual_of(config), kivi_fp16_sinks_of(config));
  static_cast<KiviStore&>(*store).enable_gear(config.gear_rank, config.gear_sparse);
  return store;
}

std::unique_ptr<RowStore> load_gear_row_store(const CacheConfig& config, RowRole role,
                                              size_t head_dim, std::span<const uint8_t> record) {
  std::unique_ptr<RowStore> store = make_gear_row_store(config, role, head_dim);
  static_cast<KiviStore&>(*store).load(record, kivi_fp16_sinks_of(config));
  return store;
}

std::unique_ptr<RowStore> load_kivi_row_store(const CacheConfig& config, RowRole role,
                                              size_t head_dim, std::span<const uint8_t> record) {
  std::unique_ptr<RowStore> store = make_kivi_row_store(config, role, head_dim);
  static_cast<KiviStore&>(*store).load(record, kivi_fp16_sinks_of(config));
  return store;
}

std::unique_ptr<RowStore> make_kivi_row_store(const CacheConfig& config, RowRole role,
                                              size_t head_dim) {
  const CodecSpec& spec = codec_spec(config.codec);
  const bool plain = (spec.family == CodecFamily::kivi || spec.family == CodecFamily::kitty ||
                      spec.family == CodecFamily::kivimix) &&
                     !spec.rotated();
  if (!plain) {
    throw_invalid("kivi", "codec is not a KIVI codec", std::string(to_string(config.codec)),
                  "kivi<K>[<V>] (no rotation), kitty or kivimix");
  }
  const int bits = role == RowRole::key ? spec.key_bits : spec.value_bits;
  size_t boost = 0;
  if (spec.family == CodecFamily::kitty) {
    boost = config.kitty_channels;
    if (boost == 0) {
      throw_invalid("kivi", "kitty_channels must be positive for codec kitty", "0",
                    "1 .. head_dim - 1");
    }
  }
  const bool mixed = spec.family == CodecFamily::kivimix && role == RowRole::key;
  return make_kivi_row_store(role, bits, head_dim, config.kivi_group, kivi_residual_of(config),
                             kivi_fp16_sinks_of(config), boost, mixed);
}

}  // namespace snapkv
