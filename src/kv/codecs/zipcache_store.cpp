// ZipCacheStore: per-row mixed precision (include/snapkv/kv/codecs/zipcache.h). Rows wait in fp16
// until LayerCache routes them (settle), then leave for the quantized region R at a time; eviction
// moves codes, parameters and the precision map, never re-quantizes.
#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>
#include <span>
#include <string>
#include <vector>

#include "kernels/fp16_rows.h"
#include "kernels/kivi/kivi_kernels.h"
#include "kv/codecs/stores.h"
#include "kv/file/kvc_bytes.h"
#include "snapkv/kv/codecs/kivi.h"
#include "snapkv/kv/codecs/zipcache.h"
#include "snapkv/kv/file/kvc_format.h"
#include "snapkv/ops/dot.h"
#include "snapkv/util/error.h"
#include "snapkv/util/text.h"

namespace snapkv {
namespace {

size_t ceil_div(size_t a, size_t b) {
  return (a + b - 1) / b;
}

constexpr int kLowBits = 2;

class ZipCacheStore final : public RowStore {
 public:
  ZipCacheStore(RowRole role, size_t head_dim, size_t group, size_t residual, double salient,
                size_t high_bits)
      : keys_(role == RowRole::key),
        head_dim_(head_dim),
        group_(group),
        residual_cap_(residual),
        salient_(salient),
        high_bits_(high_bits),
        words_(ceil_div(head_dim, kKiviOctet)),
        groups_(ceil_div(head_dim, group)) {}

  size_t rows() const override { return prec_.size() + pending_route_.size(); }
  size_t head_dim() const override { return head_dim_; }

  void append(const float* data, size_t n) override {
    if (n == 0) return;
    for (size_t i = 0; i < n * head_dim_; ++i) {
      if (!(std::fabs(data[i]) <= kFp16Max)) {
        throw_invalid("zipcache", "row value outside the fp16 range",
                      "row " + num(i / head_dim_) + " channel " + num(i % head_dim_) + " = " +
                          std::to_string(data[i]),
                      "a finite value with |x| <= 65504");
      }
    }
    if (rows() + n > UINT32_MAX)
      throw_invalid("zipcache", "too many rows", num(rows() + n), "< 2^32");
    while (pending_route_.size() >= residual_cap_ &&
           std::none_of(pending_route_.begin(),
                        pending_route_.begin() + static_cast<std::ptrdiff_t>(residual_cap_),
                        [](uint8_t r) { return r == kZipUnrouted; })) {
      flush_front();
    }
    const size_t at = pending_.size();
    pending_.resize(at + n * head_dim_);
    fp32_to_fp16_n(pending_.data() + at, data, n * head_dim_);
    pending_route_.resize(pending_route_.size() + n, kZipUnrouted);
  }

  size_t unsettled_rows() const override {
    return static_cast<size_t>(
        std::count(pending_route_.begin(), pending_route_.end(), kZipUnrouted));
  }

  void settle(std::span<const float> saliency) override {
    if (!saliency.empty() && saliency.size() != rows()) {
      throw_invalid("zipcache", "saliency size", num(saliency.size()), "rows() = " + num(rows()));
    }
    std::vector<uint32_t> unrouted;  // pending indices
    for (size_t i = 0; i < pending_route_.size(); ++i) {
      if (pending_route_[i] == kZipUnrouted) unrouted.push_back(static_cast<uint32_t>(i));
    }
    for (const uint32_t i : unrouted) pending_route_[i] = kZipRoutedLow;
    if (!saliency.empty() && !unrouted.empty()) route_high(saliency, unrouted);
    // Every pending row is routed now: whole segments leave for the quantized region at once, so
    // the next attention (which reads the cache before its own rows are appended) sees them
    // quantized.
    while (pending_route_.size() >= residual_cap_) flush_front();
  }

