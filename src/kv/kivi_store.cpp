// The KIVI RowStore: 2/4-bit rows with an fp16 residual and optional fp16 sinks, for one KV head's
// keys (per-channel groups of G rows) or values (per-row groups of G channels). Layout, quantizer
// and the no-drift eviction rule are documented in include/snapkv/kv/kivi.h. Attention reads the
// packed rows through kv/kivi_kernels.h; read() is the simple decode used by the policies and by
// the reference paths in the tests.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "kv/kivi_kernels.h"
#include "kv/kvc_bytes.h"
#include "kv/stores.h"
#include "snapkv/kv/kivi.h"
#include "snapkv/kv/kvc_format.h"
#include "snapkv/ops/dot.h"
#include "snapkv/util/error.h"
#include "snapkv/util/fp16.h"

namespace snapkv {
namespace {

std::string num(size_t v) {
  return std::to_string(v);
}
size_t ceil_div(size_t a, size_t b) {
  return (a + b - 1) / b;
}

class KiviRowStore final : public RowStore {
 public:
  KiviRowStore(RowRole role, int bits, size_t head_dim, size_t group, size_t residual,
               size_t fp16_sinks)
      : role_(role),
        bits_(bits),
        head_dim_(head_dim),
        group_(group),
        residual_cap_(residual),
        sink_slots_left_(fp16_sinks),
        word_bytes_(kivi_word_bytes(bits)),
        value_words_(ceil_div(head_dim, kKiviOctet)),
        value_groups_(ceil_div(head_dim, group)) {}

  size_t rows() const override { return n_sinks_ + n_quant_ + n_resid_; }
  size_t head_dim() const override { return head_dim_; }

  void append(const float* data, size_t n) override {  // data: [n][head_dim]
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

  void retain(std::span<const uint32_t> keep) override {
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
    compact_fp16(sinks_, keep_sinks, 0);
    n_sinks_ = keep_sinks.size();
    if (role_ == RowRole::key) {
      retain_key_blocks(keep_quant, quant_base);
    } else {
      retain_value_rows(keep_quant, quant_base);
    }
    n_quant_ = keep_quant.size();
    compact_fp16(residual_, keep_resid, resid_base);
    n_resid_ = keep_resid.size();
  }

  void read(float* out, size_t begin, size_t end) const override {
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
        row = read_quantized(dst, row - n_sinks_, std::min(end, n_sinks_ + n_quant_) - n_sinks_) +
              n_sinks_;
      } else {
        const size_t r = row - n_sinks_ - n_quant_;
        fp16_to_fp32_n(dst, residual_.data() + r * head_dim_, (end - row) * head_dim_);
        row = end;
      }
    }
  }

  void dot_rows(float* out, const float* q, size_t n_q) const override {
    const size_t stride = rows();
    fp16_dot(out, stride, q, n_q, sinks_.data(), n_sinks_);
    float* quant_out = out + n_sinks_;
    if (role_ == RowRole::key) {
      thread_local std::vector<float> params;  // [2][head_dim] scales, zeros of one block
      params.resize(2 * head_dim_);
      size_t row0 = 0;
      for (size_t b = 0; b < blocks_.size(); ++b) {
        const size_t n = blocks_[b].row_end - row0;
        fp16_to_fp32_n(params.data(), key_params_.data() + b * 2 * head_dim_, 2 * head_dim_);
        kivi_key_block_dot(quant_out + row0, stride, q, n_q, params.data(),
                           params.data() + head_dim_, block_words(b), n, head_dim_, bits_);
        row0 = blocks_[b].row_end;
      }
    } else {  // values are rarely dotted: decode a few rows at a time
      thread_local std::vector<float> buf;
      for (size_t r0 = 0; r0 < n_quant_; r0 += kDecodeRows) {
        const size_t nr = std::min(kDecodeRows, n_quant_ - r0);
        buf.resize(nr * head_dim_);
        read_quantized(buf.data(), r0, r0 + nr);
        for (size_t r = 0; r < nr; ++r) {
          for (size_t j = 0; j < n_q; ++j) {
            quant_out[j * stride + r0 + r] =
                dot(q + j * head_dim_, buf.data() + r * head_dim_, head_dim_);
          }
        }
      }
    }
    fp16_dot(out + n_sinks_ + n_quant_, stride, q, n_q, residual_.data(), n_resid_);
  }

