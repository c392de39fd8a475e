// Head types inside the engine (model/head_types.h, model/llama.h): the model finds its sidecar,
// and a session under head_allocation duo hands each layer's cache its streaming mask.
#include <cstdlib>
#include <filesystem>
#include <system_error>

#include "snapkv/gguf/fingerprint.h"
#include "snapkv/kv/core/prefill_plan.h"
#include "snapkv/model/head_types.h"
#include "snapkv/model/llama.h"
#include "snapkv/util/error.h"

namespace snapkv {

void LlamaModel::find_head_types_sidecar(const std::string& model_path) {
  const char* env = std::getenv("SNAPKV_HEADS");
  const bool from_env = env != nullptr && *env != '\0';
  const std::string path = from_env ? std::string(env) : head_types_sidecar_path(model_path);
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    head_types_status_ =
        "no head types (" + std::string(from_env ? "SNAPKV_HEADS names " : "") + path + ", absent)";
    return;
  }
  try {
    load_head_types(path);
  } catch (const std::exception& e) {
    // Other methods must still work with this model: the reason is reported when duo is asked.
    head_types_status_ = e.what();
  }
}

void LlamaModel::load_head_types(const std::string& path) {
  set_head_types(
      HeadTypes::load(path, gguf::fingerprint(*file_), config_.n_layers, config_.n_kv_heads));
  head_types_status_ = "head types from " + path;
}

void LlamaModel::set_head_types(HeadTypes types) {
  if (types.n_layers() != config_.n_layers || types.n_kv_heads() != config_.n_kv_heads) {
    throw_invalid("kv", "head types dimensions differ from the model's",
                  std::to_string(types.n_layers()) + "x" + std::to_string(types.n_kv_heads()),
                  std::to_string(config_.n_layers) + "x" + std::to_string(config_.n_kv_heads));
  }
  head_types_ = std::make_shared<const HeadTypes>(std::move(types));
  head_types_status_ = "head types set";
}

void LlamaSession::check_head_types(const LlamaModel& model, const CacheConfig& config) {
  if (!prefill_plan(config).head_types) return;
  if (model.head_types() == nullptr) {
    throw_invalid("kv",
                  "head_allocation " + std::string(to_string(config.head_allocation)) +
                      " (method prefix duo-) needs head types for this model",
                  model.head_types_status(),
                  "a sidecar written by `snapkv find-heads --model M.gguf` (M.heads.gguf beside "
                  "the model)");
  }
}

void LlamaSession::apply_head_types() {
  const HeadTypes* types = model_->head_types();
  if (!head_allocation_duo(cache_config_.head_allocation) || types == nullptr) return;
  const std::vector<uint8_t> mask = types->streaming_mask(cache_config_.duo_streaming);
  const size_t n_kv = types->n_kv_heads();
  for (size_t l = 0; l < caches_.size() && l < types->n_layers(); ++l) {
    caches_[l].set_head_types(
        std::vector<uint8_t>(mask.begin() + static_cast<std::ptrdiff_t>(l * n_kv),
                             mask.begin() + static_cast<std::ptrdiff_t>((l + 1) * n_kv)));
  }
}

}  // namespace snapkv
