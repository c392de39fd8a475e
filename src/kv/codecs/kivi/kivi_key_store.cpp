// KiviKeyStore: KIVI keys, quantized per channel over blocks of G rows
// (include/snapkv/kv/codecs/kivi.h). Each block keeps fp16 scales and zeros per channel and its
// codes as words of 8 rows of one channel; attention dots queries with the packed words directly
// (kivi_key_block_dot). Eviction moves surviving codes, never re-quantizes them. Kitty (boost_ >
// 0): each block also keeps its boost_ channels of largest max |x| in fp16; their KIVI parameters
// are (0, 0) and codes 0, so the packed kernel adds exactly 0 for them and a sparse pass adds q_c *
// x_c from the fp16 values. kivimix (wide_ > 0): each block quantizes its wide_ = head_dim/2
// channels of largest range at 4 bits, the rest at 2. A wide channel's 4-bit code splits into high
// and low 2-bit halves: the high half sits in the block's 2-bit words under the stored scale S = 4
// s (s: the 4-bit step), so the packed 2-bit kernels run unchanged, and the low half is kept per
// row; a pass over the wide channels adds q_c (S/4) low.
#include <algorithm>
#include <cmath>
#include <memory>
#include <span>
#include <vector>

#include "kernels/kivi/kivi_kernels.h"
#include "kernels/kivi/kivimix_kernels.h"
#include "kv/codecs/kivi/kivi_store.h"
#include "kv/file/kvc_bytes.h"
#include "snapkv/kv/codecs/kivi.h"
#include "snapkv/ops/dot.h"
#include "snapkv/util/error.h"

namespace snapkv {
namespace {

size_t ceil_div(size_t a, size_t b) {
  return (a + b - 1) / b;
}

class KiviKeyStore final : public KiviStore {
 public:
  KiviKeyStore(int bits, size_t head_dim, size_t group, size_t residual, size_t fp16_sinks,
               size_t boost, bool mixed)
      : KiviStore(bits, head_dim, group, residual, fp16_sinks),
        boost_(boost),
        wide_(mixed ? head_dim / 2 : 0),
        low_row_bytes_(ceil_div(wide_, kKiviOctet) * kivi_word_bytes(2)) {}

  std::unique_ptr<RowStore> clone() const override { return std::make_unique<KiviKeyStore>(*this); }

 private:
  // R rows -> R/G blocks of G rows.
  void quantize_rows(const float* rows, size_t n) override {
    for (size_t r0 = 0; r0 < n; r0 += group_) quantize_block(rows + r0 * head_dim_, group_);
  }

  void dot_quantized(float* out, size_t stride, const float* q, size_t n_q) const override {
    thread_local std::vector<float> params;  // [2][head_dim] scales, zeros of one block
    params.resize(2 * head_dim_);
    size_t row0 = 0;
    for (size_t b = 0; b < blocks_.size(); ++b) {
      const size_t run = full_run(b, blocks_.back().row_end);
      if (run > 0) {
        run_dot(out + row0, stride, q, n_q, b, run);
        b += run - 1;
        row0 = blocks_[b].row_end;
        continue;
      }
      const size_t n = blocks_[b].row_end - row0;
      if (b + kPrefetchBlocks < blocks_.size()) prefetch_block(b + kPrefetchBlocks);
      block_dot(out + row0, stride, q, n_q, params.data(), b, n);
      if (boost_ > 0) boost_dot(out + row0, stride, q, n_q, b, row0, n);
      if (wide_ > 0) wide_dot(out + row0, stride, q, n_q, params.data(), b, row0, n);
      row0 = blocks_[b].row_end;
    }
  }

