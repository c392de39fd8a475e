// Head types of a model (kv/core/head_types.h): one retrieval score per (layer, KV head), measured
// from the model's own attention (eval/head_types.h), kept in a sidecar GGUF
// `<model>.heads.gguf` beside `<model>.gguf` (written by `snapkv find-heads`) that records the
// fingerprint (gguf/fingerprint.h) and dimensions of the model it was measured on; loading it for
// another model is refused by name. Under head_allocation duo / duo_ada the engine turns the scores
// into streaming heads with CacheConfig::duo_streaming (the lowest-scoring fraction of all the
// model's KV heads) and hands each layer's mask to its cache.
//
//   HeadTypes t(n_layers, n_kv_heads, fingerprint, scores, n_sink, recent);
//   t.write bytes: t.to_bytes();  HeadTypes::load("m.heads.gguf", fingerprint, L, H);
//   std::vector<uint8_t> mask = t.streaming_mask(0.5);  // [L][H], 1 = streaming
// Leaves out: measuring the scores and running the model.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "snapkv/gguf/gguf.h"

namespace snapkv {

// The sidecar path of a model file: "dir/m.gguf" -> "dir/m.heads.gguf" (any other name gets
// ".heads.gguf" appended).
std::string head_types_sidecar_path(const std::string& model_path);

class HeadTypes {
 public:
  // scores [n_layers][n_kv_heads], each finite and in [0, 1] (an attention mass); n_sink and
  // recent: the streaming window the scores were measured against (recorded, informative).
  HeadTypes(size_t n_layers, size_t n_kv_heads, const std::array<uint8_t, 32>& fingerprint,
            std::vector<float> scores, size_t n_sink, size_t recent);

  // Reads a sidecar and checks it against the model it is for: fingerprint and dimensions must
  // match. Throws snapkv::RuntimeError "[kv] ... got X, expected Y" naming the file.
  static HeadTypes load(const std::string& path, const std::array<uint8_t, 32>& fingerprint,
                        size_t n_layers, size_t n_kv_heads);
  // The sidecar's bytes (a GGUF with the scores as tensor "heads.retrieval" [n_layers][n_kv]).
  std::vector<uint8_t> to_bytes() const;

  size_t n_layers() const { return n_layers_; }
  size_t n_kv_heads() const { return n_kv_heads_; }
  size_t n_sink() const { return n_sink_; }
  size_t recent() const { return recent_; }
  const std::array<uint8_t, 32>& fingerprint() const { return fingerprint_; }
  std::span<const float> scores() const { return scores_; }
  // [n_layers][n_kv_heads], 1 = streaming: streaming_heads(scores(), fraction).
  std::vector<uint8_t> streaming_mask(double fraction) const;

 private:
  size_t n_layers_ = 0, n_kv_heads_ = 0;
  std::array<uint8_t, 32> fingerprint_{};
  std::vector<float> scores_;
  size_t n_sink_ = 0, recent_ = 0;
};

}  // namespace snapkv
