// Prompt caches as bytes in memory (the .kvc layout of kv/file/kvc_format.h), for stores that are
// not files: a session's caches after its prompt encoded with the model's fingerprint and the
// prompt's tokens, and decoded back into a session that goes on without re-running the prefill.
//
// Promises: the same checks as load_prompt_cache (model/prompt_cache.h): a cache made for another
// model is a KvcError wrong_model, a damaged one a KvcError of the kind found; a token id outside
// the vocabulary or a prompt longer than the context is a KvcError wrong_model. The decoded
// session answers bit for bit like the session that was encoded.
// Leaves out: where the bytes are kept, tokenization.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "snapkv/model/prompt_cache.h"

namespace snapkv {

// The .kvc bytes of `session` (prefill() done, nothing run after: n_past() == tokens.size()).
std::vector<uint8_t> encode_prompt_cache(const LlamaSession& session,
                                         std::span<const int32_t> tokens);

// The prompt cache held in `bytes`, checked for `model` (file_bytes is bytes.size()).
PromptCache decode_prompt_cache(const LlamaModel& model, std::span<const uint8_t> bytes,
                                SessionOptions options = {});

}  // namespace snapkv
