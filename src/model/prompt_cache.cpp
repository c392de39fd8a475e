// Prompt caches on disk, model side (model/prompt_cache.h).
#include "snapkv/model/prompt_cache.h"

#include <string>
#include <utility>

#include "snapkv/gguf/fingerprint.h"
#include "snapkv/model/sampler.h"
#include "snapkv/util/error.h"

namespace snapkv {

ModelFingerprint model_fingerprint(const LlamaModel& model) {
  return gguf::fingerprint(model.file());
}

void save_prompt_cache(const std::string& path, const LlamaSession& session,
                       std::span<const int32_t> tokens, const std::string& note) {
  if (session.n_past() != tokens.size()) {
    throw_invalid("prompt_cache", "session tokens", std::to_string(session.n_past()),
                  "the " + std::to_string(tokens.size()) + " prompt tokens (nothing run after)");
  }
  write_kvc(path, model_fingerprint(session.model()), tokens, session.caches(),
            KvcLabels{session.model().config().name, note});
}

PromptCache load_prompt_cache(const LlamaModel& model, const std::string& path,
                              SessionOptions options) {
  const ModelFingerprint fingerprint = model_fingerprint(model);
  const LlamaConfig& c = model.config();
  KvcExpect expect;
  expect.fingerprint = &fingerprint;
  expect.model_name = model.config().name;
  expect.n_layers = c.n_layers;
  expect.dims = CacheDims{c.n_heads, c.n_kv_heads, c.head_dim};
  KvcContents contents = read_kvc(path, expect);
  if (contents.tokens.size() > c.n_ctx) {
    throw KvcError(KvcErrorKind::wrong_model,
                   format_error("prompt_cache", "prompt longer than the model's context",
                                std::to_string(contents.tokens.size()) + " tokens",
                                "<= " + std::to_string(c.n_ctx)));
  }
  for (size_t i = 0; i < contents.tokens.size(); ++i) {
    if (static_cast<size_t>(contents.tokens[i]) >= c.n_vocab) {
      throw KvcError(KvcErrorKind::wrong_model,
                     format_error("prompt_cache", "token " + std::to_string(i) + " of the cache",
                                  std::to_string(contents.tokens[i]),
                                  "< n_vocab = " + std::to_string(c.n_vocab)));
    }
  }
  PromptCache out{LlamaSession::from_caches(model, std::move(contents.caches), options),
                  std::move(contents.tokens),
                  contents.config,
                  contents.file_bytes,
                  std::move(contents.model_name),
                  std::move(contents.note)};
  return out;
}

GreedyAnswer answer_greedy(LlamaSession& session, std::vector<float> logits,
                           const Tokenizer& tokenizer, size_t max_new_tokens, bool stop_at_newline,
                           bool ignore_eos) {
  GreedyAnswer out;
  const size_t n_ctx = session.model().config().n_ctx;
  for (size_t step = 0; step < max_new_tokens; ++step) {
    const int32_t token = argmax(logits);
    if (token == tokenizer.eos() && !ignore_eos) break;
    out.tokens.push_back(token);
    out.text += tokenizer.token_to_piece(token);
    if (stop_at_newline && out.text.find('\n') != std::string::npos) break;
    if (step + 1 < max_new_tokens) {
      if (session.n_past() >= n_ctx) break;  // the context is full: stop rather than throw
      logits = session.decode(token);
      ++out.decode_steps;
    }
  }
  if (stop_at_newline) out.text = out.text.substr(0, out.text.find('\n'));
  return out;
}

}  // namespace snapkv