  void accumulate_rows(float* out, const float* w, size_t n_q) const override {
    const size_t stride = rows();
    fp16_accumulate(out, w, stride, n_q, sinks_.data(), n_sinks_);
    const float* quant_w = w + n_sinks_;
    if (role_ == RowRole::value) {
      kivi_value_rows_accumulate(out, quant_w, stride, n_q, value_codes_.data(),
                                 value_params_.data(), n_quant_, head_dim_, group_, bits_);
    } else {  // keys are rarely accumulated: decode a few rows at a time
      thread_local std::vector<float> buf;
      for (size_t r0 = 0; r0 < n_quant_; r0 += kDecodeRows) {
        const size_t nr = std::min(kDecodeRows, n_quant_ - r0);
        buf.resize(nr * head_dim_);
        read_quantized(buf.data(), r0, r0 + nr);
        for (size_t r = 0; r < nr; ++r) {
          for (size_t j = 0; j < n_q; ++j) {
            axpy(out + j * head_dim_, quant_w[j * stride + r0 + r], buf.data() + r * head_dim_,
                 head_dim_);
          }
        }
      }
    }
    fp16_accumulate(out, w + n_sinks_ + n_quant_, stride, n_q, residual_.data(), n_resid_);
  }

  size_t bytes() const override {
    size_t b = (n_sinks_ + n_resid_) * head_dim_ * sizeof(fp16_t);
    if (role_ == RowRole::key) {
      b += key_words_.size() + key_params_.size() * sizeof(fp16_t) +
           blocks_.size() * sizeof(KiviKeyBlock);
    } else {
      b += value_codes_.size() + value_params_.size() * sizeof(KiviParams);
    }
    return b;
  }

  std::unique_ptr<RowStore> clone() const override { return std::make_unique<KiviRowStore>(*this); }

  // --- persisted state (kv/kvc_format.h: KvcKiviStore, then the regions in order) ---
  // Kept in these two methods so that a split into key and value stores moves them as a whole:
  // the common part is sinks + residual, then each role writes its own arrays.
  void save(std::vector<uint8_t>& out) const override {
    const size_t n_octets = key_words_.size() / (head_dim_ * word_bytes_);
    kvc::append_pod(out, KvcKiviStore{n_sinks_, n_quant_, n_resid_, sink_slots_left_,
                                      blocks_.size(), n_octets});
    kvc::append_array(out, sinks_.data(), sinks_.size());
    kvc::append_array(out, residual_.data(), residual_.size());
    if (role_ == RowRole::key) {
      kvc::append_array(out, blocks_.data(), blocks_.size());
      kvc::append_array(out, key_params_.data(), key_params_.size());
      kvc::append_array(out, key_words_.data(), key_words_.size());
    } else {
      kvc::append_array(out, value_codes_.data(), value_codes_.size());
      kvc::append_array(out, value_params_.data(), value_params_.size());
    }
  }

  // Fills an empty store (made by make_kivi_row_store with the saved parameters) from a record.
  // Every count is checked against the store's parameters and the record's length before use.
  void load(std::span<const uint8_t> record, size_t fp16_sinks) {
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
    if (role_ == RowRole::key) {
      load_key_blocks(in, h.n_blocks, h.n_octets);
    } else {
      if (h.n_blocks != 0 || h.n_octets != 0) {
        throw_runtime("kvc", "kivi value store with key blocks",
                      num(h.n_blocks) + " blocks, " + num(h.n_octets) + " octets", "0 and 0");
      }
      value_codes_ = in.array<uint8_t>(kvc::checked_mul(n_quant_, value_row_bytes(), "kivi codes"),
                                       "kivi value codes");
      value_params_ = in.array<KiviParams>(kvc::checked_mul(n_quant_, value_groups_, "kivi params"),
                                           "kivi value params");
      for (const KiviParams& p : value_params_) check_params(p.scale, p.zero, "kivi value params");
    }
    if (in.remaining() != 0) {
      throw_runtime("kvc", "kivi store record longer than its regions",
                    num(in.remaining()) + " extra bytes", "0");
    }
  }

