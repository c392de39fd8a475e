// KVzap's learned scorer (model/kvzap.h): features, the forward and its double reference, the
// sidecar GGUF and the ridge fit.
#include "snapkv/model/kvzap.h"

#include <algorithm>
#include <cmath>

#include "model/sidecar.h"
#include "snapkv/util/error.h"
#include "snapkv/util/parallel.h"
#include "snapkv/util/text.h"

namespace snapkv {
namespace {

constexpr const char* kComponent = "kv";
constexpr const char* kWeightTensor = "kvzap.weight";

size_t n_weights(const KvzapDims& d) {
  return d.n_layers * d.n_kv_heads * kvzap_n_features(d.head_dim);
}

void check_dims(const KvzapDims& d) {
  if (d.n_layers == 0 || d.n_kv_heads == 0 || d.head_dim == 0 || d.head_dim > 4096) {
    throw_invalid(kComponent, "kvzap dimensions",
                  num(d.n_layers) + " layers, " + num(d.n_kv_heads) + " KV heads, head_dim " +
                      num(d.head_dim),
                  "each >= 1, head_dim <= 4096");
  }
}

std::vector<sidecar::Dim> sidecar_dims(const KvzapDims& d) {
  return {{"n_layers", d.n_layers, "", " layers"},
          {"n_kv_heads", d.n_kv_heads, "", " KV heads"},
          {"head_dim", d.head_dim, "head_dim ", ""}};
}

std::string dims_text(const KvzapDims& d) {
  return sidecar::dims_text(sidecar_dims(d));
}

// The second element of every RoPE pair (NORM: 2i + 1, NEOX: i + n_rot / 2), negated in place on
// rows [n_rows][head_dim].
void negate_second(float* x, size_t n_rows, size_t head_dim, const RopeParams& rope) {
  const size_t half = rope.n_rot / 2;
  for (size_t r = 0; r < n_rows; ++r) {
    float* v = x + r * head_dim;
    for (size_t i = 0; i < half; ++i) {
      const size_t b = rope.kind == RopeKind::norm ? 2 * i + 1 : i + half;
      v[b] = -v[b];
    }
  }
}

}  // namespace

const sidecar::Kind sidecar::kKvzap = {"kvzap",
                                       ".kvzap.gguf",
                                       "kvzap scorer",
                                       "kvzap sidecar",
                                       "was trained for another model",
                                       "retrain with snapkv train-scorer",
                                       "SNAPKV_KVZAP",
                                       "no scorer weights",
                                       1};

std::string kvzap_sidecar_path(const std::string& model_path) {
  return sidecar::path_for(model_path, sidecar::kKvzap.suffix);
}

void kvzap_unrotate(float* keys, const int64_t* positions, size_t n_rows, size_t head_dim,
                    const RopeParams& rope) {
  if (n_rows == 0) return;
  // R(-theta) = C R(theta) C with C negating a pair's second element.
  negate_second(keys, n_rows, head_dim, rope);
  const RopeTable table(positions, n_rows, rope);
  table.apply(keys, 1, head_dim);
  negate_second(keys, n_rows, head_dim, rope);
}

void kvzap_features(float* out, const float* key, int64_t position, size_t n_positions,
                    size_t head_dim) {
  for (size_t d = 0; d < head_dim; ++d) {
    out[d] = key[d];
    out[head_dim + d] = key[d] * key[d];
  }
  out[2 * head_dim] =
      static_cast<float>(static_cast<double>(position) / static_cast<double>(n_positions));
  out[2 * head_dim + 1] = 1.0f;
}

// ---- KvzapScorer ------------------------------------------------------------------------------

KvzapScorer::KvzapScorer(KvzapDims dims, const KvzapFingerprint& fingerprint,
                         std::vector<float> weights)
    : dims_(dims), fingerprint_(fingerprint), weights_(std::move(weights)) {
  check_dims(dims_);
  if (weights_.size() != n_weights(dims_)) {
    throw_invalid(kComponent, "kvzap weight count", num(weights_.size()),
                  num(n_weights(dims_)) + " for " + dims_text(dims_));
  }
  for (size_t i = 0; i < weights_.size(); ++i) {
    if (!std::isfinite(weights_[i])) {
      throw_invalid(kComponent, "kvzap weight " + num(i), std::to_string(weights_[i]),
                    "a finite number");
    }
  }
}

KvzapScorer KvzapScorer::load(const std::string& path, const KvzapFingerprint& fingerprint,
                              KvzapDims dims) {
  const gguf::File file = gguf::File::open(path);
  return from_file(file, path, fingerprint, dims);
}

KvzapScorer KvzapScorer::from_file(const gguf::File& file, const std::string& path,
                                   const KvzapFingerprint& fingerprint, KvzapDims dims) {
  const sidecar::Reader in(file, path, sidecar::kKvzap, fingerprint, sidecar_dims(dims));
  const int64_t f = static_cast<int64_t>(kvzap_n_features(dims.head_dim));
  return KvzapScorer(dims, fingerprint,
                     in.f32(kWeightTensor, {f, static_cast<int64_t>(dims.n_kv_heads),
                                            static_cast<int64_t>(dims.n_layers)}));
}

std::vector<uint8_t> KvzapScorer::to_bytes() const {
  gguf::Writer w =
      sidecar::header(sidecar::kKvzap, "kvzap scorer", fingerprint_, sidecar_dims(dims_));
  w.set_string("kvzap.features", "key unrotated, key squared, position / prompt length, 1");
  w.set_string("kvzap.target", "log of KVzip's reconstruction score");
  w.add_tensor_f32(kWeightTensor, gguf::TensorType::f32,
                   {static_cast<int64_t>(kvzap_n_features(dims_.head_dim)),
                    static_cast<int64_t>(dims_.n_kv_heads), static_cast<int64_t>(dims_.n_layers)},
                   weights_);
  return w.to_bytes();
}

float KvzapScorer::predict(size_t layer, size_t kv_head, const float* features) const {
  SNAPKV_CHECK(layer < dims_.n_layers && kv_head < dims_.n_kv_heads);
  const size_t f = kvzap_n_features(dims_.head_dim);
  const float* w = weights_.data() + (layer * dims_.n_kv_heads + kv_head) * f;
  float s = 0.0f;
  for (size_t i = 0; i < f; ++i) s += w[i] * features[i];
  return s;
}

std::vector<float> KvzapScorer::score_layer(const LayerCache& cache, size_t layer,
                                            const RopeParams& rope) const {
  if (layer >= dims_.n_layers) {
    throw_invalid(kComponent, "kvzap layer", num(layer), "< " + num(dims_.n_layers));
  }
  const size_t n_kv = dims_.n_kv_heads, hd = dims_.head_dim, f = kvzap_n_features(hd);
  const size_t n_rows = cache.size();
  const size_t n_positions = std::max<size_t>(cache.offset(), 1);
  std::vector<float> out(n_kv * n_rows);
  parallel_for(n_kv, [&](size_t h) {
    const std::span<const int64_t> pos = cache.positions(h);
    SNAPKV_CHECK(pos.size() == n_rows);
    std::vector<float> keys(n_rows * hd);  // [n_rows][hd]
    cache.read_keys(h, keys.data());
    kvzap_unrotate(keys.data(), pos.data(), n_rows, hd, rope);
    std::vector<float> feat(f);
    for (size_t r = 0; r < n_rows; ++r) {
      kvzap_features(feat.data(), keys.data() + r * hd, pos[r], n_positions, hd);
      const float s =
          std::clamp(predict(layer, h, feat.data()), static_cast<float>(kKvzapLogFloor), 0.0f);
      out[h * n_rows + r] = std::exp(s);
    }
  });
  return out;
}

std::vector<std::vector<float>> KvzapScorer::score_caches(const std::vector<LayerCache>& caches,
                                                          const RopeParams& rope) const {
  if (caches.size() != dims_.n_layers) {
    throw_invalid(kComponent, "kvzap scorer and session layers differ", num(caches.size()),
                  num(dims_.n_layers));
  }
  std::vector<std::vector<float>> out(caches.size());
  for (size_t l = 0; l < caches.size(); ++l) out[l] = score_layer(caches[l], l, rope);
  return out;
}

double kvzap_score_ref(const KvzapScorer& scorer, size_t layer, size_t kv_head,
                       const float* rotated_key, int64_t position, size_t n_positions,
                       const RopeParams& rope) {
  const KvzapDims& d = scorer.dims();
  const size_t hd = d.head_dim, f = kvzap_n_features(hd), half = rope.n_rot / 2;
  std::vector<double> key(rotated_key, rotated_key + hd);
  for (size_t i = 0; i < half; ++i) {
    const double factor = rope.freq_factors != nullptr ? rope.freq_factors[i] : 1.0;
    const double theta =
        static_cast<double>(position) * rope.freq_scale *
        std::pow(rope.freq_base, -2.0 * static_cast<double>(i) / static_cast<double>(rope.n_rot)) /
        factor;
    const size_t a = rope.kind == RopeKind::norm ? 2 * i : i;
    const size_t b = rope.kind == RopeKind::norm ? 2 * i + 1 : i + half;
    const double x0 = key[a], x1 = key[b];
    key[a] = x0 * std::cos(theta) + x1 * std::sin(theta);
    key[b] = -x0 * std::sin(theta) + x1 * std::cos(theta);
  }
  const float* w = scorer.weights().data() + (layer * d.n_kv_heads + kv_head) * f;
  double s = 0.0;
  for (size_t i = 0; i < hd; ++i) {
    s += static_cast<double>(w[i]) * key[i] + static_cast<double>(w[hd + i]) * key[i] * key[i];
  }
  s += static_cast<double>(w[2 * hd]) * static_cast<double>(position) /
       static_cast<double>(n_positions);
  s += static_cast<double>(w[2 * hd + 1]);
  return std::exp(std::clamp(s, kKvzapLogFloor, 0.0));
}

// ---- KvzapFit ---------------------------------------------------------------------------------

KvzapFit::KvzapFit(KvzapDims dims) : dims_(dims), n_features_(kvzap_n_features(dims.head_dim)) {
  check_dims(dims_);
  const size_t n = dims_.n_layers * dims_.n_kv_heads;
  xtx_.assign(n * n_features_ * n_features_, 0.0);
  xty_.assign(n * n_features_, 0.0);
  rows_.assign(n, 0);
}

void KvzapFit::add(size_t layer, size_t kv_head, const float* features, double target) {
  SNAPKV_CHECK(layer < dims_.n_layers && kv_head < dims_.n_kv_heads);
  const size_t f = n_features_, i = layer * dims_.n_kv_heads + kv_head;
  double* a = xtx_.data() + i * f * f;
  double* b = xty_.data() + i * f;
  for (size_t r = 0; r < f; ++r) {
    const double xr = features[r];
    b[r] += xr * target;
    double* row = a + r * f;
    for (size_t c = 0; c <= r; ++c) row[c] += xr * static_cast<double>(features[c]);
  }
  ++rows_[i];
}

size_t KvzapFit::rows(size_t layer, size_t kv_head) const {
  SNAPKV_CHECK(layer < dims_.n_layers && kv_head < dims_.n_kv_heads);
  return rows_[layer * dims_.n_kv_heads + kv_head];
}

KvzapScorer KvzapFit::solve(double ridge, const KvzapFingerprint& fingerprint) const {
  if (!(ridge > 0.0 && ridge < 1.0)) {
    throw_invalid(kComponent, "kvzap ridge", std::to_string(ridge), "in (0, 1)");
  }
  const size_t f = n_features_, n = dims_.n_layers * dims_.n_kv_heads;
  std::vector<float> weights(n * f);
  std::vector<double> a(f * f), x(f);
  for (size_t i = 0; i < n; ++i) {
    if (rows_[i] == 0) {
      throw_invalid(kComponent,
                    "kvzap fit: no training rows for layer " + num(i / dims_.n_kv_heads) +
                        " KV head " + num(i % dims_.n_kv_heads),
                    "0", ">= 1");
    }
    const double* src = xtx_.data() + i * f * f;
    double trace = 0.0;
    for (size_t r = 0; r < f; ++r) trace += src[r * f + r];
    const double lambda = ridge * std::max(trace, 1e-12) / static_cast<double>(f);
    for (size_t r = 0; r < f; ++r) {  // symmetric from the lower triangle, plus lambda I
      for (size_t c = 0; c <= r; ++c) a[r * f + c] = a[c * f + r] = src[r * f + c];
      a[r * f + r] += lambda;
    }
    // Cholesky a = L L' (L in the lower triangle), then two triangular solves.
    for (size_t j = 0; j < f; ++j) {
      double d = a[j * f + j];
      for (size_t k = 0; k < j; ++k) d -= a[j * f + k] * a[j * f + k];
      SNAPKV_CHECK(d > 0.0);  // X'X + lambda I is positive definite
      const double ljj = std::sqrt(d);
      a[j * f + j] = ljj;
      for (size_t r = j + 1; r < f; ++r) {
        double s = a[r * f + j];
        for (size_t k = 0; k < j; ++k) s -= a[r * f + k] * a[j * f + k];
        a[r * f + j] = s / ljj;
      }
    }
    const double* b = xty_.data() + i * f;
    for (size_t r = 0; r < f; ++r) {
      double s = b[r];
      for (size_t k = 0; k < r; ++k) s -= a[r * f + k] * x[k];
      x[r] = s / a[r * f + r];
    }
    for (size_t r = f; r-- > 0;) {
      double s = x[r];
      for (size_t k = r + 1; k < f; ++k) s -= a[k * f + r] * x[k];
      x[r] = s / a[r * f + r];
    }
    for (size_t r = 0; r < f; ++r) weights[i * f + r] = static_cast<float>(x[r]);
  }
  return KvzapScorer(dims_, fingerprint, std::move(weights));
}

}  // namespace snapkv
