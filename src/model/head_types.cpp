// A model's head types and their sidecar GGUF (model/head_types.h).
#include "snapkv/model/head_types.h"

#include <cmath>
#include <cstring>

#include "snapkv/kv/core/head_types.h"
#include "snapkv/util/error.h"
#include "snapkv/util/sha256.h"
#include "snapkv/util/text.h"

namespace snapkv {
namespace {

constexpr const char* kComponent = "kv";
constexpr const char* kTensor = "heads.retrieval";
constexpr uint32_t kVersion = 1;

std::string dims_text(size_t n_layers, size_t n_kv) {
  return num(n_layers) + " layers x " + num(n_kv) + " KV heads";
}

}  // namespace

std::string head_types_sidecar_path(const std::string& model_path) {
  constexpr std::string_view ext = ".gguf";
  if (model_path.size() > ext.size() &&
      model_path.compare(model_path.size() - ext.size(), ext.size(), ext) == 0) {
    return model_path.substr(0, model_path.size() - ext.size()) + ".heads.gguf";
  }
  return model_path + ".heads.gguf";
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
  const std::string where = "head types " + path;
  const std::string arch = file.get_string_or("general.architecture", "");
  if (arch != "heads") {
    throw_runtime(kComponent, where + ": not a head-types sidecar",
                  "general.architecture '" + arch + "'", "'heads'");
  }
  const uint32_t version = file.get_u32("heads.version");
  if (version != kVersion) {
    throw_runtime(kComponent, where + ": unknown version", num(version), num(kVersion));
  }
  const std::string& got = file.get_string("heads.model_fingerprint");
  const std::string want = to_hex(fingerprint);
  if (got != want) {
    throw_runtime(kComponent, where + " was measured on another model: fingerprint differs",
                  got.substr(0, 16) + "...",
                  want.substr(0, 16) + "... (measure again with snapkv find-heads)");
  }
  const size_t in_layers = file.get_u32("heads.n_layers"), in_kv = file.get_u32("heads.n_kv_heads");
  if (in_layers != n_layers || in_kv != n_kv_heads) {
    throw_runtime(kComponent, where + ": dimensions differ from the model's",
                  dims_text(in_layers, in_kv), dims_text(n_layers, n_kv_heads));
  }
  const gguf::TensorInfo& t = file.get_tensor(kTensor);
  if (t.type != gguf::TensorType::f32) {
    throw_runtime(kComponent, where + ": tensor " + std::string(kTensor) + " type", "not f32",
                  "f32");
  }
  const std::vector<int64_t> shape = {static_cast<int64_t>(n_kv_heads),
                                      static_cast<int64_t>(n_layers)};
  gguf::check_shape(t, shape);
  std::vector<float> scores(n_layers * n_kv_heads);
  std::memcpy(scores.data(), t.data, scores.size() * sizeof(float));
  try {
    return HeadTypes(n_layers, n_kv_heads, fingerprint, std::move(scores),
                     file.get_u32("heads.n_sink"), file.get_u32("heads.recent"));
  } catch (const std::invalid_argument& e) {
    throw_runtime(kComponent, where + ": bad contents", e.what(), "scores in [0, 1]");
  }
}

std::vector<uint8_t> HeadTypes::to_bytes() const {
  gguf::Writer w;
  w.set_string("general.architecture", "heads");
  w.set_string("general.name", "head types");
  w.set_u32("heads.version", kVersion);
  w.set_string("heads.model_fingerprint", to_hex(fingerprint_));
  w.set_u32("heads.n_layers", static_cast<uint32_t>(n_layers_));
  w.set_u32("heads.n_kv_heads", static_cast<uint32_t>(n_kv_heads_));
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