  // Whole blocks run the packed kernel; a block the span cuts (only when a caller's span does not
  // come from span_end) is decoded and dotted row by row.
  void dot_quantized_span(float* out, size_t stride, const float* q, size_t n_q, size_t begin,
                          size_t end) const override {
    thread_local std::vector<float> params;  // [2][head_dim] scales, zeros of one block
    thread_local std::vector<float> rows;    // [rows of a cut block][head_dim]
    params.resize(2 * head_dim_);
    for (size_t b = block_of(begin); b < blocks_.size(); ++b) {
      const size_t first = b == 0 ? 0 : blocks_[b - 1].row_end, stop = blocks_[b].row_end;
      if (first >= end) break;
      if (first >= begin) {  // whole full blocks that end by end: one call
        const size_t run = full_run(b, end);
        if (run > 0) {
          run_dot(out + (first - begin), stride, q, n_q, b, run);
          b += run - 1;
          continue;
        }
      }
      if (b + kPrefetchBlocks < blocks_.size()) prefetch_block(b + kPrefetchBlocks);
      if (first >= begin && stop <= end) {
        float* dst = out + (first - begin);
        block_dot(dst, stride, q, n_q, params.data(), b, stop - first);
        if (boost_ > 0) boost_dot(dst, stride, q, n_q, b, first, stop - first);
        if (wide_ > 0) wide_dot(dst, stride, q, n_q, params.data(), b, first, stop - first);
        continue;
      }
      const size_t lo = std::max(begin, first), hi = std::min(end, stop);
      rows.resize((hi - lo) * head_dim_);
      read_quantized(rows.data(), lo, hi);
      for (size_t r = lo; r < hi; ++r) {
        for (size_t j = 0; j < n_q; ++j) {
          out[j * stride + (r - begin)] =
              dot(q + j * head_dim_, rows.data() + (r - lo) * head_dim_, head_dim_);
        }
      }
    }
  }

  // The number of blocks from b on that hold group_ rows each and end by row_limit, where the
  // integer form runs them in one kivi_key_blocks_dot_f16 call (no kivimix pass, whole octets);
  // 0 if none.
  size_t full_run(size_t b, size_t row_limit) const {
    if (wide_ > 0 || group_ % kKiviOctet != 0 || !kivi_key_dot_uses_q8(head_dim_, bits_)) return 0;
    size_t e = b;
    while (e < blocks_.size() && blocks_[e].row_end <= row_limit &&
           blocks_[e].row_end - (e == 0 ? 0 : blocks_[e - 1].row_end) == group_) {
      ++e;
    }
    return e - b;
  }

  // Blocks b .. b + run - 1 (full_run) into out (the first block's row 0 at out), then their
  // Kitty passes; the kernel prefetches the words and params ahead itself.
  void run_dot(float* out, size_t stride, const float* q, size_t n_q, size_t b, size_t run) const {
    kivi_key_blocks_dot_f16(out, stride, q, n_q, params_.data() + b * 2 * head_dim_, block_words(b),
                            run, group_, head_dim_, bits_);
    if (boost_ == 0) return;
    const size_t row0 = b == 0 ? 0 : blocks_[b - 1].row_end;
    for (size_t i = 0; i < run; ++i) {
      boost_dot(out + i * group_, stride, q, n_q, b + i, row0 + i * group_, group_);
    }
  }

  // kivi_key_block_dot of block b (n rows) into out; params: [2][head_dim] scratch that holds the
  // block's params in fp32 afterwards where kivimix's wide pass needs them (else the kernel reads
  // the stored fp16 ones).
  void block_dot(float* out, size_t stride, const float* q, size_t n_q, float* params, size_t b,
                 size_t n) const {
    const fp16_t* stored = params_.data() + b * 2 * head_dim_;
    if (wide_ == 0) {
      kivi_key_block_dot_f16(out, stride, q, n_q, stored, block_words(b), n, head_dim_, bits_);
      return;
    }
    fp16_to_fp32_n(params, stored, 2 * head_dim_);
    kivi_key_block_dot(out, stride, q, n_q, params, params + head_dim_, block_words(b), n,
                       head_dim_, bits_);
  }

  // Whole blocks from the one holding begin while they end by limit (at least that one block).
  size_t quantized_span_end(size_t begin, size_t limit) const override {
    size_t b = block_of(begin);
    size_t end = blocks_[b].row_end;
    while (b + 1 < blocks_.size() && blocks_[b + 1].row_end <= limit) end = blocks_[++b].row_end;
    return end;
  }

  // The block holding quantized row `row` (< n_quant()).
  size_t block_of(size_t row) const {
    return static_cast<size_t>(
        std::upper_bound(blocks_.begin(), blocks_.end(), row,
                         [](size_t r, const KiviKeyBlock& blk) { return r < blk.row_end; }) -
        blocks_.begin());
  }

