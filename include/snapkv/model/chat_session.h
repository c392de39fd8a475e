// A multi-turn conversation in ONE LlamaSession: each user turn is rendered with the model's chat
// template (model/chat_template.h), only the new part of the render is appended to the cache, and
// the reply is generated until an end-of-generation token (Tokenizer::is_eog) or max_tokens.
//
// Promises:
//  - The first turn renders [system?, user] with the generation prompt, tokenizes it with
//    parse_special and without adding BOS again (the template writes it), and prefill()s it: the
//    prompt is compressed by the cache config's policy as in `snapkv run`.
//  - Every later turn extend()s the cache with the rendered delta. The tokens the cache holds plus
//    the last sampled token (sampled, not yet fed) form the conversation's token history H. When
//    tokenizing the whole conversation's render (with the new user turn and the generation prompt)
//    gives H followed by more tokens, exactly those tokens are appended ("canonical" turn): the
//    cache then holds the tokenized full render, token for token. Otherwise (the model's reply is
//    not the tokenizer's own split of its text, or the template rewrites earlier turns, e.g. Llama
//    3 trims the reply) the reply stays in the cache as generated, the assistant turn is closed
//    with the text the template writes after an assistant message (the sampled end token stands for
//    it when it is that text's first token), and the render of the new user turn follows, as
//    llama.cpp's chat does: the appended text is the close (the text common to what the template
//    writes after a reply at the end of a conversation and before a following user turn) and the
//    render from after the last close before the new user's text. A render where no close comes
//    before the user's text throws RuntimeError.
//  - Compression: the first turn's prompt is compressed at its end (end_of_prompt) or per chunk
//    (every_chunk) to config.budget; later turns and replies go through extend()/decode(), which
//    evict only under config.decode_budget (the caller sets it: `snapkv chat` uses the budget), so
//    that no turn leaves more than max(budget, decode_budget) rows per KV head.
//  - A turn that would pass the model's context (positions are absolute: eviction bounds memory,
//    not positions) throws std::invalid_argument before the cache changes.
//
//  - save() writes the conversation as a .kvc (model/prompt_cache.h): the cache, the tokens it has
//    seen, and in the file's note (kv/file/kvc_format.h) the messages, the reply's last token not
//    fed yet, the turn count and the template family, as JSON
//    {"snapkv_chat":1,"template":F,"turns":N,"pending":ID|null,"messages":[{"role","content"}]};
//    load() of that file, with the same model and template family, continues the conversation
//    bit for bit as the saved one would have gone on (the cache settings are the file's).
//
// Leaves out: tools, editing or regenerating turns (the cache cannot roll back), Qwen 3 reasoning
// blocks in replies followed by a new turn (the template strips them: RuntimeError).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "snapkv/kv/core/config.h"
#include "snapkv/model/chat_template.h"
#include "snapkv/model/generation.h"
#include "snapkv/model/llama.h"
#include "snapkv/model/sampler.h"
#include "snapkv/model/tokenizer.h"

namespace snapkv {

enum class ChatStop { eog, max_tokens, context };

// "eog", "max_tokens", "context".
std::string_view to_string(ChatStop stop);

struct ChatTurn {
  std::string reply;               // the generated text (streamed pieces), end token excluded
  std::vector<int32_t> fed;        // [n] tokens appended to the cache for the user turn
  std::vector<int32_t> generated;  // [n] sampled tokens, end token excluded
  ChatStop stop = ChatStop::eog;   // eog also for a stop string
  FinishReason finish = FinishReason::stop;  // generate()'s reason (model/generation.h)
  bool canonical = true;  // the delta continued the tokenized full render (file comment)
};

class ChatSession {
 public:
  // The model and tokenizer must outlive the session. An empty system text means no system
  // message. Throws std::invalid_argument for a bad config or sampler config.
  ChatSession(const LlamaModel& model, const Tokenizer& tokenizer, ChatTemplate chat_template,
              const CacheConfig& config, SessionOptions options, SamplerConfig sampler,
              std::string system = {}, ChatOptions chat_options = {});

  // One user turn: appends it, generates at most max_tokens tokens (0: none; the reply is empty),
  // calling on_piece with each generated token's text. Throws std::invalid_argument for an empty
  // turn or one past the context (the session is unchanged then).
  ChatTurn send(std::string_view user, size_t max_tokens,
                const std::function<void(const std::string&)>& on_piece = {});
  // The same with every option of generate() (model/generation.h): stop strings, penalties over
  // the conversation's tokens, ignore_eos. The sampler of turn i (0-based) is seeded with
  // generation.sampler.seed + i, so a conversation replays with the same seed. Reply text cut at
  // a stop string is what messages() records; the cache holds every generated token.
  ChatTurn send(std::string_view user, const GenerationConfig& generation,
                const PieceCallback& on_piece = {});
  // Forgets the conversation (the cache, the history and the messages but the system message):
  // the next send() starts a new chat.
  void clear();
  // Writes the conversation to `path` (see the file comment). Throws std::invalid_argument before
  // the first turn, KvcError io when the file cannot be written.
  void save(const std::string& path) const;
  // Replaces the conversation with the one saved at `path`. Throws KvcError (its named kinds;
  // wrong_model for a file of another model) or RuntimeError for a .kvc that holds no
  // conversation or one of another template family; the conversation is unchanged then.
  void load(const std::string& path);
  // Turns sent since the start (or clear(), or the turns of a loaded conversation).
  size_t turns() const { return turns_; }

  // Tokens the cache has seen, in order (== session().n_past() of them).
  const std::vector<int32_t>& history() const { return history_; }
  // system?, user, assistant, ... (the reply of the last send() included).
  const std::vector<ChatMessage>& messages() const { return messages_; }
  const ChatTemplate& chat_template() const { return template_; }
  // Null before the first send().
  const LlamaSession* session() const { return session_ ? &*session_ : nullptr; }

 private:
  std::vector<int32_t> tokenize(std::string_view text) const;
  // Tokens to append for `user` after the current history (see the file comment).
  std::vector<int32_t> delta_for(const std::vector<ChatMessage>& with_user, bool& canonical) const;
  // Appends the user turn to the cache (turn.fed, turn.canonical); returns the messages with it.
  std::vector<ChatMessage> feed(std::string_view user, ChatTurn& turn);

  const LlamaModel* model_;
  const Tokenizer* tokenizer_;
  ChatTemplate template_;
  CacheConfig config_;
  SessionOptions options_;
  SamplerConfig sampler_;
  size_t turns_ = 0;
  ChatOptions chat_options_;
  std::string close_;  // the template's text after an assistant reply (src: assistant_close)
  std::vector<ChatMessage> messages_;
  std::optional<LlamaSession> session_;
  std::vector<int32_t> history_;    // [n_past] tokens in the cache
  std::optional<int32_t> pending_;  // last sampled token, not fed yet
  std::vector<float> logits_;       // [n_vocab] of the last fed token
};

}  // namespace snapkv
