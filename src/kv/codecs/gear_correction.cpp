// GearCorrection (kv/codecs/gear_correction.h): builds, evicts, applies and persists GEAR's
// low-rank and sparse error terms (layout and formulas: include/snapkv/kv/codecs/gear.h).
#include "kv/codecs/gear_correction.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "kv/file/kvc_bytes.h"
#include "snapkv/kv/file/kvc_format.h"
#include "snapkv/util/error.h"
#include "snapkv/util/text.h"

namespace snapkv {

GearCorrection::GearCorrection(size_t head_dim, size_t rank, double sparse)
    : head_dim_(head_dim), rank_(rank), sparse_fraction_(sparse) {}

void GearCorrection::add_segment(const float* x, const float* dq, size_t n) {
  const size_t d = head_dim_, r = rank_;
  std::vector<float> err(n * d);  // [n][d]: E = X - D
  for (size_t i = 0; i < n * d; ++i) err[i] = x[i] - dq[i];

  // Low-rank term from fp16-rounded factors: b first, then a = E b^T with the rounded b.
  std::vector<float> low(n * d, 0.0f);  // [n][d]: L as decode computes it
  const size_t seg_basis = basis_.size(), row_coeffs = coeffs_.size();
  if (r > 0) {
    std::vector<float> a(n * r), b(r * d);
    low_rank_factor(a.data(), b.data(), err.data(), n, d, r);
    basis_.resize(seg_basis + r * d);
    fp32_to_fp16_n(basis_.data() + seg_basis, b.data(), r * d);
    fp16_to_fp32_n(b.data(), basis_.data() + seg_basis, r * d);
    for (size_t i = 0; i < n; ++i) {
      for (size_t k = 0; k < r; ++k) {
        double acc = 0.0;
        for (size_t c = 0; c < d; ++c) acc += static_cast<double>(err[i * d + c]) * b[k * d + c];
        a[i * r + k] = static_cast<float>(std::clamp(acc, -65504.0, 65504.0));
      }
    }
    coeffs_.resize(row_coeffs + n * r);
    fp32_to_fp16_n(coeffs_.data() + row_coeffs, a.data(), n * r);
    fp16_to_fp32_n(a.data(), coeffs_.data() + row_coeffs, n * r);
    for (size_t i = 0; i < n; ++i) {
      for (size_t c = 0; c < d; ++c) {
        float acc = 0.0f;
        for (size_t k = 0; k < r; ++k) acc += a[i * r + k] * b[k * d + c];
        low[i * d + c] = acc;
      }
    }
  }

  // Sparse term: the k entries with the largest |E - L|, ties to the lower index.
  const size_t total = n * d;
  const size_t k = std::min(
      total, static_cast<size_t>(std::llround(sparse_fraction_ * static_cast<double>(total))));
  std::vector<float> left(total);
  for (size_t i = 0; i < total; ++i) left[i] = std::fabs(err[i] - low[i]);
  std::vector<uint32_t> order(total);
  std::iota(order.begin(), order.end(), 0u);
  const auto larger = [&](uint32_t p, uint32_t q) {
    return left[p] != left[q] ? left[p] > left[q] : p < q;
  };
  if (k < total)
    std::nth_element(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k), order.end(),
                     larger);
  order.resize(k);
  std::sort(order.begin(), order.end());
  const size_t row0 = sparse_count_.size();
  sparse_count_.resize(row0 + n, 0);
  for (const uint32_t idx : order) {
    const size_t i = idx / d, c = idx % d;
    // s = X - D - L, clamped to fp16's range (X, D are fp16-ranged, so this only guards).
    const float s = std::clamp(x[idx] - dq[idx] - low[idx], -65504.0f, 65504.0f);
    sparse_.push_back({static_cast<uint16_t>(c), fp32_to_fp16(s)});
    ++sparse_count_[row0 + i];
  }
  segments_.push_back({static_cast<uint32_t>(row0 + n)});
}