 private:
  static constexpr size_t kDecodeRows = 64;

  const uint8_t* block_words(size_t b) const {
    return key_words_.data() + blocks_[b].octet_begin * head_dim_ * word_bytes_;
  }

  // out[j * stride + i] = dot(q[j], row i) for n fp16 rows [n][head_dim].
  void fp16_dot(float* out, size_t stride, const float* q, size_t n_q, const fp16_t* data,
                size_t n) const {
    for (size_t i = 0; i < n; ++i) {
      for (size_t j = 0; j < n_q; ++j) {
        out[j * stride + i] = dot_f16(q + j * head_dim_, data + i * head_dim_, head_dim_);
      }
    }
  }
  // out[j] += w[j * stride + i] * row i for n fp16 rows [n][head_dim].
  void fp16_accumulate(float* out, const float* w, size_t stride, size_t n_q, const fp16_t* data,
                       size_t n) const {
    for (size_t i = 0; i < n; ++i) {
      for (size_t j = 0; j < n_q; ++j) {
        axpy_f16(out + j * head_dim_, w[j * stride + i], data + i * head_dim_, head_dim_);
      }
    }
  }

  // Keeps rows keep[i] - base of an fp16 region [rows][head_dim], in place, in order.
  void compact_fp16(std::vector<fp16_t>& data, std::span<const uint32_t> keep, size_t base) const {
    size_t write = 0;
    for (const uint32_t row : keep) {
      const size_t from = row - base;
      if (from != write) {
        std::copy_n(data.data() + from * head_dim_, head_dim_, data.data() + write * head_dim_);
      }
      ++write;
    }
    data.resize(write * head_dim_);
  }

  // Decodes quantized rows [begin, end) (quantized-region indices) into out; returns end.
  size_t read_quantized(float* out, size_t begin, size_t end) const {
    if (role_ == RowRole::value) {
      kivi_value_rows_decode(out, value_codes_.data() + begin * value_row_bytes(),
                             value_params_.data() + begin * value_groups_, end - begin, head_dim_,
                             group_, bits_);
      return end;
    }
    std::vector<float> params(2 * head_dim_);
    // first block whose row_end > begin
    size_t b = static_cast<size_t>(
        std::upper_bound(blocks_.begin(), blocks_.end(), begin,
                         [](size_t row, const KiviKeyBlock& blk) { return row < blk.row_end; }) -
        blocks_.begin());
    for (size_t row = begin; row < end; ++b) {
      SNAPKV_CHECK(b < blocks_.size());
      const size_t first = b == 0 ? 0 : blocks_[b - 1].row_end;
      const size_t stop = std::min<size_t>(end, blocks_[b].row_end);
      fp16_to_fp32_n(params.data(), key_params_.data() + b * 2 * head_dim_, 2 * head_dim_);
      kivi_key_block_decode(out + (row - begin) * head_dim_, params.data(),
                            params.data() + head_dim_, block_words(b), row - first, stop - first,
                            head_dim_, bits_);
      row = stop;
    }
    return end;
  }

  size_t value_row_bytes() const { return value_words_ * word_bytes_; }

