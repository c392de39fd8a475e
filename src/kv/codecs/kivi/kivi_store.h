// The KIVI RowStores (layout, quantizer and the no-drift eviction rule:
// include/snapkv/kv/codecs/kivi.h). KiviStore is the part keys and values share: the fp16 sinks
// (KIVI-Sink), the fp16 residual of the newest rows, the row bookkeeping, range checks, and the
// fp16 dot/accumulate of kernels/fp16_rows.h. Between sinks and residual lies the quantized
// region, which each role lays out its own way: KiviKeyStore (kv/codecs/kivi/kivi_key_store.cpp)
// packs blocks of G rows with per-channel parameters, KiviValueStore
// (kv/codecs/kivi/kivi_value_store.cpp) packs each row with per-group parameters. Row order
// everywhere: [sinks][quantized][residual]. Private to kv/.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "kv/codecs/gear_correction.h"
#include "snapkv/kv/core/row_store.h"
#include "snapkv/util/fp16.h"

namespace snapkv {
namespace kvc {
class ByteReader;  // kv/file/kvc_bytes.h
}

class KiviStore : public RowStore {
 public:
  size_t rows() const final { return n_sinks_ + n_quant_ + n_resid_; }
  size_t head_dim() const final { return head_dim_; }
  void append(const float* data, size_t n) final;  // data: [n][head_dim]
  void retain(std::span<const uint32_t> keep) final;
  void read(float* out, size_t begin, size_t end) const final;
  void dot_rows(float* out, const float* q, size_t n_q) const final;
  void accumulate_rows(float* out, const float* w, size_t n_q) const final;
  size_t bytes() const final;
  // Spans (row_store.h; kv/codecs/kivi/kivi_spans.cpp): a span never crosses a region boundary nor,
  // among the quantized rows, a key block boundary; each region runs its own kernels. Not with gear
  // (its corrections are added whole-store), where the decoding defaults of RowStore run instead.
  size_t span_end(size_t begin, size_t max_rows) const final;
  void dot_span(float* out, size_t stride, const float* q, size_t n_q, size_t begin,
                size_t end) const final;
  void accumulate_span(float* out, const float* w, size_t stride, size_t n_q, size_t begin,
                       size_t end) const final;
  bool has_span_kernels() const final { return !gear_.has_value(); }
  // .kvc record (kv/file/kvc_format.h: KvcKiviStore, sinks, residual, then the quantized region's
  // arrays as the role lays them out).
  void save(std::vector<uint8_t>& out) const final;
  // Fills an empty store (made with the saved parameters) from a record; every count is checked
  // against the store's parameters and the record's length before use (snapkv::RuntimeError).
  void load(std::span<const uint8_t> record, size_t fp16_sinks);
  // Codec gear (include/snapkv/kv/codecs/gear.h): every later residual flush also builds the
  // low-rank and sparse corrections of its quantization error, and every read of the quantized
  // region adds them. Only on an empty store.
  void enable_gear(size_t rank, double sparse);

 protected:
  KiviStore(int bits, size_t head_dim, size_t group, size_t residual, size_t fp16_sinks);
  KiviStore(const KiviStore&) = default;

  // ---- the quantized region, rows [0, n_quant()) in its own numbering ----
  // Quantizes `n` rows (n == the residual capacity R, a multiple of G) and appends them.
  // rows: [n][head_dim], the residual's fp16 values in fp32.
  virtual void quantize_rows(const float* rows, size_t n) = 0;
  // Keeps quantized rows keep[i] - base (keep: increasing, within the region), dropping the rest.
  virtual void retain_quantized(std::span<const uint32_t> keep, size_t base) = 0;
  // Decodes quantized rows [begin, end) into out: [end - begin][head_dim].
  virtual void read_quantized(float* out, size_t begin, size_t end) const = 0;
  // out[j * stride + r] = dot(q[j], quantized row r). Default: decode a few rows at a time.
  virtual void dot_quantized(float* out, size_t stride, const float* q, size_t n_q) const;
  // out[j][:] += w[j * stride + r] * quantized row r. Default: decode a few rows at a time.
  virtual void accumulate_quantized(float* out, const float* w, size_t stride, size_t n_q) const;
  // The span versions over quantized rows [begin, end) (their own numbering), out / w column 0
  // being row begin. Defaults: decode the rows, then dot / accumulate in fp32.
  virtual void dot_quantized_span(float* out, size_t stride, const float* q, size_t n_q,
                                  size_t begin, size_t end) const;
  virtual void accumulate_quantized_span(float* out, const float* w, size_t stride, size_t n_q,
                                         size_t begin, size_t end) const;
  // The end of a quantized span starting at begin and ending at most at limit (> begin), unless
  // one unit of the layout (a key block) is longer. Default: limit.
  virtual size_t quantized_span_end(size_t begin, size_t limit) const {
    (void)begin;
    return limit;
  }
  // Bytes of the quantized region (codes, parameters, block table).
  virtual size_t quantized_bytes() const = 0;

  // .kvc: the quantized region's (n_blocks, n_octets) header fields (0, 0 for values), its arrays,
  // and their reader (the header's counts, already checked against n_quant(), are passed in).
  virtual void quantized_counts(uint64_t& n_blocks, uint64_t& n_octets) const = 0;
  virtual void save_quantized(std::vector<uint8_t>& out) const = 0;
  virtual void load_quantized(kvc::ByteReader& in, uint64_t n_blocks, uint64_t n_octets) = 0;
  // A stored (scale, zero) pair: both finite fp16, the scale not negative.
  static void check_params(fp16_t scale, fp16_t zero, const char* field);

  size_t n_quant() const { return n_quant_; }

  const int bits_;
  const size_t head_dim_;
  const size_t group_;         // G
  const size_t residual_cap_;  // R
  const size_t word_bytes_;    // bytes of one packed 8-code word

 private:
  static constexpr size_t kDecodeRows = 64;
  void flush_residual_front();

  size_t sink_slots_left_;  // rows still routed to the fp16 sinks (never refilled after eviction)
  size_t n_sinks_ = 0, n_quant_ = 0, n_resid_ = 0;
  std::vector<fp16_t> sinks_;           // [n_sinks_][head_dim]
  std::vector<fp16_t> residual_;        // [n_resid_][head_dim]
  std::optional<GearCorrection> gear_;  // codec gear: corrections of the quantized rows
};

// Constructors (arguments validated by make_kivi_row_store in kv/codecs/stores.h).
// boost: kitty's fp16 key channels per block (0 = plain KIVI); mixed: kivimix's 2/4-bit channels.
std::unique_ptr<RowStore> make_kivi_key_store(int bits, size_t head_dim, size_t group,
                                              size_t residual, size_t fp16_sinks, size_t boost,
                                              bool mixed);
std::unique_ptr<RowStore> make_kivi_value_store(int bits, size_t head_dim, size_t group,
                                                size_t residual, size_t fp16_sinks);

}  // namespace snapkv
