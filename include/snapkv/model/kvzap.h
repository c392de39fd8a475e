// KVzap: a learned, question-agnostic surrogate of KVzip's reconstruction scores (model/kvzip.h).
// Per layer and KV head a linear model maps features of one cached row to the log of the score
// KVzip's pass would give it; policy kvzap compresses the prompt with exp(prediction), at a cost of
// a few multiply-adds per cached row instead of a second pass over the prompt.
//
// Features of a row [kKvzapFeatures(head_dim)] (kvzap_features): its key with the RoPE rotation
// undone (head_dim values), their squares (head_dim), its position as a fraction of the prompt,
// and 1 (the bias).
//
// The weights live in a sidecar GGUF (`<model>.kvzap.gguf` beside `<model>.gguf`, written by
// `snapkv train-scorer`) that records the fingerprint (gguf/fingerprint.h) and dimensions of the
// model it was trained for; loading it for another model is refused by name.
//
//   KvzapFit fit(dims);                      // per (layer, KV head) normal equations, double
//   fit.add(layer, head, features, target);  // target = log(KVzip score), many rows
//   KvzapScorer s = fit.solve(1e-3, fingerprint);
//   s.write("m.kvzap.gguf");
//   std::vector<std::vector<float>> scores = s.score_caches(session.caches(), model.rope_params());
// Leaves out: generating the training prompts (eval/kvzap_train.h) and running the model.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "snapkv/gguf/gguf.h"
#include "snapkv/kv/core/layer_cache.h"
#include "snapkv/ops/rope.h"

namespace snapkv {

using KvzapFingerprint = std::array<uint8_t, 32>;

// Features per row for keys of head_dim values: key, key squared, position fraction, bias.
constexpr size_t kvzap_n_features(size_t head_dim) {
  return 2 * head_dim + 2;
}

// Log-score floor: targets and predictions are clamped to [kKvzapLogFloor, 0] (scores in
// [exp(floor), 1], attention probabilities as KVzip's).
constexpr double kKvzapLogFloor = -16.0;

struct KvzapDims {
  size_t n_layers = 0;
  size_t n_kv_heads = 0;
  size_t head_dim = 0;
};

// The sidecar path of a model file: "dir/m.gguf" -> "dir/m.kvzap.gguf" (any other name gets
// ".kvzap.gguf" appended).
std::string kvzap_sidecar_path(const std::string& model_path);

// Undoes RoPE on keys [n_rows][head_dim] rotated at positions [n_rows] (each >= 0), in place:
// the inverse rotation is the forward one conjugated by negating each pair's second element.
void kvzap_unrotate(float* keys, const int64_t* positions, size_t n_rows, size_t head_dim,
                    const RopeParams& rope);

// Features of one row: out [kvzap_n_features(head_dim)] from its unrotated key [head_dim], its
// position and the prompt length n_positions (>= 1).
void kvzap_features(float* out, const float* key, int64_t position, size_t n_positions,
                    size_t head_dim);

class KvzapScorer {
 public:
  // weights [n_layers][n_kv_heads][kvzap_n_features(head_dim)], every value finite.
  KvzapScorer(KvzapDims dims, const KvzapFingerprint& fingerprint, std::vector<float> weights);

  // Reads a sidecar and checks it against the model it is for: the fingerprint and the dimensions
  // must match. Throws snapkv::RuntimeError "[kv] ... got X, expected Y" naming the file.
  static KvzapScorer load(const std::string& path, const KvzapFingerprint& fingerprint,
                          KvzapDims dims);
  static KvzapScorer from_file(const gguf::File& file, const std::string& path,
                               const KvzapFingerprint& fingerprint, KvzapDims dims);
  // The sidecar's bytes (a GGUF with the weights as tensor "kvzap.weight" [n_layers][n_kv][F]).
  std::vector<uint8_t> to_bytes() const;

  const KvzapDims& dims() const { return dims_; }
  const KvzapFingerprint& fingerprint() const { return fingerprint_; }
  std::span<const float> weights() const { return weights_; }

  // Predicted log score of one row from its features [kvzap_n_features(head_dim)].
  float predict(size_t layer, size_t kv_head, const float* features) const;

  // Scores of every retained row of one layer's cache [n_kv_heads][size()]: exp of the predicted
  // log score, clamped to [exp(kKvzapLogFloor), 1]. The cache's keys are read as it decodes them.
  std::vector<float> score_layer(const LayerCache& cache, size_t layer,
                                 const RopeParams& rope) const;
  // score_layer for every layer, caches.size() == n_layers.
  std::vector<std::vector<float>> score_caches(const std::vector<LayerCache>& caches,
                                               const RopeParams& rope) const;

 private:
  KvzapDims dims_;
  KvzapFingerprint fingerprint_{};
  std::vector<float> weights_;  // [n_layers][n_kv_heads][F]
};

// Reference of KvzapScorer's score for one row, all in double: unrotates `rotated_key`
// [head_dim] at `position` with double angles, builds the features, and returns the clamped
// exp(w . f).
double kvzap_score_ref(const KvzapScorer& scorer, size_t layer, size_t kv_head,
                       const float* rotated_key, int64_t position, size_t n_positions,
                       const RopeParams& rope);

// Ridge regression per (layer, KV head), accumulated as normal equations in double.
class KvzapFit {
 public:
  explicit KvzapFit(KvzapDims dims);
  // One training row: features [kvzap_n_features(head_dim)] and its target (a log score).
  void add(size_t layer, size_t kv_head, const float* features, double target);
  size_t rows(size_t layer, size_t kv_head) const;
  // Solves (X'X + lambda I) w = X'y with lambda = ridge * trace(X'X) / F per (layer, head) by
  // Cholesky. Throws std::invalid_argument when a (layer, head) has no rows.
  KvzapScorer solve(double ridge, const KvzapFingerprint& fingerprint) const;

 private:
  KvzapDims dims_;
  size_t n_features_ = 0;
  std::vector<double> xtx_;   // [n_layers][n_kv][F][F]
  std::vector<double> xty_;   // [n_layers][n_kv][F]
  std::vector<size_t> rows_;  // [n_layers][n_kv]
};

}  // namespace snapkv