  void retain(std::span<const uint32_t> keep) override {
    const size_t total = rows();
    for (size_t i = 0; i < keep.size(); ++i) {
      if (keep[i] >= total || (i > 0 && keep[i] <= keep[i - 1])) {
        throw_invalid("zipcache", "retain indices must be strictly increasing and < rows",
                      "index " + num(keep[i]) + " at " + num(i),
                      "< " + num(total) + " and above the previous one");
      }
    }
    const size_t n_quant = prec_.size();
    const auto split = std::lower_bound(keep.begin(), keep.end(), n_quant);
    retain_quantized(std::span<const uint32_t>(keep.begin(), split));
    const std::span<const uint32_t> keep_pending(split, keep.end());
    fp16_rows_compact(pending_, keep_pending, n_quant, head_dim_);
    size_t write = 0;
    for (const uint32_t row : keep_pending) pending_route_[write++] = pending_route_[row - n_quant];
    pending_route_.resize(write);
  }

  void read(float* out, size_t begin, size_t end) const override {
    if (begin > end || end > rows()) {
      throw_invalid("zipcache", "read range out of bounds",
                    "[" + num(begin) + ", " + num(end) + ")",
                    "a range within [0, " + num(rows()) + ")");
    }
    const size_t n_quant = prec_.size();
    if (begin < n_quant) read_quantized(out, begin, std::min(end, n_quant));
    if (end > n_quant) {
      const size_t from = std::max(begin, n_quant);
      fp16_to_fp32_n(out + (from - begin) * head_dim_,
                     pending_.data() + (from - n_quant) * head_dim_, (end - from) * head_dim_);
    }
  }

  // Quantized rows are decoded kDecodeRows at a time (never the whole cache at once).
  void dot_rows(float* out, const float* q, size_t n_q) const override {
    const size_t stride = rows(), n_quant = prec_.size();
    thread_local std::vector<float> buf;
    Cursor cursor;
    for (size_t r0 = 0; r0 < n_quant; r0 += kDecodeRows) {
      const size_t nr = std::min(kDecodeRows, n_quant - r0);
      buf.resize(nr * head_dim_);
      read_quantized(buf.data(), r0, r0 + nr, &cursor);
      for (size_t r = 0; r < nr; ++r) {
        for (size_t j = 0; j < n_q; ++j) {
          out[j * stride + r0 + r] = dot(q + j * head_dim_, buf.data() + r * head_dim_, head_dim_);
        }
      }
    }
    fp16_rows_dot(out + n_quant, stride, q, n_q, pending_.data(), pending_route_.size(), head_dim_);
  }

  void accumulate_rows(float* out, const float* w, size_t n_q) const override {
    const size_t stride = rows(), n_quant = prec_.size();
    thread_local std::vector<float> buf;
    Cursor cursor;
    for (size_t r0 = 0; r0 < n_quant; r0 += kDecodeRows) {
      const size_t nr = std::min(kDecodeRows, n_quant - r0);
      buf.resize(nr * head_dim_);
      read_quantized(buf.data(), r0, r0 + nr, &cursor);
      for (size_t r = 0; r < nr; ++r) {
        for (size_t j = 0; j < n_q; ++j) {
          axpy(out + j * head_dim_, w[j * stride + r0 + r], buf.data() + r * head_dim_, head_dim_);
        }
      }
    }
    fp16_rows_accumulate(out, w + n_quant, stride, n_q, pending_.data(), pending_route_.size(),
                         head_dim_);
  }

  size_t bytes() const override {
    return segments_.size() * sizeof(ZipSegment) + chan_.size() * sizeof(fp16_t) + prec_.size() +
           low_codes_.size() + low_params_.size() * sizeof(KiviParams) + high_codes_.size() +
           high_params_.size() * sizeof(KiviParams) + high_rows_.size() * sizeof(fp16_t) +
           pending_.size() * sizeof(fp16_t) + pending_route_.size();
  }

  std::unique_ptr<RowStore> clone() const override {
    return std::make_unique<ZipCacheStore>(*this);
  }

  void save(std::vector<uint8_t>& out) const override {
    kvc::append_pod(out,
                    KvcZipStore{prec_.size(), n_high(), pending_route_.size(), segments_.size()});
    kvc::append_array(out, segments_.data(), segments_.size());
    kvc::append_array(out, chan_.data(), chan_.size());
    kvc::append_array(out, prec_.data(), prec_.size());
    kvc::append_array(out, low_codes_.data(), low_codes_.size());
    kvc::append_array(out, low_params_.data(), low_params_.size());
    kvc::append_array(out, high_codes_.data(), high_codes_.size());
    kvc::append_array(out, high_params_.data(), high_params_.size());
    kvc::append_array(out, high_rows_.data(), high_rows_.size());
    kvc::append_array(out, pending_.data(), pending_.size());
    kvc::append_array(out, pending_route_.data(), pending_route_.size());
  }

