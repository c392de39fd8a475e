// A model's head types and their sidecar GGUF (model/head_types.h).
#include "snapkv/model/head_types.h"

#include <cmath>

#include "model/sidecar.h"
#include "snapkv/kv/core/head_types.h"
#include "snapkv/util/error.h"
#include "snapkv/util/text.h"

namespace snapkv {
namespace {

constexpr const char* kComponent = "kv";
constexpr const char* kTensor = "heads.retrieval";

}  // namespace

const sidecar::Kind sidecar::kHeadTypes = {"heads",
                                           ".heads.gguf",
                                           "head types",
                                           "head-types sidecar",
                                           "was measured on another model",
                                           "measure again with snapkv find-heads",
                                           "SNAPKV_HEADS",
                                           "no head types",
                                           1};

namespace {

std::vector<sidecar::Dim> dims(size_t n_layers, size_t n_kv) {
  return {{"n_layers", n_layers, "", " layers"}, {"n_kv_heads", n_kv, "", " KV heads"}};
}

std::string dims_text(size_t n_layers, size_t n_kv) {
  return sidecar::dims_text(dims(n_layers, n_kv));
}

}  // namespace

std::string head_types_sidecar_path(const std::string& model_path) {
  return sidecar::path_for(model_path, sidecar::kHeadTypes.suffix);
}

HeadTypes::HeadTypes(size_t n_layers, size_t n_kv_heads, const std::array<uint8_t, 32>& fingerprint,
                     std::vector<float> scores, size_t n_sink, size_t recent)
    : n_layers_(n_layers),
      n_kv_heads_(n_kv_heads),
      fingerprint_(fingerprint),
      scores_(std::move(scores)),
      n_sink_(n_sink),
      recent_(recent) {
  if (n_layers_ == 0 || n_kv_heads_ == 0 || n_layers_ > 65536 || n_kv_heads_ > 65536) {
    throw_invalid(kComponent, "head types dimensions", dims_text(n_layers_, n_kv_heads_),
                  "each in 1 .. 65536");
  }
  if (scores_.size() != n_layers_ * n_kv_heads_) {
    throw_invalid(kComponent, "head types score count", num(scores_.size()),
                  num(n_layers_ * n_kv_heads_) + " for " + dims_text(n_layers_, n_kv_heads_));
  }
  for (size_t i = 0; i < scores_.size(); ++i) {
    if (!(std::isfinite(scores_[i]) && scores_[i] >= 0.0f && scores_[i] <= 1.0f)) {
      throw_invalid(kComponent, "head types score " + num(i), std::to_string(scores_[i]),
                    "a mass in [0, 1]");
    }
  }
}

HeadTypes HeadTypes::load(const std::string& path, const std::array<uint8_t, 32>& fingerprint,
                          size_t n_layers, size_t n_kv_heads) {
  const gguf::File file = gguf::File::open(path);
  const sidecar::Reader in(file, path, sidecar::kHeadTypes, fingerprint,
                           dims(n_layers, n_kv_heads));
  std::vector<float> scores =
      in.f32(kTensor, {static_cast<int64_t>(n_kv_heads), static_cast<int64_t>(n_layers)});
  try {
    return HeadTypes(n_layers, n_kv_heads, fingerprint, std::move(scores), in.u32("n_sink"),
                     in.u32("recent"));
  } catch (const std::invalid_argument& e) {
    throw_runtime(kComponent, in.where() + ": bad contents", e.what(), "scores in [0, 1]");
  }
}

std::vector<uint8_t> HeadTypes::to_bytes() const {
  gguf::Writer w = sidecar::header(sidecar::kHeadTypes, "head types", fingerprint_,
                                   dims(n_layers_, n_kv_heads_));
  w.set_u32("heads.n_sink", static_cast<uint32_t>(n_sink_));
  w.set_u32("heads.recent", static_cast<uint32_t>(recent_));
  w.set_string("heads.score",
               "mean attention mass of the prompts' last queries outside the first n_sink and the "
               "last `recent` positions (max over the KV head's query heads)");
  w.add_tensor_f32(kTensor, gguf::TensorType::f32,
                   {static_cast<int64_t>(n_kv_heads_), static_cast<int64_t>(n_layers_)}, scores_);
  return w.to_bytes();
}

std::vector<uint8_t> HeadTypes::streaming_mask(double fraction) const {
  return streaming_heads(scores_, fraction);
}

}  // namespace snapkv
