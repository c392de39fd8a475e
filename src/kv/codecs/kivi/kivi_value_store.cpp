// KiviValueStore: KIVI values, quantized per row over groups of G channels
// (include/snapkv/kv/codecs/kivi.h). Each row keeps ceil(head_dim/8) code words and
// ceil(head_dim/G) parameter pairs; attention accumulates weighted rows from the packed words
// directly (kivi_value_rows_accumulate). Eviction moves rows, never re-quantizes them.
#include <algorithm>
#include <memory>
#include <span>
#include <vector>

#include "kernels/kivi/kivi_kernels.h"
#include "kv/codecs/kivi/kivi_store.h"
#include "kv/file/kvc_bytes.h"
#include "snapkv/kv/codecs/kivi.h"

namespace snapkv {
namespace {

size_t ceil_div(size_t a, size_t b) {
  return (a + b - 1) / b;
}

class KiviValueStore final : public KiviStore {
 public:
  KiviValueStore(int bits, size_t head_dim, size_t group, size_t residual, size_t fp16_sinks)
      : KiviStore(bits, head_dim, group, residual, fp16_sinks),
        words_per_row_(ceil_div(head_dim, kKiviOctet)),
        groups_per_row_(ceil_div(head_dim, group)) {}

  std::unique_ptr<RowStore> clone() const override {
    return std::make_unique<KiviValueStore>(*this);
  }

 private:
  void quantize_rows(const float* rows, size_t n) override {
    for (size_t r = 0; r < n; ++r) quantize_row(rows + r * head_dim_);
  }

  void quantized_counts(uint64_t& n_blocks, uint64_t& n_octets) const override {
    n_blocks = 0;
    n_octets = 0;
  }

  void save_quantized(std::vector<uint8_t>& out) const override {
    kvc::append_array(out, codes_.data(), codes_.size());
    kvc::append_array(out, params_.data(), params_.size());
  }

  void load_quantized(kvc::ByteReader& in, uint64_t n_blocks, uint64_t n_octets) override {
    if (n_blocks != 0 || n_octets != 0) {
      throw_runtime("kvc", "kivi value store with key blocks",
                    std::to_string(n_blocks) + " blocks, " + std::to_string(n_octets) + " octets",
                    "0 and 0");
    }
    codes_ =
        in.array<uint8_t>(kvc::checked_mul(n_quant(), words_per_row_ * word_bytes_, "kivi codes"),
                          "kivi value codes");
    params_ = in.array<KiviParams>(kvc::checked_mul(n_quant(), groups_per_row_, "kivi params"),
                                   "kivi value params");
    for (const KiviParams& p : params_) check_params(p.scale, p.zero, "kivi value params");
  }

  void accumulate_quantized(float* out, const float* w, size_t stride, size_t n_q) const override {
    kivi_value_rows_accumulate(out, w, stride, n_q, codes_.data(), params_.data(), n_quant(),
                               head_dim_, group_, bits_);
  }

  void accumulate_quantized_span(float* out, const float* w, size_t stride, size_t n_q,
                                 size_t begin, size_t end) const override {
    prefetch_rows(end, std::min(n_quant(), end + kNextSpanPrefetchRows));
    kivi_value_rows_accumulate(out, w, stride, n_q, codes_.data() + begin * row_bytes(),
                               params_.data() + begin * groups_per_row_, end - begin, head_dim_,
                               group_, bits_);
  }

  void read_quantized(float* out, size_t begin, size_t end) const override {
    kivi_value_rows_decode(out, codes_.data() + begin * row_bytes(),
                           params_.data() + begin * groups_per_row_, end - begin, head_dim_, group_,
                           bits_);
  }

  size_t quantized_bytes() const override {
    return codes_.size() + params_.size() * sizeof(KiviParams);
  }

  size_t row_bytes() const { return words_per_row_ * word_bytes_; }

  // The first rows of the next span (LayerCache::attend reads the rows span by span, keys then
  // values): their codes and params are requested while this span's values are summed, so the
  // next call does not start on a cold stream (the float kernels of kivi_values_simd.cpp prefetch
  // ahead only inside a call; the integer ones, kivi_q8_values_simd.cpp / kivi_q16_values_simd.cpp,
  // also run past it, spread over their last tiles).
  static constexpr size_t kNextSpanPrefetchRows = 128;
  void prefetch_rows(size_t begin, size_t end) const {
    if (begin >= end) return;
    const uint8_t* codes = codes_.data() + begin * row_bytes();
    const size_t code_bytes = (end - begin) * row_bytes();
    for (size_t i = 0; i < code_bytes; i += 64) __builtin_prefetch(codes + i, 0, 1);
    const auto* params = reinterpret_cast<const uint8_t*>(params_.data() + begin * groups_per_row_);
    const size_t param_bytes = (end - begin) * groups_per_row_ * sizeof(KiviParams);
    for (size_t i = 0; i < param_bytes; i += 64) __builtin_prefetch(params + i, 0, 1);
  }

  // row: [head_dim] -> codes [words_per_row_] words + params [groups_per_row_].
  void quantize_row(const float* row) {
    const size_t code_at = codes_.size();
    codes_.resize(code_at + row_bytes(), 0);
    uint8_t* words = codes_.data() + code_at;
    const size_t param_at = params_.size();
    params_.resize(param_at + groups_per_row_);
    KiviParams* params = params_.data() + param_at;
    for (size_t g = 0; g < groups_per_row_; ++g) {
      const size_t c0 = g * group_, c1 = std::min(head_dim_, c0 + group_);
      const auto [lo, hi] = std::minmax_element(row + c0, row + c1);
      params[g] = kivi_choose_params(*lo, *hi, bits_);
    }
    for (size_t wi = 0; wi < words_per_row_; ++wi) {
      uint8_t codes[kKiviOctet] = {};
      for (size_t k = 0; k < kKiviOctet && wi * kKiviOctet + k < head_dim_; ++k) {
        const size_t c = wi * kKiviOctet + k;
        codes[k] = static_cast<uint8_t>(kivi_encode(row[c], params[c / group_], bits_));
      }
      kivi_store_word(words, wi, kivi_pack_word(codes, bits_), bits_);
    }
  }

  // Keeps quantized rows keep[i] - base: codes and params move, nothing is recomputed.
  void retain_quantized(std::span<const uint32_t> keep, size_t base) override {
    const size_t bytes = row_bytes();
    size_t write = 0;
    for (const uint32_t row : keep) {
      const size_t from = row - base;
      if (from != write) {
        std::copy_n(codes_.data() + from * bytes, bytes, codes_.data() + write * bytes);
        std::copy_n(params_.data() + from * groups_per_row_, groups_per_row_,
                    params_.data() + write * groups_per_row_);
      }
      ++write;
    }
    codes_.resize(write * bytes);
    params_.resize(write * groups_per_row_);
    codes_.shrink_to_fit();  // eviction is meant to give memory back
    params_.shrink_to_fit();
  }

  const size_t words_per_row_;      // ceil(head_dim / 8)
  const size_t groups_per_row_;     // ceil(head_dim / G)
  std::vector<uint8_t> codes_;      // [n_quant][words_per_row_] words
  std::vector<KiviParams> params_;  // [n_quant][groups_per_row_]
};

}  // namespace

std::unique_ptr<RowStore> make_kivi_value_store(int bits, size_t head_dim, size_t group,
                                                size_t residual, size_t fp16_sinks) {
  return std::make_unique<KiviValueStore>(bits, head_dim, group, residual, fp16_sinks);
}

}  // namespace snapkv
