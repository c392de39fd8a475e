// Compressed prompt caches on disk, model side: a session's caches after its prompt, saved with
// the model's fingerprint and the prompt's tokens (kv/file/kvc_file.h writes the bytes), and loaded
// back into a session that goes on without re-running the prefill. Also the greedy answer loop that
// `snapkv ask` and the evaluation harness share in spirit (eval/harness.h, finish_run).
//
// Promises: load_prompt_cache refuses a file made for another model (KvcError wrong_model: the
// GGUF fingerprint of gguf/fingerprint.h, then the dimensions) and a prompt longer than the
// model's context; the loaded session answers bit for bit like the session that was saved.
// Leaves out: tokenization of the document (the caller's), the file layout (kv/file/kvc_format.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "snapkv/kv/file/kvc_file.h"
#include "snapkv/model/llama.h"
#include "snapkv/model/tokenizer.h"

namespace snapkv {

ModelFingerprint model_fingerprint(const LlamaModel& model);

// Writes `session` (prompt ended, n_past() == tokens.size(): the tokens it has seen) atomically to
// `path`, with the model's general.name and `note` (kv/file/kvc_format.h). Throws
// std::invalid_argument for a session in another state, KvcError io.
void save_prompt_cache(const std::string& path, const LlamaSession& session,
                       std::span<const int32_t> tokens, const std::string& note = {});

struct PromptCache {
  LlamaSession session;         // prompt done; clone() it per question
  std::vector<int32_t> tokens;  // [n_tokens] the prompt
  CacheConfig config;           // how it was compressed
  size_t file_bytes = 0;        // bytes read
  std::string model_name;       // general.name of the model it was written with ("": unknown)
  std::string note;             // the note it was written with
};

// Reads and validates `path` for `model` (KvcError of the named kinds, or RuntimeError for a token
// id outside the model's vocabulary). A fingerprint mismatch names both models' general.name and
// both fingerprints.
PromptCache load_prompt_cache(const LlamaModel& model, const std::string& path,
                              SessionOptions options = {});

struct GreedyAnswer {
  std::vector<int32_t> tokens;  // [n_generated] (EOS excluded)
  std::string text;             // the pieces joined, cut at the first newline when asked to
  size_t decode_steps = 0;
};

// Greedy (arg-max) decoding from `logits` [n_vocab] (the last prompt position's): stops at EOS
// (unless ignore_eos: then EOS is decoded like any token, as benchmarks of a fixed length need),
// after max_new_tokens tokens, or, with stop_at_newline, once the text holds a newline. The same
// loop as the evaluation harness, so a loaded cache reproduces its predictions token for token.
GreedyAnswer answer_greedy(LlamaSession& session, std::vector<float> logits,
                           const Tokenizer& tokenizer, size_t max_new_tokens, bool stop_at_newline,
                           bool ignore_eos = false);

}  // namespace snapkv