  void load(std::span<const uint8_t> record);

 private:
  static constexpr size_t kDecodeRows = 64;

  // Routes the round(salient * n) highest-saliency rows of `unrouted` (pending indices) high.
  void route_high(std::span<const float> saliency, std::vector<uint32_t>& unrouted) {
    const size_t base = prec_.size();
    for (const uint32_t i : unrouted) {
      if (!std::isfinite(saliency[base + i])) {
        throw_invalid("zipcache", "saliency of row " + num(base + i),
                      std::to_string(saliency[base + i]), "a finite number");
      }
    }
    const size_t n_high = std::min(
        unrouted.size(),
        static_cast<size_t>(std::llround(salient_ * static_cast<double>(unrouted.size()))));
    std::stable_sort(unrouted.begin(), unrouted.end(), [&](uint32_t a, uint32_t b) {
      return saliency[base + a] > saliency[base + b];
    });
    for (size_t k = 0; k < n_high; ++k) pending_route_[unrouted[k]] = kZipRoutedHigh;
  }

  size_t n_high() const {
    return static_cast<size_t>(std::count(prec_.begin(), prec_.end(), kZipHigh));
  }
  size_t code_bytes(int bits) const { return words_ * static_cast<size_t>(bits); }
  bool high_fp16() const { return high_bits_ == 16; }

  // rows: [n][head_dim] fp32 -> codes [words_] words + params [groups_] per row, at `bits`.
  void quantize_row(const float* row, int bits, std::vector<uint8_t>& codes,
                    std::vector<KiviParams>& params) const {
    const size_t code_at = codes.size(), param_at = params.size();
    codes.resize(code_at + code_bytes(bits), 0);
    params.resize(param_at + groups_);
    KiviParams* p = params.data() + param_at;
    for (size_t g = 0; g < groups_; ++g) {
      const size_t c0 = g * group_, c1 = std::min(head_dim_, c0 + group_);
      const auto [lo, hi] = std::minmax_element(row + c0, row + c1);
      p[g] = kivi_choose_params(*lo, *hi, bits);
    }
    for (size_t wi = 0; wi < words_; ++wi) {
      uint8_t c[kKiviOctet] = {};
      for (size_t k = 0; k < kKiviOctet && wi * kKiviOctet + k < head_dim_; ++k) {
        const size_t ch = wi * kKiviOctet + k;
        c[k] = static_cast<uint8_t>(kivi_encode(row[ch], p[ch / group_], bits));
      }
      kivi_store_word(codes.data() + code_at, wi, kivi_pack_word(c, bits), bits);
    }
  }

  // The oldest R pending rows (all routed) become one segment.
  void flush_front() {
    const size_t n = residual_cap_, d = head_dim_;
    std::vector<float> x(n * d);  // [n][d]
    fp16_to_fp32_n(x.data(), pending_.data(), n * d);
    std::vector<float> chan(d, 1.0f);
    if (keys_) {
      const size_t at = chan_.size();
      chan_.resize(at + d);
      for (size_t c = 0; c < d; ++c) {
        float m = 0.0f;
        for (size_t i = 0; i < n; ++i) m = std::max(m, std::fabs(x[i * d + c]));
        chan_[at + c] = m > 0.0f ? fp32_to_fp16(std::sqrt(m)) : fp32_to_fp16(1.0f);
        chan[c] = fp16_to_fp32(chan_[at + c]);
      }
    }
    std::vector<float> y(d);
    for (size_t i = 0; i < n; ++i) {
      const bool high = pending_route_[i] == kZipRoutedHigh;
      prec_.push_back(high ? kZipHigh : kZipLow);
      if (high && high_fp16()) {
        high_rows_.insert(high_rows_.end(), pending_.begin() + static_cast<std::ptrdiff_t>(i * d),
                          pending_.begin() + static_cast<std::ptrdiff_t>((i + 1) * d));
        continue;
      }
      for (size_t c = 0; c < d; ++c) y[c] = x[i * d + c] / chan[c];
      if (high) {
        quantize_row(y.data(), 4, high_codes_, high_params_);
      } else {
        quantize_row(y.data(), kLowBits, low_codes_, low_params_);
      }
    }
    segments_.push_back({static_cast<uint32_t>(prec_.size())});
    pending_.erase(pending_.begin(), pending_.begin() + static_cast<std::ptrdiff_t>(n * d));
    pending_route_.erase(pending_route_.begin(),
                         pending_route_.begin() + static_cast<std::ptrdiff_t>(n));
  }