  // load(): the key blocks, their parameters and code words, each block checked to hold 1..G rows
  // and its words to start where the previous block's end.
  void load_key_blocks(kvc::ByteReader& in, uint64_t n_blocks, uint64_t n_octets) {
    if (n_blocks > n_quant_ || (n_quant_ > 0 && n_blocks == 0)) {
      throw_runtime("kvc", "kivi key block count", num(n_blocks),
                    "between 1 and the " + num(n_quant_) + " quantized rows");
    }
    blocks_ = in.array<KiviKeyBlock>(static_cast<size_t>(n_blocks), "kivi key blocks");
    size_t row0 = 0, octets = 0;
    for (size_t b = 0; b < blocks_.size(); ++b) {
      const size_t n = blocks_[b].row_end >= row0 ? blocks_[b].row_end - row0 : 0;
      if (n == 0 || n > group_ || blocks_[b].octet_begin != octets) {
        throw_runtime(
            "kvc", "kivi key block " + num(b),
            "row_end " + num(blocks_[b].row_end) + ", octet_begin " + num(blocks_[b].octet_begin),
            "1.." + num(group_) + " rows after row " + num(row0) + ", octet " + num(octets));
      }
      row0 = blocks_[b].row_end;
      octets += ceil_div(n, kKiviOctet);
    }
    if (row0 != n_quant_ || octets != n_octets) {
      throw_runtime("kvc", "kivi key blocks do not cover the quantized rows",
                    num(row0) + " rows, " + num(octets) + " octets",
                    num(n_quant_) + " rows, " + num(n_octets) + " octets");
    }
    key_params_ = in.array<fp16_t>(
        kvc::checked_mul(blocks_.size(), 2 * head_dim_, "kivi key params"), "kivi key params");
    for (size_t b = 0; b < blocks_.size(); ++b) {
      for (size_t c = 0; c < head_dim_; ++c) {
        check_params(key_params_[b * 2 * head_dim_ + c],
                     key_params_[b * 2 * head_dim_ + head_dim_ + c], "kivi key params");
      }
    }
    key_words_ = in.array<uint8_t>(
        kvc::checked_mul(octets, head_dim_ * word_bytes_, "kivi key words"), "kivi key words");
  }

  // A stored (scale, zero) pair: both finite, the scale not negative.
  static void check_params(fp16_t scale, fp16_t zero, const char* field) {
    const fp16_t pair[2] = {scale, zero};
    kvc::check_fp16_values(pair, field, false);
    if ((scale & 0x8000u) != 0) {
      throw_runtime("kvc", std::string(field) + " has a negative scale",
                    std::to_string(fp16_to_fp32(scale)), ">= 0");
    }
  }

  // Quantizes the oldest R residual rows (keys: R/G blocks of G rows; values: row by row) and
  // moves them to the quantized region.
  void flush_residual_front() {
    SNAPKV_CHECK(n_resid_ >= residual_cap_);
    std::vector<float> x(residual_cap_ * head_dim_);  // [R][head_dim], the fp16 values in fp32
    fp16_to_fp32_n(x.data(), residual_.data(), x.size());
    if (role_ == RowRole::key) {
      for (size_t r0 = 0; r0 < residual_cap_; r0 += group_) {
        quantize_key_block(x.data() + r0 * head_dim_, group_);
      }
    } else {
      for (size_t r = 0; r < residual_cap_; ++r) quantize_value_row(x.data() + r * head_dim_);
    }
    residual_.erase(residual_.begin(),
                    residual_.begin() + static_cast<std::ptrdiff_t>(residual_cap_ * head_dim_));
    n_quant_ += residual_cap_;
    n_resid_ -= residual_cap_;
  }

  // rows: [n][head_dim] -> one key block (per-channel params over the n rows).
  void quantize_key_block(const float* rows, size_t n) {
    const size_t n_oct = ceil_div(n, kKiviOctet);
    const size_t octet_begin = key_words_.size() / (head_dim_ * word_bytes_);
    const size_t param_at = key_params_.size();
    key_params_.resize(param_at + 2 * head_dim_);
    fp16_t* scales = key_params_.data() + param_at;
    fp16_t* zeros = scales + head_dim_;
    std::vector<KiviParams> params(head_dim_);
    for (size_t c = 0; c < head_dim_; ++c) {
      float lo = rows[c], hi = rows[c];
      for (size_t r = 1; r < n; ++r) {
        lo = std::min(lo, rows[r * head_dim_ + c]);
        hi = std::max(hi, rows[r * head_dim_ + c]);
      }
      params[c] = kivi_choose_params(lo, hi, bits_);
      scales[c] = params[c].scale;
      zeros[c] = params[c].zero;
    }
    const size_t word_at = key_words_.size();
    key_words_.resize(word_at + n_oct * head_dim_ * word_bytes_);
    uint8_t* words = key_words_.data() + word_at;
    for (size_t o = 0; o < n_oct; ++o) {
      for (size_t c = 0; c < head_dim_; ++c) {
        uint8_t codes[kKiviOctet] = {};
        for (size_t k = 0; k < kKiviOctet && o * kKiviOctet + k < n; ++k) {
          codes[k] = static_cast<uint8_t>(
              kivi_encode(rows[(o * kKiviOctet + k) * head_dim_ + c], params[c], bits_));
        }
        kivi_store_word(words, o * head_dim_ + c, kivi_pack_word(codes, bits_), bits_);
      }
    }
    const size_t row_end = (blocks_.empty() ? 0 : blocks_.back().row_end) + n;
    blocks_.push_back({static_cast<uint32_t>(row_end), static_cast<uint32_t>(octet_begin)});
  }

