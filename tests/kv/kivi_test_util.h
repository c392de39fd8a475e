// Shared helpers of the codec tests: realistic KV data, a store's decoded rows, error messages and
// small reference computations.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <ostream>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/kivi/kivi_kernels.h"
#include "snapkv/kv/codecs/kivi.h"
#include "snapkv/kv/core/config.h"
#include "snapkv/kv/core/row_store.h"
#include "snapkv/util/fp16.h"

namespace snapkv {

// gtest prints a codec parameter by its name.
inline void PrintTo(CodecKind codec, std::ostream* os) {
  *os << to_string(codec);
}

}  // namespace snapkv

namespace snapkv::kivi_test {

// Rows [n][head_dim] shaped like real keys/values: N(0, 1) per element; with outliers, a few
// channels (every 16th, offset 3) carry a large offset and spread (the key outlier channels KIVI
// quantizes per channel for), and every 50th row is scaled by 4 (token outliers).
inline std::vector<float> realistic_rows(size_t n, size_t head_dim, uint32_t seed, bool outliers) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(n * head_dim);
  for (size_t r = 0; r < n; ++r) {
    const float row_scale = outliers && r % 50 == 7 ? 4.0f : 1.0f;
    for (size_t c = 0; c < head_dim; ++c) {
      float v = normal(rng) * row_scale;
      if (outliers && c % 16 == 3) v = 12.0f + 5.0f * v;
      x[r * head_dim + c] = v;
    }
  }
  return x;
}

// Every row of a store, decoded: [rows][head_dim].
inline std::vector<float> read_all(const RowStore& s) {
  std::vector<float> out(s.rows() * s.head_dim());
  s.read(out.data(), 0, s.rows());
  return out;
}

// The message of the std::invalid_argument fn() throws, "" when it throws none.
inline std::string error_of(auto&& fn) {
  try {
    fn();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

inline float round_fp16(float x) {
  return fp16_to_fp32(fp32_to_fp16(x));
}

// |x - fp16(x)|: the residual's own rounding, part of every quantized element's error budget.
inline float fp16_rounding(float x) {
  return std::fabs(x - round_fp16(x));
}

// Upper bound of the stored fp16 scale of a group with range hi - lo (lo, hi fp16 values):
// (hi - lo) / L rounded up to fp16 (relative step 2^-10, or the smallest subnormal 2^-24), and
// possibly one more step up when the fp32 check of the top grid point rounded against it.
inline double scale_bound(double range, int bits) {
  const double levels = (1 << bits) - 1;
  return range / levels * (1.0 + 2.0 / 1024.0) + 2.0 * std::ldexp(1.0, -24);
}

// The magnitude behind the fp32 tolerance of weighted sums of value rows, for one query's
// weights w [n_rows] and the channels of group g: base + sum_r |w_r| (scale(r, g) * code_factor
// + 2 |zero(r, g)|), params [n_rows][n_groups]. Every product and sum of the float forms rounds
// once, so two of them agree within 4 (n_rows + 4) u times it; code_factor is the largest code
// (times a margin where a form rounds the scale or weight once more).
inline double value_sum_magnitude(const float* w, const KiviParams* params, size_t n_rows,
                                  size_t n_groups, size_t g, double code_factor, double base) {
  double mag = base;
  for (size_t r = 0; r < n_rows; ++r) {
    const KiviParams& p = params[r * n_groups + g];
    mag += std::fabs(w[r]) *
           (fp16_to_fp32(p.scale) * code_factor + 2 * std::fabs(fp16_to_fp32(p.zero)));
  }
  return mag;
}

// Where two float forms of weighted value sums (out [n_q][head_dim], weights w [n_q][n_rows],
// params [n_rows][ceil(head_dim / group)]) disagree: a NaN on one side only, or a gap above
// 4 (n_rows + 4) u * value_sum_magnitude. "" when they agree everywhere, else the first place.
inline std::string value_sums_disagree(const std::vector<float>& a, const std::vector<float>& b,
                                       const std::vector<float>& w,
                                       const std::vector<KiviParams>& params, size_t n_rows,
                                       size_t n_q, size_t head_dim, size_t group,
                                       double code_factor, double base) {
  const size_t n_groups = (head_dim + group - 1) / group;
  for (size_t j = 0; j < n_q; ++j) {
    for (size_t c = 0; c < head_dim; ++c) {
      const float x = a[j * head_dim + c], y = b[j * head_dim + c];
      const std::string at = "query " + std::to_string(j) + " channel " + std::to_string(c) + ": " +
                             std::to_string(x) + " vs " + std::to_string(y);
      if (std::isnan(x) != std::isnan(y)) return at + " (NaN on one side)";
      if (std::isnan(x)) continue;
      const double tol = 4.0 * double(n_rows + 4) / 16777216.0 *
                         value_sum_magnitude(w.data() + j * n_rows, params.data(), n_rows, n_groups,
                                             c / group, code_factor, base);
      if (!(std::fabs(double(x) - double(y)) <= tol)) {
        return at + " (tolerance " + std::to_string(tol) + ")";
      }
    }
  }
  return "";
}

// Double-precision attention of one query over rows: softmax(q.k / sqrt(d)) . v
//   out [head_dim], q [head_dim], keys, values [n][head_dim]
inline void attention_ref(double* out, const float* q, const float* keys, const float* values,
                          size_t n, size_t head_dim) {
  std::vector<double> logits(n);
  double mx = -INFINITY;
  for (size_t i = 0; i < n; ++i) {
    double s = 0;
    for (size_t c = 0; c < head_dim; ++c) s += double(q[c]) * keys[i * head_dim + c];
    logits[i] = s / std::sqrt(double(head_dim));
    mx = std::max(mx, logits[i]);
  }
  double total = 0;
  for (double& l : logits) total += (l = std::exp(l - mx));
  std::fill(out, out + head_dim, 0.0);
  for (size_t i = 0; i < n; ++i) {
    for (size_t c = 0; c < head_dim; ++c) out[c] += logits[i] / total * values[i * head_dim + c];
  }
}

// True when the active level's key dots of `codec` at head_dim hd run the one-part integer form
// (2-bit keys at the AVX-512 VNNI level, kernels/kivi/kivi_kernels.h): their logits then differ
// from dots with the decoded rows by the int8 rounding of q o s, not by fp32 rounding alone. That
// form is held to its scalar twin and to its derived bound against the float form in
// kivi_attention_test.cpp (IntegerKey*), and its attention to fp16's in kivi_cache_test.cpp; the
// tests that compare fused dots with decoded rows at fp32 precision check such codecs at the
// other ISA levels (ctest -L isa), where their keys run the float form.
// gear: the width of its KIVI part (CacheConfig::gear_bits).
inline bool one_part_key_dots(CodecKind codec, size_t head_dim,
                              size_t gear_bits = CacheConfig{}.gear_bits) {
  const int bits =
      codec == CodecKind::gear ? static_cast<int>(gear_bits) : codec_kivi_bits(codec, true);
  return bits == 2 && kivi_key_dot_uses_q8(head_dim, 2);
}

}  // namespace snapkv::kivi_test