  // Where row `row` of the quantized region sits: its index among the low and the high rows.
  struct Cursor {
    size_t row = 0, lo = 0, hi = 0;
  };

  // Decodes quantized rows [begin, end) into out: [end - begin][head_dim]. cursor (optional):
  // the position of `begin` when the caller walks the rows in order (else found by a scan);
  // left at `end`.
  void read_quantized(float* out, size_t begin, size_t end, Cursor* cursor = nullptr) const {
    const size_t d = head_dim_;
    Cursor scan;
    Cursor& at = cursor != nullptr ? *cursor : scan;
    if (at.row != begin) at = Cursor{};
    for (; at.row < begin; ++at.row) (prec_[at.row] == kZipHigh ? at.hi : at.lo)++;
    size_t& lo = at.lo;
    size_t& hi = at.hi;
    size_t s = static_cast<size_t>(
        std::upper_bound(segments_.begin(), segments_.end(), begin,
                         [](size_t row, const ZipSegment& seg) { return row < seg.row_end; }) -
        segments_.begin());
    std::vector<float> chan(d, 1.0f);
    size_t chan_seg = SIZE_MAX;
    for (size_t row = begin; row < end; ++row) {
      while (row >= segments_[s].row_end) ++s;
      float* dst = out + (row - begin) * d;
      if (prec_[row] == kZipHigh) {
        if (high_fp16()) {
          fp16_to_fp32_n(dst, high_rows_.data() + hi * d, d);
          ++hi;
          continue;
        }
        kivi_value_rows_decode(dst, high_codes_.data() + hi * code_bytes(4),
                               high_params_.data() + hi * groups_, 1, d, group_, 4);
        ++hi;
      } else {
        kivi_value_rows_decode(dst, low_codes_.data() + lo * code_bytes(kLowBits),
                               low_params_.data() + lo * groups_, 1, d, group_, kLowBits);
        ++lo;
      }
      if (keys_) {
        if (chan_seg != s) {
          fp16_to_fp32_n(chan.data(), chan_.data() + s * d, d);
          chan_seg = s;
        }
        for (size_t c = 0; c < d; ++c) dst[c] = chan[c] * dst[c];
      }
    }
    at.row = end;
  }

  // Keeps quantized rows keep[i] (increasing, < n_quant): everything moves, nothing is recomputed.
  void retain_quantized(std::span<const uint32_t> keep) {
    const size_t d = head_dim_;
    const size_t lo_bytes = code_bytes(kLowBits), hi_bytes = high_fp16() ? 0 : code_bytes(4);
    std::vector<ZipSegment> segments;
    std::vector<fp16_t> chan;
    std::vector<uint8_t> prec;
    size_t lo_w = 0, hi_w = 0, lo = 0, hi = 0, row0 = 0;
    auto it = keep.begin();
    for (size_t s = 0; s < segments_.size(); ++s) {
      const size_t end = segments_[s].row_end;
      size_t kept = 0;
      for (size_t row = row0; row < end; ++row) {
        const bool high = prec_[row] == kZipHigh;
        const bool keep_row = it != keep.end() && *it == row;
        if (keep_row) {
          ++it;
          ++kept;
          prec.push_back(prec_[row]);
          if (high && high_fp16()) {
            std::copy_n(high_rows_.data() + hi * d, d, high_rows_.data() + hi_w * d);
          } else if (high) {
            std::copy_n(high_codes_.data() + hi * hi_bytes, hi_bytes,
                        high_codes_.data() + hi_w * hi_bytes);
            std::copy_n(high_params_.data() + hi * groups_, groups_,
                        high_params_.data() + hi_w * groups_);
          } else {
            std::copy_n(low_codes_.data() + lo * lo_bytes, lo_bytes,
                        low_codes_.data() + lo_w * lo_bytes);
            std::copy_n(low_params_.data() + lo * groups_, groups_,
                        low_params_.data() + lo_w * groups_);
          }
          (high ? hi_w : lo_w)++;
        }
        (high ? hi : lo)++;
      }
      if (kept > 0) {
        segments.push_back({static_cast<uint32_t>(prec.size())});
        if (keys_) {
          chan.insert(chan.end(), chan_.begin() + static_cast<std::ptrdiff_t>(s * d),
                      chan_.begin() + static_cast<std::ptrdiff_t>((s + 1) * d));
        }
      }
      row0 = end;
    }
    SNAPKV_CHECK(it == keep.end());
    segments_ = std::move(segments);
    chan_ = std::move(chan);
    prec_ = std::move(prec);
    low_codes_.resize(lo_w * lo_bytes);
    low_params_.resize(lo_w * groups_);
    if (high_fp16()) {
      high_rows_.resize(hi_w * d);
    } else {
      high_codes_.resize(hi_w * hi_bytes);
      high_params_.resize(hi_w * groups_);
    }
  }