void GearCorrection::retain(std::span<const uint32_t> keep, size_t base) {
  std::vector<GearSegment> segments;
  std::vector<fp16_t> basis, coeffs;
  std::vector<uint16_t> counts;
  std::vector<GearSparse> sparse;
  const size_t r = rank_;
  size_t row0 = 0, sp = 0, kept = 0;
  auto it = keep.begin();
  for (size_t s = 0; s < segments_.size(); ++s) {
    const size_t end = segments_[s].row_end;
    size_t n_kept = 0;
    for (size_t row = row0; row < end; ++row) {
      const size_t count = sparse_count_[row];
      if (it != keep.end() && *it - base == row) {
        coeffs.insert(coeffs.end(), coeffs_.begin() + static_cast<std::ptrdiff_t>(row * r),
                      coeffs_.begin() + static_cast<std::ptrdiff_t>((row + 1) * r));
        counts.push_back(static_cast<uint16_t>(count));
        sparse.insert(sparse.end(), sparse_.begin() + static_cast<std::ptrdiff_t>(sp),
                      sparse_.begin() + static_cast<std::ptrdiff_t>(sp + count));
        ++n_kept;
        ++it;
      }
      sp += count;
    }
    if (n_kept > 0) {
      kept += n_kept;
      segments.push_back({static_cast<uint32_t>(kept)});
      basis.insert(basis.end(), basis_.begin() + static_cast<std::ptrdiff_t>(s * r * head_dim_),
                   basis_.begin() + static_cast<std::ptrdiff_t>((s + 1) * r * head_dim_));
    }
    row0 = end;
  }
  SNAPKV_CHECK(it == keep.end());
  segments_ = std::move(segments);
  basis_ = std::move(basis);
  coeffs_ = std::move(coeffs);
  sparse_count_ = std::move(counts);
  sparse_ = std::move(sparse);
}

size_t GearCorrection::sparse_begin(size_t row) const {
  size_t sp = 0;
  for (size_t i = 0; i < row; ++i) sp += sparse_count_[i];
  return sp;
}

void GearCorrection::add_rows(float* out, size_t begin, size_t end) const {
  const size_t d = head_dim_, r = rank_;
  std::vector<float> b(r * d);
  size_t sp = sparse_begin(begin), row0 = 0;
  for (size_t s = 0; s < segments_.size() && row0 < end; ++s) {
    const size_t seg_end = segments_[s].row_end;
    if (seg_end > begin) {
      fp16_to_fp32_n(b.data(), basis_.data() + s * r * d, r * d);
      for (size_t row = std::max(row0, begin); row < std::min<size_t>(seg_end, end); ++row) {
        float* dst = out + (row - begin) * d;
        float a[64];
        fp16_to_fp32_n(a, coeffs_.data() + row * r, r);
        for (size_t c = 0; c < d; ++c) {
          float acc = 0.0f;
          for (size_t k = 0; k < r; ++k) acc += a[k] * b[k * d + c];
          dst[c] += acc;
        }
        for (size_t e = 0; e < sparse_count_[row]; ++e, ++sp) {
          dst[sparse_[sp].channel] += fp16_to_fp32(sparse_[sp].value);
        }
      }
    }
    row0 = seg_end;
  }
}

void GearCorrection::add_dots(float* out, size_t stride, const float* q, size_t n_q) const {
  const size_t d = head_dim_, r = rank_;
  std::vector<float> b(r * d), qb(n_q * r);  // qb: [n_q][r] = B q
  size_t row0 = 0, sp = 0;
  for (size_t s = 0; s < segments_.size(); ++s) {
    const size_t seg_end = segments_[s].row_end;
    fp16_to_fp32_n(b.data(), basis_.data() + s * r * d, r * d);
    for (size_t j = 0; j < n_q; ++j) {
      for (size_t k = 0; k < r; ++k) {
        float acc = 0.0f;
        for (size_t c = 0; c < d; ++c) acc += q[j * d + c] * b[k * d + c];
        qb[j * r + k] = acc;
      }
    }
    for (size_t row = row0; row < seg_end; ++row) {
      float a[64];
      fp16_to_fp32_n(a, coeffs_.data() + row * r, r);
      const size_t count = sparse_count_[row];
      for (size_t j = 0; j < n_q; ++j) {
        float acc = 0.0f;
        for (size_t k = 0; k < r; ++k) acc += qb[j * r + k] * a[k];
        for (size_t e = 0; e < count; ++e) {
          acc += q[j * d + sparse_[sp + e].channel] * fp16_to_fp32(sparse_[sp + e].value);
        }
        out[j * stride + row] += acc;
      }
      sp += count;
    }
    row0 = seg_end;
  }
}

