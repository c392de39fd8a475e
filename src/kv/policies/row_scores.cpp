// KeyDiff and Expected Attention row scores (kv/policies/row_scores.h): fast fp32 versions and
// their plain double-precision references.
#include "snapkv/kv/policies/row_scores.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "ops/cblas.h"
#include "snapkv/ops/dot.h"
#include "snapkv/ops/gemm.h"
#include "snapkv/ops/softmax.h"
#include "snapkv/util/error.h"

namespace snapkv {
namespace {

constexpr const char* kComponent = "row_scores";

void check_sizes(size_t n_rows, size_t head_dim, size_t n_group, size_t n_window) {
  if (n_rows == 0 || head_dim == 0 || n_group == 0 || n_window == 0) {
    throw_invalid(kComponent, "sizes must be positive",
                  "n_rows " + std::to_string(n_rows) + ", head_dim " + std::to_string(head_dim) +
                      ", n_group " + std::to_string(n_group) + ", n_window " +
                      std::to_string(n_window),
                  "all >= 1");
  }
  if (n_rows > static_cast<size_t>(std::numeric_limits<int>::max() / 2) ||
      head_dim > static_cast<size_t>(std::numeric_limits<int>::max() / 2)) {
    throw_invalid(kComponent, "too many rows for BLAS", std::to_string(n_rows), "< 2^30");
  }
}

// Mean [d] and covariance [d][d] (1/n) of the n rows of sample [n][d], in double.
void gaussian_stats(std::vector<double>& mean, std::vector<double>& cov, const float* sample,
                    size_t n, size_t d) {
  mean.assign(d, 0.0);
  cov.assign(d * d, 0.0);
  for (size_t r = 0; r < n; ++r) {
    for (size_t c = 0; c < d; ++c) mean[c] += sample[r * d + c];
  }
  for (double& m : mean) m /= static_cast<double>(n);
  std::vector<double> centred(d);
  for (size_t r = 0; r < n; ++r) {
    for (size_t c = 0; c < d; ++c) centred[c] = sample[r * d + c] - mean[c];
    for (size_t a = 0; a < d; ++a) {
      for (size_t b = 0; b < d; ++b) cov[a * d + b] += centred[a] * centred[b];
    }
  }
  for (double& x : cov) x /= static_cast<double>(n);
}

}  // namespace

void keydiff_scores(float* out, const float* keys, size_t n_rows, size_t head_dim) {
  check_sizes(n_rows, head_dim, 1, 1);
  std::vector<float> norms(n_rows);
  std::vector<float> anchor(head_dim, 0.0f);
  for (size_t i = 0; i < n_rows; ++i) {
    const float* key = keys + i * head_dim;
    norms[i] = std::sqrt(dot(key, key, head_dim));
    if (norms[i] > 0.0f) axpy(anchor.data(), 1.0f / norms[i], key, head_dim);
  }
  // The anchor's scale does not change a cosine: the sum of unit keys stands for their mean.
  const float anchor_norm = std::sqrt(dot(anchor.data(), anchor.data(), head_dim));
  for (size_t i = 0; i < n_rows; ++i) {
    const float denom = norms[i] * anchor_norm;
    out[i] = denom > 0.0f ? -dot(keys + i * head_dim, anchor.data(), head_dim) / denom : 0.0f;
  }
}

void keydiff_scores_ref(double* out, const float* keys, size_t n_rows, size_t head_dim) {
  check_sizes(n_rows, head_dim, 1, 1);
  std::vector<double> anchor(head_dim, 0.0), norms(n_rows);
  for (size_t i = 0; i < n_rows; ++i) {
    norms[i] = std::sqrt(dot_ref(keys + i * head_dim, keys + i * head_dim, head_dim));
    if (norms[i] == 0.0) continue;
    for (size_t c = 0; c < head_dim; ++c) anchor[c] += keys[i * head_dim + c] / norms[i];
  }
  double anchor_norm = 0.0;
  for (size_t c = 0; c < head_dim; ++c) {
    anchor[c] /= static_cast<double>(n_rows);
    anchor_norm += anchor[c] * anchor[c];
  }
  anchor_norm = std::sqrt(anchor_norm);
  for (size_t i = 0; i < n_rows; ++i) {
    double acc = 0.0;
    for (size_t c = 0; c < head_dim; ++c) acc += keys[i * head_dim + c] * anchor[c];
    const double denom = norms[i] * anchor_norm;
    out[i] = denom > 0.0 ? -acc / denom : 0.0;
  }
}

void expected_attention_scores(float* out, const float* keys, const float* values, size_t n_rows,
                               size_t head_dim, const float* queries, size_t n_group,
                               size_t n_window, size_t n_sink) {
  check_sizes(n_rows, head_dim, n_group, n_window);
  const size_t n_skip = std::min(n_sink, n_rows);
  const size_t n = n_rows - n_skip;  // scored rows
  if (n == 0) {
    std::fill(out, out + n_rows, 1.0f);
    return;
  }
  const size_t d = head_dim;
  const float* k = keys + n_skip * d;  // [n][d]
  const float inv_sqrt_d = 1.0f / std::sqrt(static_cast<float>(d));
  const float inv_2d = 1.0f / (2.0f * static_cast<float>(d));
  std::vector<double> mean, cov;
  std::vector<float> mu(d), sigma(d * d);  // [d], [d][d]
  std::vector<float> sigma_k(n * d);       // [n][d] = k Sigma (Sigma symmetric)
  std::vector<float> logits(n);
  std::vector<float> acc(n, 0.0f);
  for (size_t g = 0; g < n_group; ++g) {
    gaussian_stats(mean, cov, queries + g * n_window * d, n_window, d);
    for (size_t c = 0; c < d; ++c) mu[c] = static_cast<float>(mean[c]);
    for (size_t c = 0; c < d * d; ++c) sigma[c] = static_cast<float>(cov[c]);
    const int di = static_cast<int>(d);
    // OpenBLAS only where it may allocate its buffers (ops/gemm.h blas_allowed): under an
    // address-space limit it would spin, so the same product runs as plain dots.
    if (blas_allowed()) {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(n), di, di, 1.0f, k,
                  di, sigma.data(), di, 0.0f, sigma_k.data(), di);
    } else {
      for (size_t i = 0; i < n; ++i) {
        for (size_t c = 0; c < d; ++c) {
          float acc_c = 0.0f;
          for (size_t j = 0; j < d; ++j) acc_c += k[i * d + j] * sigma[j * d + c];
          sigma_k[i * d + c] = acc_c;
        }
      }
    }
    for (size_t i = 0; i < n; ++i) {
      const float* ki = k + i * d;
      logits[i] = dot(mu.data(), ki, d) * inv_sqrt_d + dot(ki, sigma_k.data() + i * d, d) * inv_2d;
    }
    softmax(logits.data(), n);
    axpy(acc.data(), 1.0f / static_cast<float>(n_group), logits.data(), n);
  }
  float best = 0.0f;
  for (size_t i = 0; i < n; ++i) {
    const float* vi = values + (n_skip + i) * d;
    out[n_skip + i] = acc[i] * std::sqrt(dot(vi, vi, d));
    best = std::max(best, out[n_skip + i]);
  }
  std::fill(out, out + n_skip, best);
}