  const bool keys_;
  const size_t head_dim_, group_, residual_cap_;
  const double salient_;
  const size_t high_bits_;
  const size_t words_;                   // ceil(head_dim / 8) code words per row
  const size_t groups_;                  // ceil(head_dim / G) parameter pairs per row
  std::vector<ZipSegment> segments_;     // [n_segments]
  std::vector<fp16_t> chan_;             // keys: [n_segments][head_dim]
  std::vector<uint8_t> prec_;            // [n_quant] kZipLow | kZipHigh
  std::vector<uint8_t> low_codes_;       // [n_low][words_ * 2]
  std::vector<KiviParams> low_params_;   // [n_low][groups_]
  std::vector<uint8_t> high_codes_;      // 4-bit: [n_high][words_ * 4]
  std::vector<KiviParams> high_params_;  // 4-bit: [n_high][groups_]
  std::vector<fp16_t> high_rows_;        // fp16: [n_high][head_dim]
  std::vector<fp16_t> pending_;          // [n_pending][head_dim]
  std::vector<uint8_t> pending_route_;  // [n_pending] kZipUnrouted | kZipRoutedLow | kZipRoutedHigh
};

void check_params(std::span<const KiviParams> params, const char* field) {
  for (const KiviParams& p : params) {
    const fp16_t pair[2] = {p.scale, p.zero};
    kvc::check_fp16_values(pair, field, false);
    if ((p.scale & 0x8000u) != 0) {
      throw_runtime("kvc", std::string(field) + " has a negative scale",
                    std::to_string(fp16_to_fp32(p.scale)), ">= 0");
    }
  }
}

void ZipCacheStore::load(std::span<const uint8_t> record) {
  kvc::ByteReader in(record);
  const auto h = in.pod<KvcZipStore>("zipcache store header");
  if (h.n_quant > UINT32_MAX || h.n_pending > UINT32_MAX || h.n_quant + h.n_pending > UINT32_MAX ||
      h.n_high > h.n_quant || h.n_segments > h.n_quant || (h.n_quant > 0) != (h.n_segments > 0)) {
    throw_runtime("kvc", "zipcache store counts",
                  "quant " + num(h.n_quant) + ", high " + num(h.n_high) + ", pending " +
                      num(h.n_pending) + ", segments " + num(h.n_segments),
                  "high <= quant, 1 <= segments <= quant when quant > 0, total < 2^32");
  }
  const size_t n_quant = h.n_quant, n_high_rows = h.n_high, n_low = n_quant - n_high_rows;
  const size_t d = head_dim_;
  segments_ = in.array<ZipSegment>(static_cast<size_t>(h.n_segments), "zipcache segments");
  size_t row0 = 0;
  for (size_t s = 0; s < segments_.size(); ++s) {
    if (segments_[s].row_end <= row0) {
      throw_runtime("kvc", "zipcache segment " + num(s) + " row_end", num(segments_[s].row_end),
                    "> " + num(row0));
    }
    row0 = segments_[s].row_end;
  }
  if (row0 != n_quant) {
    throw_runtime("kvc", "zipcache segments do not cover the quantized rows", num(row0),
                  num(n_quant));
  }
  if (keys_) {
    chan_ =
        in.array<fp16_t>(kvc::checked_mul(segments_.size(), d, "zipcache chan"), "zipcache chan");
    kvc::check_fp16_values(chan_, "zipcache channel scales", false);
    for (const fp16_t c : chan_) {
      if (!(fp16_to_fp32(c) > 0.0f)) {
        throw_runtime("kvc", "zipcache channel scale", std::to_string(fp16_to_fp32(c)), "> 0");
      }
    }
  }
  prec_ = in.array<uint8_t>(n_quant, "zipcache precision map");
  size_t highs = 0;
  for (const uint8_t p : prec_) {
    if (p > kZipHigh) throw_runtime("kvc", "zipcache precision entry", num(p), "0 or 1");
    highs += p;
  }
  if (highs != n_high_rows) {
    throw_runtime("kvc", "zipcache high rows", num(n_high_rows), "the map's count " + num(highs));
  }
  low_codes_ = in.array<uint8_t>(kvc::checked_mul(n_low, code_bytes(kLowBits), "zipcache codes"),
                                 "zipcache low codes");
  low_params_ = in.array<KiviParams>(kvc::checked_mul(n_low, groups_, "zipcache params"),
                                     "zipcache low params");
  check_params(low_params_, "zipcache low params");
  if (high_fp16()) {
    high_rows_ = in.array<fp16_t>(kvc::checked_mul(n_high_rows, d, "zipcache high rows"),
                                  "zipcache high rows");
    kvc::check_fp16_values(high_rows_, "zipcache high rows", false);
  } else {
    high_codes_ = in.array<uint8_t>(kvc::checked_mul(n_high_rows, code_bytes(4), "zipcache codes"),
                                    "zipcache high codes");
    high_params_ = in.array<KiviParams>(kvc::checked_mul(n_high_rows, groups_, "zipcache params"),
                                        "zipcache high params");
    check_params(high_params_, "zipcache high params");
  }
  pending_ = in.array<fp16_t>(kvc::checked_mul(h.n_pending, d, "zipcache pending"),
                              "zipcache pending rows");
  kvc::check_fp16_values(pending_, "zipcache pending rows", false);
  pending_route_ = in.array<uint8_t>(h.n_pending, "zipcache pending routes");
  for (const uint8_t r : pending_route_) {
    if (r > kZipRoutedHigh) throw_runtime("kvc", "zipcache pending route", num(r), "0, 1 or 2");
  }
  if (in.remaining() != 0) {
    throw_runtime("kvc", "zipcache store record longer than its arrays",
                  num(in.remaining()) + " extra bytes", "0");
  }
}

}  // namespace

std::unique_ptr<RowStore> make_zipcache_row_store(const CacheConfig& config, RowRole role,
                                                  size_t head_dim) {
  if (head_dim == 0) throw_invalid("zipcache", "head_dim must be positive", "0", ">= 1");
  if (config.kivi_group == 0) throw_invalid("zipcache", "kivi_group must be positive", "0", ">= 1");
  if (kivi_residual_of(config) == 0 || kivi_residual_of(config) > (size_t{1} << 24)) {
    throw_invalid("zipcache", "kivi_residual (rows per flushed segment)",
                  num(kivi_residual_of(config)), "1 .. 2^24");
  }
  if (kivi_fp16_sinks_of(config) != 0) {
    throw_invalid("zipcache", "kivi_fp16_sinks is a KIVI option zipcache does not have",
                  num(kivi_fp16_sinks_of(config)), "0");
  }
  if (!(zip_salient_of(config) >= 0.0 && zip_salient_of(config) <= 1.0)) {
    throw_invalid("zipcache", "zip_salient out of range", std::to_string(zip_salient_of(config)),
                  "[0, 1]");
  }
  if (config.zip_high_bits != 4 && config.zip_high_bits != 16) {
    throw_invalid("zipcache", "zip_high_bits unsupported", num(config.zip_high_bits),
                  "4 or 16 (fp16)");
  }
  return std::make_unique<ZipCacheStore>(role, head_dim, config.kivi_group,
                                         kivi_residual_of(config), zip_salient_of(config),
                                         config.zip_high_bits);
}

std::unique_ptr<RowStore> load_zipcache_row_store(const CacheConfig& config, RowRole role,
                                                  size_t head_dim,
                                                  std::span<const uint8_t> record) {
  std::unique_ptr<RowStore> store = make_zipcache_row_store(config, role, head_dim);
  static_cast<ZipCacheStore&>(*store).load(record);
  return store;
}

}  // namespace snapkv