  void read_quantized(float* out, size_t begin, size_t end) const override {
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
      fp16_to_fp32_n(params.data(), params_.data() + b * 2 * head_dim_, 2 * head_dim_);
      kivi_key_block_decode(out + (row - begin) * head_dim_, params.data(),
                            params.data() + head_dim_, block_words(b), row - first, stop - first,
                            head_dim_, bits_);
      const KittyChannel* channels = boost_channels_.data() + b * boost_;
      for (size_t r = row; r < stop; ++r) {  // kitty: the fp16 channels over the zero codes
        for (size_t k = 0; k < boost_; ++k) {
          out[(r - begin) * head_dim_ + channels[k]] = fp16_to_fp32(boost_values_[r * boost_ + k]);
        }
      }
      const KittyChannel* wide = wide_channels_.data() + b * wide_;
      for (size_t r = row; r < stop; ++r) {  // kivimix: + (S/4) low on the wide channels
        for (size_t k = 0; k < wide_; ++k) {
          out[(r - begin) * head_dim_ + wide[k]] +=
              (0.25f * params[wide[k]]) * static_cast<float>(low_code(r, k));
        }
      }
      row = stop;
    }
  }

  void quantized_counts(uint64_t& n_blocks, uint64_t& n_octets) const override {
    n_blocks = blocks_.size();
    n_octets = words_.size() / (head_dim_ * word_bytes_);
  }

  void save_quantized(std::vector<uint8_t>& out) const override {
    kvc::append_array(out, blocks_.data(), blocks_.size());
    kvc::append_array(out, params_.data(), params_.size());
    kvc::append_array(out, words_.data(), words_.size());
    kvc::append_array(out, boost_channels_.data(), boost_channels_.size());
    kvc::append_array(out, boost_values_.data(), boost_values_.size());
    kvc::append_array(out, wide_channels_.data(), wide_channels_.size());
    kvc::append_array(out, wide_low_.data(), wide_low_.size());
  }

  // The blocks, their parameters and code words, each block checked to hold 1..G rows and its
  // words to start where the previous block's end.
  void load_quantized(kvc::ByteReader& in, uint64_t n_blocks, uint64_t n_octets) override {
    const size_t n_quant_rows = n_quant();
    if (n_blocks > n_quant_rows || (n_quant_rows > 0 && n_blocks == 0)) {
      throw_runtime("kvc", "kivi key block count", std::to_string(n_blocks),
                    "between 1 and the " + std::to_string(n_quant_rows) + " quantized rows");
    }
    blocks_ = in.array<KiviKeyBlock>(static_cast<size_t>(n_blocks), "kivi key blocks");
    size_t row0 = 0, octets = 0;
    for (size_t b = 0; b < blocks_.size(); ++b) {
      const size_t n = blocks_[b].row_end >= row0 ? blocks_[b].row_end - row0 : 0;
      if (n == 0 || n > group_ || blocks_[b].octet_begin != octets) {
        throw_runtime("kvc", "kivi key block " + std::to_string(b),
                      "row_end " + std::to_string(blocks_[b].row_end) + ", octet_begin " +
                          std::to_string(blocks_[b].octet_begin),
                      "1.." + std::to_string(group_) + " rows after row " + std::to_string(row0) +
                          ", octet " + std::to_string(octets));
      }
      row0 = blocks_[b].row_end;
      octets += ceil_div(n, kKiviOctet);
    }
    if (row0 != n_quant_rows || octets != n_octets) {
      throw_runtime(
          "kvc", "kivi key blocks do not cover the quantized rows",
          std::to_string(row0) + " rows, " + std::to_string(octets) + " octets",
          std::to_string(n_quant_rows) + " rows, " + std::to_string(n_octets) + " octets");
    }
    params_ = in.array<fp16_t>(kvc::checked_mul(blocks_.size(), 2 * head_dim_, "kivi key params"),
                               "kivi key params");
    for (size_t b = 0; b < blocks_.size(); ++b) {
      for (size_t c = 0; c < head_dim_; ++c) {
        check_params(params_[b * 2 * head_dim_ + c], params_[b * 2 * head_dim_ + head_dim_ + c],
                     "kivi key params");
      }
    }
    words_ = in.array<uint8_t>(kvc::checked_mul(octets, head_dim_ * word_bytes_, "kivi key words"),
                               "kivi key words");
    load_boost(in);
    load_wide(in);
  }

