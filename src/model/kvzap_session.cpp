// Policies kvzap and kvzap_snapkv inside the engine (model/kvzap.h, model/llama.h): the model finds
// its scorer's sidecar, and a session ends its prompt with the scorer's per-row scores.
#include "model/sidecar.h"
#include "snapkv/gguf/fingerprint.h"
#include "snapkv/model/kvzap.h"
#include "snapkv/model/llama.h"
#include "snapkv/util/error.h"

namespace snapkv {

KvzapDims LlamaModel::kvzap_dims() const {
  return KvzapDims{config_.n_layers, config_.n_kv_heads, config_.head_dim};
}

void LlamaModel::find_kvzap_sidecar(const std::string& model_path) {
  const std::string why_not =
      sidecar::find(model_path, sidecar::kKvzap, [this](const std::string& p) { load_kvzap(p); });
  if (!why_not.empty()) kvzap_status_ = why_not;
}

void LlamaModel::load_kvzap(const std::string& path) {
  set_kvzap(KvzapScorer::load(path, gguf::fingerprint(*file_), kvzap_dims()));
  kvzap_status_ = "scorer weights from " + path;
}

void LlamaModel::set_kvzap(KvzapScorer scorer) {
  const KvzapDims want = kvzap_dims(), got = scorer.dims();
  if (got.n_layers != want.n_layers || got.n_kv_heads != want.n_kv_heads ||
      got.head_dim != want.head_dim) {
    throw_invalid("kv", "kvzap scorer dimensions differ from the model's",
                  std::to_string(got.n_layers) + "x" + std::to_string(got.n_kv_heads) + "x" +
                      std::to_string(got.head_dim),
                  std::to_string(want.n_layers) + "x" + std::to_string(want.n_kv_heads) + "x" +
                      std::to_string(want.head_dim));
  }
  kvzap_ = std::make_shared<const KvzapScorer>(std::move(scorer));
  kvzap_status_ = "scorer weights set";
}

void LlamaSession::check_kvzap(const LlamaModel& model, PolicyKind policy) {
  if (model.kvzap() == nullptr) {
    throw_invalid(
        "kv", "policy " + std::string(to_string(policy)) + " needs scorer weights for this model",
        model.kvzap_status(),
        "a sidecar written by `snapkv train-scorer --model M.gguf` (M.kvzap.gguf "
        "beside the model)");
  }
}

void LlamaSession::compress_kvzap() {
  check_kvzap(*model_, cache_config_.policy);
  const std::vector<std::vector<float>> scores =
      model_->kvzap()->score_caches(caches_, model_->rope_params());
  for (size_t l = 0; l < caches_.size(); ++l) caches_[l].compress_with_scores(scores[l]);
}

}  // namespace snapkv