void expected_attention_scores_ref(double* out, const float* keys, const float* values,
                                   size_t n_rows, size_t head_dim, const float* queries,
                                   size_t n_group, size_t n_window, size_t n_sink) {
  check_sizes(n_rows, head_dim, n_group, n_window);
  const size_t n_skip = std::min(n_sink, n_rows);
  const size_t d = head_dim;
  if (n_skip == n_rows) {
    std::fill(out, out + n_rows, 1.0);
    return;
  }
  std::fill(out, out + n_rows, 0.0);
  std::vector<double> mean, cov, z(n_rows);
  for (size_t g = 0; g < n_group; ++g) {
    gaussian_stats(mean, cov, queries + g * n_window * d, n_window, d);
    double z_max = -std::numeric_limits<double>::infinity();
    for (size_t i = n_skip; i < n_rows; ++i) {
      const float* ki = keys + i * d;
      double linear = 0.0, quad = 0.0;
      for (size_t a = 0; a < d; ++a) {
        linear += mean[a] * ki[a];
        for (size_t b = 0; b < d; ++b) quad += ki[a] * cov[a * d + b] * ki[b];
      }
      z[i] = linear / std::sqrt(static_cast<double>(d)) + quad / (2.0 * static_cast<double>(d));
      z_max = std::max(z_max, z[i]);
    }
    double sum = 0.0;
    for (size_t i = n_skip; i < n_rows; ++i) sum += std::exp(z[i] - z_max);
    for (size_t i = n_skip; i < n_rows; ++i) {
      out[i] += std::exp(z[i] - z_max) / sum / static_cast<double>(n_group);
    }
  }
  double best = 0.0;
  for (size_t i = n_skip; i < n_rows; ++i) {
    out[i] *= std::sqrt(dot_ref(values + i * d, values + i * d, d));
    best = std::max(best, out[i]);
  }
  std::fill(out, out + n_skip, best);
}