  // kivimix's channel lists (increasing, < head_dim) and low codes (bits past wide_ zero).
  void load_wide(kvc::ByteReader& in) {
    wide_channels_ = in.array<KittyChannel>(
        kvc::checked_mul(blocks_.size(), wide_, "kivimix channels"), "kivimix channels");
    for (size_t b = 0; b < blocks_.size(); ++b) {
      for (size_t k = 0; k < wide_; ++k) {
        const size_t c = wide_channels_[b * wide_ + k];
        if (c >= head_dim_ || (k > 0 && c <= wide_channels_[b * wide_ + k - 1])) {
          throw_runtime("kvc", "kivimix channel list of key block " + std::to_string(b),
                        "channel " + std::to_string(c) + " at " + std::to_string(k),
                        "increasing channels < " + std::to_string(head_dim_));
        }
      }
    }
    wide_low_ = in.array<uint8_t>(kvc::checked_mul(n_quant(), low_row_bytes_, "kivimix low codes"),
                                  "kivimix low codes");
    for (size_t r = 0; r < n_quant() && wide_ % kKiviOctet != 0; ++r) {
      const uint32_t last =
          kivi_load_word(wide_low_.data() + r * low_row_bytes_, wide_ / kKiviOctet, 2);
      if ((last >> (2 * (wide_ % kKiviOctet))) != 0) {
        throw_runtime("kvc", "kivimix low codes of row " + std::to_string(r),
                      "codes past channel " + std::to_string(wide_), "0");
      }
    }
  }

  // Kitty's channel lists (increasing, < head_dim, their KIVI params (0, 0)) and fp16 values.
  void load_boost(kvc::ByteReader& in) {
    boost_channels_ = in.array<KittyChannel>(
        kvc::checked_mul(blocks_.size(), boost_, "kitty channels"), "kitty channels");
    for (size_t b = 0; b < blocks_.size(); ++b) {
      for (size_t k = 0; k < boost_; ++k) {
        const size_t c = boost_channels_[b * boost_ + k];
        const bool ordered = k == 0 || c > boost_channels_[b * boost_ + k - 1];
        const fp16_t* p = params_.data() + b * 2 * head_dim_;
        if (c >= head_dim_ || !ordered || p[c] != 0 || p[head_dim_ + c] != 0) {
          throw_runtime("kvc", "kitty channel list of key block " + std::to_string(b),
                        "channel " + std::to_string(c) + " at " + std::to_string(k),
                        "increasing channels < " + std::to_string(head_dim_) +
                            " whose KIVI params are (0, 0)");
        }
      }
    }
    boost_values_ =
        in.array<fp16_t>(kvc::checked_mul(n_quant(), boost_, "kitty values"), "kitty values");
    kvc::check_fp16_values(boost_values_, "kitty values", false);
  }

  size_t quantized_bytes() const override {
    return words_.size() + params_.size() * sizeof(fp16_t) + blocks_.size() * sizeof(KiviKeyBlock) +
           boost_channels_.size() * sizeof(KittyChannel) + boost_values_.size() * sizeof(fp16_t) +
           wide_channels_.size() * sizeof(KittyChannel) + wide_low_.size();
  }

  // Blocks ahead of the one being dotted whose words and params are prefetched (T2, as the fp16
  // rows are: kernels/fp16_rows_simd.cpp); the hardware prefetcher alone does not keep the key
  // kernels fed at 16K-64K rows.
  static constexpr size_t kPrefetchBlocks = 4;
  // The integer key kernels (kernels/kivi/kivi_q8_blocks_simd.cpp) prefetch the words
  // themselves, a line per step of their loop, so only the params are prefetched for them here.
  void prefetch_block(size_t b) const {
    if (!kivi_key_dot_uses_q8(head_dim_, bits_)) {
      const uint8_t* words = block_words(b);
      const size_t word_bytes =
          (blocks_[b].row_end - (b == 0 ? 0 : blocks_[b - 1].row_end) + kKiviOctet - 1) /
          kKiviOctet * head_dim_ * word_bytes_;
      for (size_t i = 0; i < word_bytes; i += 64) __builtin_prefetch(words + i, 0, 1);
    }
    const fp16_t* p = params_.data() + b * 2 * head_dim_;
    for (size_t i = 0; i < 2 * head_dim_; i += 32) __builtin_prefetch(p + i, 0, 1);
  }

