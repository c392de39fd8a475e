// Prompt caches on disk and as bytes, model side (model/prompt_cache.h,
// model/prompt_cache_bytes.h): one set of checks for both.
#include "snapkv/model/prompt_cache.h"

#include <string>
#include <utility>

#include "snapkv/gguf/fingerprint.h"
#include "snapkv/model/prompt_cache_bytes.h"
#include "snapkv/model/sampler.h"
#include "snapkv/util/error.h"

namespace snapkv {

ModelFingerprint model_fingerprint(const LlamaModel& model) {
  return gguf::fingerprint(model.file());
}

namespace {

void check_nothing_after_prompt(const LlamaSession& session, std::span<const int32_t> tokens) {
  if (session.n_past() != tokens.size()) {
    throw_invalid("prompt_cache", "session tokens", std::to_string(session.n_past()),
                  "the " + std::to_string(tokens.size()) + " prompt tokens (nothing run after)");
  }
}

KvcLabels labels_of(const LlamaSession& session, const std::string& note) {
  return KvcLabels{session.model().config().name, note};
}

// What a cache for `model` must match; `fingerprint` outlives the returned value's use.
KvcExpect expect_for(const LlamaModel& model, const ModelFingerprint& fingerprint) {
  const LlamaConfig& c = model.config();
  KvcExpect expect;
  expect.fingerprint = &fingerprint;
  expect.model_name = c.name;
  expect.n_layers = c.n_layers;
  expect.dims = CacheDims{c.n_heads, c.n_kv_heads, c.head_dim};
  return expect;
}

// The session of decoded `contents`, after the checks the .kvc reader cannot make: the prompt
// fits the model's context and every token is in its vocabulary.
PromptCache session_of(const LlamaModel& model, KvcContents contents, SessionOptions options,
                       size_t file_bytes) {
  const LlamaConfig& c = model.config();
  // A re-indexed cache has seen more tokens than the context and holds positions within it
  // (LlamaSession::from_caches checks them).
  const bool reindexed =
      !contents.caches.empty() && contents.caches.front().next_position() < contents.tokens.size();
  if (contents.tokens.size() > c.n_ctx && !reindexed) {
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
                     file_bytes,
                     std::move(contents.model_name),
                     std::move(contents.note)};
}

}  // namespace

void save_prompt_cache(const std::string& path, const LlamaSession& session,
                       std::span<const int32_t> tokens, const std::string& note) {
  check_nothing_after_prompt(session, tokens);
  write_kvc(path, model_fingerprint(session.model()), tokens, session.caches(),
            labels_of(session, note));
}

PromptCache load_prompt_cache(const LlamaModel& model, const std::string& path,
                              SessionOptions options) {
  const ModelFingerprint fingerprint = model_fingerprint(model);
  KvcContents contents = read_kvc(path, expect_for(model, fingerprint));
  const size_t file_bytes = contents.file_bytes;
  return session_of(model, std::move(contents), options, file_bytes);
}

std::vector<uint8_t> encode_prompt_cache(const LlamaSession& session,
                                         std::span<const int32_t> tokens) {
  check_nothing_after_prompt(session, tokens);
  return encode_kvc(model_fingerprint(session.model()), tokens, session.caches(),
                    labels_of(session, {}));
}

PromptCache decode_prompt_cache(const LlamaModel& model, std::span<const uint8_t> bytes,
                                SessionOptions options) {
  const ModelFingerprint fingerprint = model_fingerprint(model);
  return session_of(model, decode_kvc(bytes, expect_for(model, fingerprint)), options,
                    bytes.size());
}

GreedyAnswer answer_greedy(LlamaSession& session, std::vector<float> logits,
                           const Tokenizer& tokenizer, size_t max_new_tokens, bool stop_at_newline,
                           bool ignore_eos) {
  GreedyAnswer out;
  for (size_t step = 0; step < max_new_tokens; ++step) {
    const int32_t token = argmax(logits);
    if (token == tokenizer.eos() && !ignore_eos) break;
    out.tokens.push_back(token);
    out.text += tokenizer.token_to_piece(token);
    if (stop_at_newline && out.text.find('\n') != std::string::npos) break;
    if (step + 1 < max_new_tokens) {
      // The context is full (and cannot be re-indexed): stop rather than throw.
      if (!session.position_for(1)) break;
      logits = session.decode(token);
      ++out.decode_steps;
    }
  }
  if (stop_at_newline) out.text = out.text.substr(0, out.text.find('\n'));
  return out;
}

}  // namespace snapkv