  // row: [head_dim] -> codes [value_words_] words + params [value_groups_].
  void quantize_value_row(const float* row) {
    const size_t code_at = value_codes_.size();
    value_codes_.resize(code_at + value_row_bytes(), 0);
    uint8_t* words = value_codes_.data() + code_at;
    const size_t param_at = value_params_.size();
    value_params_.resize(param_at + value_groups_);
    KiviParams* params = value_params_.data() + param_at;
    for (size_t g = 0; g < value_groups_; ++g) {
      const size_t c0 = g * group_, c1 = std::min(head_dim_, c0 + group_);
      const auto [lo, hi] = std::minmax_element(row + c0, row + c1);
      params[g] = kivi_choose_params(*lo, *hi, bits_);
    }
    for (size_t wi = 0; wi < value_words_; ++wi) {
      uint8_t codes[kKiviOctet] = {};
      for (size_t k = 0; k < kKiviOctet && wi * kKiviOctet + k < head_dim_; ++k) {
        const size_t c = wi * kKiviOctet + k;
        codes[k] = static_cast<uint8_t>(kivi_encode(row[c], params[c / group_], bits_));
      }
      kivi_store_word(words, wi, kivi_pack_word(codes, bits_), bits_);
    }
  }

  // Keeps quantized key rows keep[i] - base. Blocks keep their parameters; a block that lost
  // rows has its surviving codes re-packed (codes unchanged, only moved), an emptied block goes.
  void retain_key_blocks(std::span<const uint32_t> keep, size_t base) {
    std::vector<KiviKeyBlock> blocks;
    std::vector<fp16_t> params;
    std::vector<uint8_t> words;
    std::vector<size_t> kept;  // offsets inside the current block
    const size_t oct_bytes = head_dim_ * word_bytes_;
    auto it = keep.begin();
    size_t row0 = 0, row_end = 0, octets = 0;
    for (size_t b = 0; b < blocks_.size(); ++b) {
      const size_t end = blocks_[b].row_end;
      kept.clear();
      for (; it != keep.end() && *it - base < end; ++it) kept.push_back(*it - base - row0);
      if (!kept.empty()) {
        const uint8_t* old_words = block_words(b);
        const size_t n_oct = ceil_div(kept.size(), kKiviOctet);
        params.insert(params.end(),
                      key_params_.begin() + static_cast<std::ptrdiff_t>(b * 2 * head_dim_),
                      key_params_.begin() + static_cast<std::ptrdiff_t>((b + 1) * 2 * head_dim_));
        const size_t at = words.size();
        words.resize(at + n_oct * oct_bytes);
        if (kept.size() == end - row0) {  // untouched block: same words
          std::copy_n(old_words, n_oct * oct_bytes, words.data() + at);
        } else {
          for (size_t o = 0; o < n_oct; ++o) {
            for (size_t c = 0; c < head_dim_; ++c) {
              uint8_t codes[kKiviOctet] = {};
              for (size_t k = 0; k < kKiviOctet && o * kKiviOctet + k < kept.size(); ++k) {
                const size_t from = kept[o * kKiviOctet + k];
                uint8_t src[kKiviOctet];
                kivi_unpack_word(
                    src, kivi_load_word(old_words, (from / kKiviOctet) * head_dim_ + c, bits_),
                    bits_);
                codes[k] = src[from % kKiviOctet];
              }
              kivi_store_word(words.data() + at, o * head_dim_ + c, kivi_pack_word(codes, bits_),
                              bits_);
            }
          }
        }
        row_end += kept.size();
        blocks.push_back({static_cast<uint32_t>(row_end), static_cast<uint32_t>(octets)});
        octets += n_oct;
      }
      row0 = end;
    }
    SNAPKV_CHECK(it == keep.end());
    blocks_ = std::move(blocks);
    key_params_ = std::move(params);
    key_words_ = std::move(words);
  }