  const uint8_t* block_words(size_t b) const {
    return words_.data() + blocks_[b].octet_begin * head_dim_ * word_bytes_;
  }

  // rows: [n][head_dim] -> one block (per-channel params over the n rows).
  void quantize_block(const float* rows, size_t n) {
    const size_t n_oct = ceil_div(n, kKiviOctet);
    const size_t octet_begin = words_.size() / (head_dim_ * word_bytes_);
    const size_t param_at = params_.size();
    params_.resize(param_at + 2 * head_dim_);
    fp16_t* scales = params_.data() + param_at;
    fp16_t* zeros = scales + head_dim_;
    std::vector<KiviParams> params(head_dim_);
    std::vector<float> magnitude(head_dim_);  // max |x| per channel over the block
    std::vector<float> lows(head_dim_), highs(head_dim_);
    for (size_t c = 0; c < head_dim_; ++c) {
      float lo = rows[c], hi = rows[c];
      for (size_t r = 1; r < n; ++r) {
        lo = std::min(lo, rows[r * head_dim_ + c]);
        hi = std::max(hi, rows[r * head_dim_ + c]);
      }
      params[c] = kivi_choose_params(lo, hi, bits_);
      magnitude[c] = std::max(std::fabs(lo), std::fabs(hi));
      lows[c] = lo;
      highs[c] = hi;
    }
    std::vector<KiviParams> params4;  // kivimix: the wide channels' 4-bit parameters, [wide_]
    std::vector<KittyChannel> wide;   // kivimix: the wide channels, increasing
    if (wide_ > 0) choose_wide(lows, highs, params, params4, wide);
    if (boost_ > 0) {  // kitty: the boost_ largest channels (ties: lower index) go fp16
      std::vector<KittyChannel> order(head_dim_);
      for (size_t c = 0; c < head_dim_; ++c) order[c] = static_cast<KittyChannel>(c);
      std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(boost_),
                        order.end(), [&](KittyChannel a, KittyChannel b) {
                          return magnitude[a] != magnitude[b] ? magnitude[a] > magnitude[b] : a < b;
                        });
      std::sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(boost_));
      boost_channels_.insert(boost_channels_.end(), order.begin(),
                             order.begin() + static_cast<std::ptrdiff_t>(boost_));
      for (size_t r = 0; r < n; ++r) {
        for (size_t k = 0; k < boost_; ++k) {
          boost_values_.push_back(fp32_to_fp16(rows[r * head_dim_ + order[k]]));
        }
      }
      for (size_t k = 0; k < boost_; ++k) params[order[k]] = KiviParams{0, 0};
    }
    for (size_t c = 0; c < head_dim_; ++c) {
      scales[c] = params[c].scale;
      zeros[c] = params[c].zero;
    }
    const size_t word_at = words_.size();
    words_.resize(word_at + n_oct * head_dim_ * word_bytes_);
    uint8_t* words = words_.data() + word_at;
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
    if (wide_ > 0) {  // the wide channels: 4-bit codes, high half into the words, low half apart
      wide_channels_.insert(wide_channels_.end(), wide.begin(), wide.end());
      const size_t low_at = wide_low_.size();
      wide_low_.resize(low_at + n * low_row_bytes_);
      for (size_t r = 0; r < n; ++r) {
        for (size_t k0 = 0; k0 < wide_; k0 += kKiviOctet) {
          uint8_t low[kKiviOctet] = {};  // channels past wide_: code 0
          for (size_t k = k0; k < std::min(wide_, k0 + kKiviOctet); ++k) {
            const size_t c = wide[k];
            const uint32_t code = kivi_encode(rows[r * head_dim_ + c], params4[k], 4);
            low[k - k0] = static_cast<uint8_t>(code & 3u);
            const size_t word = (r / kKiviOctet) * head_dim_ + c;
            uint8_t high[kKiviOctet];
            kivi_unpack_word(high, kivi_load_word(words, word, bits_), bits_);
            high[r % kKiviOctet] = static_cast<uint8_t>(code >> 2);
            kivi_store_word(words, word, kivi_pack_word(high, bits_), bits_);
          }
          kivi_store_word(wide_low_.data() + low_at + r * low_row_bytes_, k0 / kKiviOctet,
                          kivi_pack_word(low, 2), 2);
        }
      }
    }
    const size_t row_end = (blocks_.empty() ? 0 : blocks_.back().row_end) + n;
    blocks_.push_back({static_cast<uint32_t>(row_end), static_cast<uint32_t>(octet_begin)});
  }

  // Keeps quantized rows keep[i] - base. Blocks keep their parameters; a block that lost rows has
  // its surviving codes re-packed (codes unchanged, only moved), an emptied block goes.
  void retain_quantized(std::span<const uint32_t> keep, size_t base) override {
    std::vector<KiviKeyBlock> blocks;
    std::vector<fp16_t> params;
    std::vector<uint8_t> words;
    std::vector<KittyChannel> boost_channels;  // kitty: moved with their blocks and rows
    std::vector<fp16_t> boost_values;
    std::vector<KittyChannel> wide_channels;  // kivimix: moved with their blocks and rows
    std::vector<uint8_t> wide_low;
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
                      params_.begin() + static_cast<std::ptrdiff_t>(b * 2 * head_dim_),
                      params_.begin() + static_cast<std::ptrdiff_t>((b + 1) * 2 * head_dim_));
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
        boost_channels.insert(
            boost_channels.end(), boost_channels_.begin() + static_cast<std::ptrdiff_t>(b * boost_),
            boost_channels_.begin() + static_cast<std::ptrdiff_t>((b + 1) * boost_));
        for (const size_t from : kept) {
          const auto src =
              boost_values_.begin() + static_cast<std::ptrdiff_t>((row0 + from) * boost_);
          boost_values.insert(boost_values.end(), src, src + static_cast<std::ptrdiff_t>(boost_));
        }
        wide_channels.insert(wide_channels.end(),
                             wide_channels_.begin() + static_cast<std::ptrdiff_t>(b * wide_),
                             wide_channels_.begin() + static_cast<std::ptrdiff_t>((b + 1) * wide_));
        for (const size_t from : kept) {
          const auto src =
              wide_low_.begin() + static_cast<std::ptrdiff_t>((row0 + from) * low_row_bytes_);
          wide_low.insert(wide_low.end(), src, src + static_cast<std::ptrdiff_t>(low_row_bytes_));
        }
        row_end += kept.size();
        blocks.push_back({static_cast<uint32_t>(row_end), static_cast<uint32_t>(octets)});
        octets += n_oct;
      }
      row0 = end;
    }
    SNAPKV_CHECK(it == keep.end());
    blocks_ = std::move(blocks);
    params_ = std::move(params);
    words_ = std::move(words);
    boost_channels_ = std::move(boost_channels);
    boost_values_ = std::move(boost_values);
    wide_channels_ = std::move(wide_channels);
    wide_low_ = std::move(wide_low);
  }

  // kivimix: the wide_ channels of largest range hi - lo (ties: lower index), increasing, into
  // wide; their 4-bit parameters into params4 and their stored (S = 4 s, zero) into params.
  void choose_wide(const std::vector<float>& lows, const std::vector<float>& highs,
                   std::vector<KiviParams>& params, std::vector<KiviParams>& params4,
                   std::vector<KittyChannel>& wide) const {
    std::vector<KittyChannel> order(head_dim_);
    for (size_t c = 0; c < head_dim_; ++c) order[c] = static_cast<KittyChannel>(c);
    const auto range = [&](size_t c) { return highs[c] - lows[c]; };
    std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(wide_),
                      order.end(), [&](KittyChannel a, KittyChannel b) {
                        return range(a) != range(b) ? range(a) > range(b) : a < b;
                      });
    std::sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(wide_));
    wide.assign(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(wide_));
    params4.resize(wide_);
    for (size_t k = 0; k < wide_; ++k) {
      const size_t c = wide[k];
      params4[k] = kivi_choose_params(lows[c], highs[c], 4);
      // 4 s is exact in fp16: s <= 2 * 65504 / 15 rounded up, so 4 s < 65504; x4 is exact.
      params[c] = KiviParams{fp32_to_fp16(4.0f * fp16_to_fp32(params4[k].scale)), params4[k].zero};
    }
  }

  // kivimix: the low 2-bit half of quantized row `row`'s k-th wide channel.
  uint32_t low_code(size_t row, size_t k) const {
    const uint32_t word =
        kivi_load_word(wide_low_.data() + row * low_row_bytes_, k / kKiviOctet, 2);
    return (word >> (2 * (k % kKiviOctet))) & 3u;
  }

  // kivimix: out[j * stride + r] += sum_k q[j][wide k] * (S_wide k / 4) * low(row0 + r, k) for the
  // n rows of block b (scales: the block's stored scales in fp32, [head_dim]); each row's sum adds
  // its channels in order, from 0 (kernels/kivi/kivimix_kernels.h: the active ISA level's kernel,
  // equal bit for bit to kivimix_wide_dot_scalar).
  void wide_dot(float* out, size_t stride, const float* q, size_t n_q, const float* scales,
                size_t b, size_t row0, size_t n) const {
    thread_local std::vector<float> qk;  // [n_q][wide_]
    qk.resize(n_q * wide_);
    kivimix_wide_weights(qk.data(), q, n_q, head_dim_, scales, wide_channels_.data() + b * wide_,
                         wide_);
    kivimix_wide_dot(out, stride, qk.data(), n_q, wide_, wide_low_.data() + row0 * low_row_bytes_,
                     low_row_bytes_, n);
  }

  // Kitty: out[j * stride + r] += sum_k q[j][channel k] * value(row0 + r, k) for the n rows of
  // block b (the packed kernel added exactly 0 for these channels).
  void boost_dot(float* out, size_t stride, const float* q, size_t n_q, size_t b, size_t row0,
                 size_t n) const {
    // per block: the fp16 values in fp32 at once (F16C where the ISA level has it), transposed to
    // [boost_][n] so the sums run across rows (vectorised), and the queries' boosted channels
    // gathered once; each row's sum still adds its channels in order, from 0
    thread_local std::vector<float> values, by_channel, sums;  // [n][boost_], [boost_][n], [n]
    values.resize(n * boost_);
    by_channel.resize(boost_ * n);
    sums.resize(n);
    fp16_to_fp32_n(values.data(), boost_values_.data() + row0 * boost_, n * boost_);
    for (size_t r = 0; r < n; ++r) {
      for (size_t k = 0; k < boost_; ++k) by_channel[k * n + r] = values[r * boost_ + k];
    }
    const KittyChannel* channels = boost_channels_.data() + b * boost_;
    for (size_t j = 0; j < n_q; ++j) {
      std::fill(sums.begin(), sums.end(), 0.0f);
      for (size_t k = 0; k < boost_; ++k) {
        const float qk = q[j * head_dim_ + channels[k]];
        const float* v = by_channel.data() + k * n;
        for (size_t r = 0; r < n; ++r) sums[r] += qk * v[r];
      }
      for (size_t r = 0; r < n; ++r) out[j * stride + r] += sums[r];
    }
  }

  std::vector<KiviKeyBlock> blocks_;          // [n_blocks]
  std::vector<fp16_t> params_;                // [n_blocks][2][head_dim]: scales, then zeros
  std::vector<uint8_t> words_;                // [total octets][head_dim] words
  const size_t boost_;                        // kitty channels per block (0: plain KIVI)
  std::vector<KittyChannel> boost_channels_;  // [n_blocks][boost_], increasing
  std::vector<fp16_t> boost_values_;          // [n_quant][boost_]
  const size_t wide_;                         // kivimix: 4-bit channels per block (0: none)
  const size_t low_row_bytes_;                // kivimix: bytes of one row's low codes
  std::vector<KittyChannel> wide_channels_;   // [n_blocks][wide_], increasing
  std::vector<uint8_t> wide_low_;             // [n_quant][ceil(wide_/8)] 2-bit words
};

}  // namespace

std::unique_ptr<RowStore> make_kivi_key_store(int bits, size_t head_dim, size_t group,
                                              size_t residual, size_t fp16_sinks, size_t boost,
                                              bool mixed) {
  return std::make_unique<KiviKeyStore>(bits, head_dim, group, residual, fp16_sinks, boost, mixed);
}

}  // namespace snapkv