void GearCorrection::add_accumulate(float* out, const float* w, size_t stride, size_t n_q) const {
  const size_t d = head_dim_, r = rank_;
  std::vector<float> b(r * d), wa(n_q * r);  // wa: [n_q][r] = sum_i w_i a_i over the segment
  size_t row0 = 0, sp = 0;
  for (size_t s = 0; s < segments_.size(); ++s) {
    const size_t seg_end = segments_[s].row_end;
    std::fill(wa.begin(), wa.end(), 0.0f);
    for (size_t row = row0; row < seg_end; ++row) {
      float a[64];
      fp16_to_fp32_n(a, coeffs_.data() + row * r, r);
      const size_t count = sparse_count_[row];
      for (size_t j = 0; j < n_q; ++j) {
        const float wj = w[j * stride + row];
        for (size_t k = 0; k < r; ++k) wa[j * r + k] += wj * a[k];
        for (size_t e = 0; e < count; ++e) {
          out[j * d + sparse_[sp + e].channel] += wj * fp16_to_fp32(sparse_[sp + e].value);
        }
      }
      sp += count;
    }
    fp16_to_fp32_n(b.data(), basis_.data() + s * r * d, r * d);
    for (size_t j = 0; j < n_q; ++j) {
      for (size_t k = 0; k < r; ++k) {
        const float t = wa[j * r + k];
        for (size_t c = 0; c < d; ++c) out[j * d + c] += t * b[k * d + c];
      }
    }
    row0 = seg_end;
  }
}

size_t GearCorrection::bytes() const {
  return segments_.size() * sizeof(GearSegment) + basis_.size() * sizeof(fp16_t) +
         coeffs_.size() * sizeof(fp16_t) + sparse_count_.size() * sizeof(uint16_t) +
         sparse_.size() * sizeof(GearSparse);
}

void GearCorrection::save(std::vector<uint8_t>& out) const {
  kvc::append_pod(out, KvcGearCorrection{rank_, segments_.size(), sparse_.size()});
  kvc::append_array(out, segments_.data(), segments_.size());
  kvc::append_array(out, basis_.data(), basis_.size());
  kvc::append_array(out, coeffs_.data(), coeffs_.size());
  kvc::append_array(out, sparse_count_.data(), sparse_count_.size());
  kvc::append_array(out, sparse_.data(), sparse_.size());
}

void GearCorrection::load(kvc::ByteReader& in, size_t n_rows) {
  const auto h = in.pod<KvcGearCorrection>("gear correction header");
  if (h.rank != rank_) throw_runtime("kvc", "gear rank", num(h.rank), "gear_rank = " + num(rank_));
  if (h.n_segments > n_rows || (n_rows > 0 && h.n_segments == 0)) {
    throw_runtime("kvc", "gear segment count", num(h.n_segments),
                  "between 1 and the " + num(n_rows) + " quantized rows");
  }
  segments_ = in.array<GearSegment>(static_cast<size_t>(h.n_segments), "gear segments");
  size_t row0 = 0;
  for (size_t s = 0; s < segments_.size(); ++s) {
    if (segments_[s].row_end <= row0) {
      throw_runtime("kvc", "gear segment " + num(s) + " row_end", num(segments_[s].row_end),
                    "> " + num(row0));
    }
    row0 = segments_[s].row_end;
  }
  if (row0 != n_rows) {
    throw_runtime("kvc", "gear segments do not cover the quantized rows", num(row0), num(n_rows));
  }
  basis_ = in.array<fp16_t>(kvc::checked_mul(segments_.size(), rank_ * head_dim_, "gear basis"),
                            "gear basis");
  kvc::check_fp16_values(basis_, "gear basis", false);
  coeffs_ = in.array<fp16_t>(kvc::checked_mul(n_rows, rank_, "gear coeffs"), "gear coeffs");
  kvc::check_fp16_values(coeffs_, "gear coeffs", false);
  sparse_count_ = in.array<uint16_t>(n_rows, "gear sparse counts");
  size_t total = 0;
  for (const uint16_t c : sparse_count_) {
    if (c > head_dim_)
      throw_runtime("kvc", "gear sparse count of a row", num(c), "<= head_dim = " + num(head_dim_));
    total += c;
  }
  if (total != h.n_sparse) {
    throw_runtime("kvc", "gear sparse entries", num(h.n_sparse),
                  "the rows' counts summed = " + num(total));
  }
  sparse_ = in.array<GearSparse>(total, "gear sparse entries");
  size_t sp = 0;
  for (size_t row = 0; row < n_rows; ++row) {
    for (size_t e = 0; e < sparse_count_[row]; ++e, ++sp) {
      const GearSparse& s = sparse_[sp];
      if (s.channel >= head_dim_ || (e > 0 && s.channel <= sparse_[sp - 1].channel)) {
        throw_runtime("kvc", "gear sparse channel of row " + num(row), num(s.channel),
                      "< head_dim and increasing within the row");
      }
      const fp16_t v[1] = {s.value};
      kvc::check_fp16_values(v, "gear sparse value", false);
    }
  }
}

}  // namespace snapkv