  // Keeps quantized value rows keep[i] - base: codes and params move, nothing is recomputed.
  void retain_value_rows(std::span<const uint32_t> keep, size_t base) {
    const size_t row_bytes = value_row_bytes();
    size_t write = 0;
    for (const uint32_t row : keep) {
      const size_t from = row - base;
      if (from != write) {
        std::copy_n(value_codes_.data() + from * row_bytes, row_bytes,
                    value_codes_.data() + write * row_bytes);
        std::copy_n(value_params_.data() + from * value_groups_, value_groups_,
                    value_params_.data() + write * value_groups_);
      }
      ++write;
    }
    value_codes_.resize(write * row_bytes);
    value_params_.resize(write * value_groups_);
    value_codes_.shrink_to_fit();  // eviction is meant to give memory back
    value_params_.shrink_to_fit();
  }

  RowRole role_;
  int bits_;
  size_t head_dim_;
  size_t group_;            // G
  size_t residual_cap_;     // R
  size_t sink_slots_left_;  // rows still routed to the fp16 sinks (never refilled after eviction)
  size_t word_bytes_;
  size_t value_words_;   // ceil(head_dim / 8)
  size_t value_groups_;  // ceil(head_dim / G)

  size_t n_sinks_ = 0, n_quant_ = 0, n_resid_ = 0;
  std::vector<fp16_t> sinks_;     // [n_sinks_][head_dim]
  std::vector<fp16_t> residual_;  // [n_resid_][head_dim]
  // keys
  std::vector<KiviKeyBlock> blocks_;  // [n_blocks]
  std::vector<fp16_t> key_params_;    // [n_blocks][2][head_dim]: scales, then zeros
  std::vector<uint8_t> key_words_;    // [total octets][head_dim] words
  // values
  std::vector<uint8_t> value_codes_;      // [n_quant_][value_words_] words
  std::vector<KiviParams> value_params_;  // [n_quant_][value_groups_]
};

}  // namespace

std::unique_ptr<RowStore> make_kivi_row_store(RowRole role, int bits, size_t head_dim, size_t group,
                                              size_t residual, size_t fp16_sinks) {
  if (bits != 2 && bits != 4) {
    throw_invalid("kivi", "unsupported bit width", num(static_cast<size_t>(bits)), "2 or 4");
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
  return std::make_unique<KiviRowStore>(role, bits, head_dim, group, residual, fp16_sinks);
}

std::unique_ptr<RowStore> load_kivi_row_store(const CacheConfig& config, RowRole role,
                                              size_t head_dim, std::span<const uint8_t> record) {
  std::unique_ptr<RowStore> store = make_kivi_row_store(config, role, head_dim);
  static_cast<KiviRowStore&>(*store).load(record, config.kivi_fp16_sinks);
  return store;
}

std::unique_ptr<RowStore> make_kivi_row_store(const CacheConfig& config, RowRole role,
                                              size_t head_dim) {
  int bits = 0;
  switch (config.codec) {
    case CodecKind::kivi2:
      bits = 2;
      break;
    case CodecKind::kivi4:
      bits = 4;
      break;
    default:
      throw_invalid("kivi", "codec is not a KIVI codec", std::string(to_string(config.codec)),
                    "kivi2|kivi4");
  }
  return make_kivi_row_store(role, bits, head_dim, config.kivi_group, config.kivi_residual,
                             config.kivi_fp16_sinks);
}

}  // namespace snapkv
