// Helpers shared by the kv tests: deterministic random tensors, Tensor3 views, and a reference
// attention that decodes every retained row to fp32 and works in double.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "snapkv/kv/core/layer_cache.h"
#include "snapkv/util/fp16.h"

namespace snapkv::test {

inline std::vector<float> random_normal(size_t n, uint64_t seed, float scale = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

inline Tensor3 view(const std::vector<float>& v, size_t d0, size_t d1, size_t d2) {
  return Tensor3{v.data(), d0, d1, d2};
}

inline float round_fp16(float x) {
  return fp16_to_fp32(fp32_to_fp16(x));
}

// Rows [begin, end) of every head of a [heads][S][D] tensor: [heads][end - begin][D].
inline std::vector<float> slice_tokens(const std::vector<float>& t, size_t heads, size_t s,
                                       size_t d, size_t begin, size_t end) {
  std::vector<float> out;
  out.reserve(heads * (end - begin) * d);
  for (size_t h = 0; h < heads; ++h) {
    out.insert(out.end(), t.begin() + static_cast<std::ptrdiff_t>((h * s + begin) * d),
               t.begin() + static_cast<std::ptrdiff_t>((h * s + end) * d));
  }
  return out;
}

// Reference of LayerCache::attend: decode the retained rows, append the chunk's rows (fp32),
// causal inside the chunk, everything in double. Also returns, per output row, the error bound
// derived in attend_test.cpp.  out, bound: [n_heads][S][head_dim] / [n_heads][S]
inline void reference_attention(std::vector<double>& out, std::vector<double>& bound,
                                const LayerCache& cache, const std::vector<float>& q,
                                const std::vector<float>& k, const std::vector<float>& v,
                                size_t n_new) {
  const CacheDims dims = cache.dims();
  const size_t d = dims.head_dim, group = dims.n_heads / dims.n_kv_heads;
  const double u = 1.0 / 16777216.0;
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  out.assign(dims.n_heads * n_new * d, 0.0);
  bound.assign(dims.n_heads * n_new, 0.0);
  for (size_t head = 0; head < dims.n_heads; ++head) {
    const size_t kv = head / group;
    const size_t n_kept = cache.size(kv);  // heads may hold different counts (AdaKV)
    std::vector<float> keys(n_kept * d), values(n_kept * d);
    cache.read_keys(kv, keys.data());
    cache.read_values(kv, values.data());
    for (size_t s = 0; s < n_new; ++s) {
      keys.insert(keys.end(), k.begin() + static_cast<std::ptrdiff_t>((kv * n_new + s) * d),
                  k.begin() + static_cast<std::ptrdiff_t>((kv * n_new + s + 1) * d));
      values.insert(values.end(), v.begin() + static_cast<std::ptrdiff_t>((kv * n_new + s) * d),
                    v.begin() + static_cast<std::ptrdiff_t>((kv * n_new + s + 1) * d));
    }
    for (size_t s = 0; s < n_new; ++s) {
      const float* qs = q.data() + (head * n_new + s) * d;
      const size_t visible = n_kept + s + 1;
      std::vector<double> logit(visible), abs_logit(visible);
      double max_logit = -1e300;
      for (size_t j = 0; j < visible; ++j) {
        double acc = 0.0, abs_acc = 0.0;
        for (size_t c = 0; c < d; ++c) {
          acc += static_cast<double>(qs[c]) * keys[j * d + c];
          abs_acc += std::fabs(static_cast<double>(qs[c]) * keys[j * d + c]);
        }
        logit[j] = acc * scale;
        abs_logit[j] = abs_acc * scale;
        max_logit = std::max(max_logit, logit[j]);
      }
      double sum = 0.0, spread = 0.0, logit_err = 0.0, max_v = 0.0;
      for (size_t j = 0; j < visible; ++j) {
        spread = std::max(spread, max_logit - logit[j]);
        logit_err = std::max(logit_err, static_cast<double>(d + 2) * u * abs_logit[j]);
        sum += std::exp(logit[j] - max_logit);
      }
      for (size_t j = 0; j < visible; ++j) {
        const double p = std::exp(logit[j] - max_logit) / sum;
        for (size_t c = 0; c < d; ++c) {
          out[(head * n_new + s) * d + c] += p * values[j * d + c];
          max_v = std::max(max_v, std::fabs(static_cast<double>(values[j * d + c])));
        }
      }
      // Logit error E = (d + 2) u |q||k| scale moves each probability by a relative 2E; the
      // softmax itself adds (2 * spread + n + 24) u (ops/softmax_test.cpp); the weighted sum of n
      // rows adds (n + 2) u. All relative to sum_j p_j |v_j| <= max |v|.
      const double n = static_cast<double>(visible);
      bound[head * n_new + s] = (2.0 * logit_err + (2.0 * spread + 2.0 * n + 26.0) * u) * max_v;
    }
  }
}

// LayerCache::attend of random q, k, v (n_new tokens) against reference_attention, within its
// derived bound.
inline void expect_attend_matches_reference(const LayerCache& cache, size_t n_new, uint64_t seed,
                                            float scale = 1.0f) {
  const CacheDims dims = cache.dims();
  const size_t d = dims.head_dim;
  const auto q = random_normal(dims.n_heads * n_new * d, seed, scale);
  const auto k = random_normal(dims.n_kv_heads * n_new * d, seed + 1, scale);
  const auto v = random_normal(dims.n_kv_heads * n_new * d, seed + 2);
  std::vector<float> out(dims.n_heads * n_new * d, -1.0f);
  cache.attend(out.data(), view(q, dims.n_heads, n_new, d), view(k, dims.n_kv_heads, n_new, d),
               view(v, dims.n_kv_heads, n_new, d));
  std::vector<double> ref, bound;
  reference_attention(ref, bound, cache, q, k, v, n_new);
  for (size_t row = 0; row < dims.n_heads * n_new; ++row) {
    for (size_t c = 0; c < d; ++c) {
      const double err = std::fabs(out[row * d + c] - ref[row * d + c]);
      ASSERT_LE(err, bound[row]) << "row " << row << " c " << c << " n_new " << n_new;
    }
  }
}

}  // namespace snapkv::test
