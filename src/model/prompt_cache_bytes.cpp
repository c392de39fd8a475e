// Prompt caches as bytes (model/prompt_cache_bytes.h).
#include "snapkv/model/prompt_cache_bytes.h"

#include <string>
#include <utility>

#include "snapkv/util/error.h"

namespace snapkv {

std::vector<uint8_t> encode_prompt_cache(const LlamaSession& session,
                                         std::span<const int32_t> tokens) {
  if (session.n_past() != tokens.size()) {
    throw_invalid("prompt_cache", "session tokens", std::to_string(session.n_past()),
                  "the " + std::to_string(tokens.size()) + " prompt tokens (nothing run after)");
  }
  return encode_kvc(model_fingerprint(session.model()), tokens, session.caches(),
                    KvcLabels{session.model().config().name, {}});
}

PromptCache decode_prompt_cache(const LlamaModel& model, std::span<const uint8_t> bytes,
                                SessionOptions options) {
  const ModelFingerprint fingerprint = model_fingerprint(model);
  const LlamaConfig& c = model.config();
  KvcExpect expect;
  expect.fingerprint = &fingerprint;
  expect.model_name = model.config().name;
  expect.n_layers = c.n_layers;
  expect.dims = CacheDims{c.n_heads, c.n_kv_heads, c.head_dim};
  KvcContents contents = decode_kvc(bytes, expect);
  if (contents.tokens.size() > c.n_ctx) {
    throw KvcError(KvcErrorKind::wrong_model,
                   format_error("prompt_cache", "prompt longer than the model's context",
                                std::to_string(contents.tokens.size()) + " tokens",
                                "<= " + std::to_string(c.n_ctx)));
  }
  for (size_t i = 0; i < contents.tokens.size(); ++i) {
    if (contents.tokens[i] < 0 || static_cast<size_t>(contents.tokens[i]) >= c.n_vocab) {
      throw KvcError(KvcErrorKind::wrong_model,
                     format_error("prompt_cache", "token " + std::to_string(i) + " of the cache",
                                  std::to_string(contents.tokens[i]),
                                  "in [0, n_vocab = " + std::to_string(c.n_vocab) + ")"));
    }
  }
  return PromptCache{LlamaSession::from_caches(model, std::move(contents.caches), options),
                     std::move(contents.tokens),
                     contents.config,
                     bytes.size(),
                     std::move(contents.model_name),
                     std::move(contents.note)};
}

}  // namespace snapkv