void expected_future_queries(float* out, const float* sample, const int64_t* positions, size_t n,
                             size_t head_dim, int64_t next_position, size_t n_future,
                             const RopeParams& rope) {
  check_sizes(n, head_dim, 1, n_future);
  if (rope.n_rot == 0 || rope.n_rot % 2 != 0 || rope.n_rot > head_dim) {
    throw_invalid(kComponent, "rope n_rot",
                  std::to_string(rope.n_rot) + " (head_dim " + std::to_string(head_dim) + ")",
                  "even, > 0 and <= head_dim");
  }
  if (!(std::isfinite(rope.freq_base) && rope.freq_base > 0.0 && std::isfinite(rope.freq_scale) &&
        rope.freq_scale > 0.0)) {
    throw_invalid(kComponent, "rope freq_base / freq_scale",
                  std::to_string(rope.freq_base) + " / " + std::to_string(rope.freq_scale),
                  "finite and > 0");
  }
  const size_t half = rope.n_rot / 2;
  // Per pair i: the angle per position and the mean rotation m_i = (1/n) sum_j e^{i f_i j} as a
  // complex number (cos part, sin part).
  std::vector<double> freq(half), mean_cos(half, 0.0), mean_sin(half, 0.0);
  for (size_t i = 0; i < half; ++i) {
    const double factor = rope.freq_factors != nullptr ? rope.freq_factors[i] : 1.0;
    freq[i] =
        std::pow(rope.freq_base, -2.0 * static_cast<double>(i) / static_cast<double>(rope.n_rot)) *
        rope.freq_scale / factor;
    for (size_t j = 0; j < n_future; ++j) {
      const double angle = freq[i] * static_cast<double>(j);
      mean_cos[i] += std::cos(angle);
      mean_sin[i] += std::sin(angle);
    }
    mean_cos[i] /= static_cast<double>(n_future);
    mean_sin[i] /= static_cast<double>(n_future);
  }
  for (size_t r = 0; r < n; ++r) {
    if (positions[r] < 0 || positions[r] >= next_position) {
      throw_invalid(kComponent, "sample position", std::to_string(positions[r]),
                    "0 <= position < next_position = " + std::to_string(next_position));
    }
    const double offset = static_cast<double>(next_position - positions[r]);
    const float* x = sample + r * head_dim;
    float* y = out + r * head_dim;
    std::copy_n(x, head_dim, y);
    for (size_t i = 0; i < half; ++i) {
      // z = m_i * e^{i f_i offset}: the rotation from the row's position to the mean of the next.
      const double c = std::cos(freq[i] * offset), s = std::sin(freq[i] * offset);
      const double zc = mean_cos[i] * c - mean_sin[i] * s;
      const double zs = mean_cos[i] * s + mean_sin[i] * c;
      const size_t a = rope.kind == RopeKind::norm ? 2 * i : i;
      const size_t b = rope.kind == RopeKind::norm ? 2 * i + 1 : i + half;
      const double x0 = x[a], x1 = x[b];
      y[a] = static_cast<float>(x0 * zc - x1 * zs);
      y[b] = static_cast<float>(x0 * zs + x1 * zc);
    }
  }
}

}  // namespace snapkv
