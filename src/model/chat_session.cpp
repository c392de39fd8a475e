// ChatSession: a conversation in one LlamaSession (include/snapkv/model/chat_session.h).
#include "snapkv/model/chat_session.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "snapkv/model/prompt_cache.h"
#include "snapkv/util/error.h"

namespace snapkv {
namespace {

constexpr const char* kComponent = "chat";

// The text the template writes right after an assistant message's content, before the next
// user turn ("<|im_end|>\n", "<|eot_id|>", "</s>"): what follows the reply both when it ends the
// conversation and when a user turn follows (the common part; Llama 3.0 templates always append
// the generation prompt, Qwen 3 adds reasoning blocks, so neither render alone tells).
std::string assistant_close(const ChatTemplate& t, const ChatOptions& options) {
  const std::string reply = "snapkv-probe-reply", next = "snapkv-probe-next";
  ChatOptions o = options;
  o.add_generation_prompt = false;
  const std::vector<ChatMessage> last = {{"user", "snapkv-probe-user"}, {"assistant", reply}};
  std::vector<ChatMessage> more = last;
  more.push_back({"user", next});
  const std::string a = t.render(last, o), b = t.render(more, o);
  const size_t at_a = a.rfind(reply), at_b = b.rfind(reply), end_b = b.rfind(next);
  if (at_a == std::string::npos || at_b == std::string::npos || end_b == std::string::npos ||
      end_b < at_b) {
    throw_runtime(kComponent, "the template does not write the turns it is given",
                  "a render without the reply or the next user turn", "both, in order");
  }
  const std::string_view after_a = std::string_view(a).substr(at_a + reply.size());
  const std::string_view after_b =
      std::string_view(b).substr(at_b + reply.size(), end_b - at_b - reply.size());
  size_t n = 0;
  while (n < after_a.size() && n < after_b.size() && after_a[n] == after_b[n]) ++n;
  return std::string(after_a.substr(0, n));
}

// The user text as the templates write it (Llama 3 trims every message).
std::string_view trimmed(std::string_view s) {
  const auto space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
  while (!s.empty() && space(s.front())) s.remove_prefix(1);
  while (!s.empty() && space(s.back())) s.remove_suffix(1);
  return s;
}

}  // namespace

std::string_view to_string(ChatStop stop) {
  switch (stop) {
    case ChatStop::eog:
      return "eog";
    case ChatStop::max_tokens:
      return "max_tokens";
    case ChatStop::context:
      return "context";
  }
  return "invalid";
}

ChatSession::ChatSession(const LlamaModel& model, const Tokenizer& tokenizer,
                         ChatTemplate chat_template, const CacheConfig& config,
                         SessionOptions options, SamplerConfig sampler, std::string system,
                         ChatOptions chat_options)
    : model_(&model),
      tokenizer_(&tokenizer),
      template_(std::move(chat_template)),
      config_(config),
      options_(std::move(options)),
      sampler_((sampler.validate(), sampler)),
      chat_options_(std::move(chat_options)) {
  config_.validate();
  if (tokenizer.n_vocab() != model.config().n_vocab) {
    throw_invalid(kComponent, "tokenizer and model vocabularies differ",
                  std::to_string(tokenizer.n_vocab()) + " tokens",
                  std::to_string(model.config().n_vocab) + " (the model's vocab size)");
  }
  chat_options_.add_generation_prompt = true;
  close_ = assistant_close(template_, chat_options_);
  if (!system.empty()) messages_.push_back({"system", std::move(system)});
}

std::vector<int32_t> ChatSession::tokenize(std::string_view text) const {
  // The rendered text carries the special-token texts (and BOS where the template writes it):
  // parse them, add nothing (llama.cpp's handling of templated text).
  return tokenizer_->encode(text, /*add_special=*/false, /*parse_special=*/true);
}

std::vector<int32_t> ChatSession::delta_for(const std::vector<ChatMessage>& with_user,
                                            bool& canonical) const {
  const std::string full = template_.render(with_user, chat_options_);
  const std::vector<int32_t> tokens = tokenize(full);
  std::vector<int32_t> seen = history_;
  if (pending_) seen.push_back(*pending_);
  if (tokens.size() > seen.size() && std::equal(seen.begin(), seen.end(), tokens.begin())) {
    canonical = true;
    return {tokens.begin() + static_cast<std::ptrdiff_t>(history_.size()), tokens.end()};
  }
  canonical = false;
  // The new user turn starts right after the last close before its content.
  std::string close = close_;
  const std::string_view user = trimmed(with_user.back().content);
  const size_t user_at = full.rfind(user);  // send() refuses a blank turn
  const size_t close_at = user_at == std::string::npos || user_at < close.size() || close.empty()
                              ? std::string::npos
                              : full.rfind(close, user_at - close.size());
  if (close_at == std::string::npos) {
    throw_runtime(kComponent, "cannot find where the new user turn starts in the render",
                  "no '" + close + "' before the user's text",
                  "a template that closes assistant turns before the next user turn");
  }
  const size_t delta_at = close_at + close.size();
  std::vector<int32_t> out;
  if (pending_) {
    if (tokenizer_->is_eog(*pending_)) {
      // The model ended its turn: its end token stands for the template's when it is that text.
      const std::string piece = tokenizer_->token_to_piece(*pending_, /*special=*/true);
      if (!piece.empty() && close.compare(0, piece.size(), piece) == 0) {
        out.push_back(*pending_);
        close.erase(0, piece.size());
      }
    } else {
      out.push_back(*pending_);  // the reply's last token (stopped at max_tokens)
    }
  }
  for (const int32_t t : tokenize(close)) out.push_back(t);
  for (const int32_t t : tokenize(std::string_view(full).substr(delta_at))) out.push_back(t);
  return out;
}

std::vector<ChatMessage> ChatSession::feed(std::string_view user, ChatTurn& turn) {
  if (trimmed(user).empty()) {
    throw_invalid(kComponent, "empty user turn", "\"" + std::string(user) + "\"", "some text");
  }
  const size_t n_ctx = model_->config().n_ctx;
  std::vector<ChatMessage> with_user = messages_;
  with_user.push_back({"user", std::string(user)});
  if (!session_) {
    turn.fed = tokenize(template_.render(with_user, chat_options_));
    if (turn.fed.empty()) throw_invalid(kComponent, "empty prompt", "0 tokens", ">= 1 token");
    if (turn.fed.size() > n_ctx && !prefill_plan(config_).long_prompt) {
      throw_invalid(kComponent, "first turn longer than the model's context",
                    std::to_string(turn.fed.size()) + " tokens", "<= " + std::to_string(n_ctx));
    }
    session_.emplace(*model_, config_, options_);
    logits_ = session_->prefill(turn.fed);
  } else {
    turn.fed = delta_for(with_user, turn.canonical);
    // Past the context an evicting cache re-indexes its positions (model/llama.h) as long as its
    // retained rows and the turn fit.
    if (history_.size() + turn.fed.size() > n_ctx && !session_->position_for(turn.fed.size())) {
      throw_invalid(
          kComponent, "the conversation passed the model's context",
          std::to_string(history_.size()) + " + " + std::to_string(turn.fed.size()) + " tokens",
          "<= " + std::to_string(n_ctx) + " (start a new chat)");
    }
    logits_ = session_->extend(turn.fed);
  }
  history_.insert(history_.end(), turn.fed.begin(), turn.fed.end());
  pending_.reset();
  return with_user;
}

ChatTurn ChatSession::send(std::string_view user, size_t max_tokens,
                           const std::function<void(const std::string&)>& on_piece) {
  GenerationConfig generation;
  generation.sampler = sampler_;
  if (max_tokens == 0) {  // the turn is appended, nothing generated
    ChatTurn turn;
    std::vector<ChatMessage> with_user = feed(user, turn);
    turn.stop = ChatStop::max_tokens;
    turn.finish = FinishReason::length;
    ++turns_;
    messages_ = std::move(with_user);
    messages_.push_back({"assistant", ""});
    return turn;
  }
  generation.max_tokens = max_tokens;
  return send(user, generation, [&](const GenerationPiece& piece) {
    if (on_piece) on_piece(std::string(piece.text));
    return true;
  });
}

ChatTurn ChatSession::send(std::string_view user, const GenerationConfig& generation,
                           const PieceCallback& on_piece) {
  generation.validate();
  ChatTurn turn;
  std::vector<ChatMessage> with_user = feed(user, turn);
  GenerationConfig g = generation;
  g.sampler.seed += turns_;
  ++turns_;
  // generate() decodes every token but the last; the last (or the end token) is fed with the
  // next turn.
  const GenerationResult r =
      generate(*session_, std::move(logits_), *tokenizer_, g, history_, on_piece);
  logits_.clear();
  for (size_t i = 0; i + 1 < r.tokens.size(); ++i) history_.push_back(r.tokens[i]);
  if (r.end_token >= 0) {
    // The end token follows the reply's last token, which was decoded.
    if (!r.tokens.empty()) history_.push_back(r.tokens.back());
    pending_ = r.end_token;
  } else if (!r.tokens.empty()) {
    pending_ = r.tokens.back();
  }
  turn.generated = r.tokens;
  turn.reply = r.text;
  turn.finish = r.finish;
  turn.stop = r.finish == FinishReason::length    ? ChatStop::max_tokens
              : r.finish == FinishReason::context ? ChatStop::context
                                                  : ChatStop::eog;
  messages_ = std::move(with_user);
  messages_.push_back({"assistant", turn.reply});
  return turn;
}

void ChatSession::clear() {
  session_.reset();
  history_.clear();
  pending_.reset();
  logits_.clear();
  turns_ = 0;
  std::vector<ChatMessage> kept;
  if (!messages_.empty() && messages_.front().role == "system") kept.push_back(messages_.front());
  messages_ = std::move(kept);
}

void ChatSession::save(const std::string& path) const {
  if (!session_) {
    throw_invalid(kComponent, "nothing to save", "no turn yet", "a conversation of >= 1 turn");
  }
  nlohmann::json note;
  note["snapkv_chat"] = 1;
  note["template"] = std::string(to_string(template_.family()));
  note["turns"] = turns_;
  note["pending"] = pending_ ? nlohmann::json(*pending_) : nlohmann::json(nullptr);
  nlohmann::json messages = nlohmann::json::array();
  for (const ChatMessage& m : messages_) {
    messages.push_back({{"role", m.role}, {"content", m.content}});
  }
  note["messages"] = std::move(messages);
  // Replies need not be valid UTF-8: invalid bytes are replaced in the note only (the cache and
  // its tokens keep what was generated).
  save_prompt_cache(path, *session_, history_,
                    note.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

void ChatSession::load(const std::string& path) {
  PromptCache loaded = load_prompt_cache(*model_, path, options_);
  const auto refuse = [&](const std::string& what, const std::string& got,
                          const std::string& expected) {
    throw_runtime(kComponent, path + ": " + what, got, expected);
  };
  nlohmann::json note;
  try {
    note = nlohmann::json::parse(loaded.note);
  } catch (const nlohmann::json::exception&) {
    note = nullptr;
  }
  if (!note.is_object() || note.value("snapkv_chat", 0) != 1) {
    refuse("holds no conversation", loaded.note.empty() ? "a .kvc without a note" : "another note",
           "a .kvc written by snapkv chat's /save");
  }
  std::vector<ChatMessage> messages;
  std::optional<int32_t> pending;
  size_t turns = 0;
  std::string family;
  try {
    family = note.at("template").get<std::string>();
    turns = note.at("turns").get<size_t>();
    const nlohmann::json& p = note.at("pending");
    if (!p.is_null()) pending = p.get<int32_t>();
    for (const nlohmann::json& m : note.at("messages")) {
      messages.push_back({m.at("role").get<std::string>(), m.at("content").get<std::string>()});
    }
  } catch (const nlohmann::json::exception& e) {
    refuse("conversation note is malformed", e.what(), "the fields /save writes");
  }
  if (family != to_string(template_.family())) {
    refuse("conversation of another chat template", family,
           std::string(to_string(template_.family())) + " (this chat's)");
  }
  if (pending && (*pending < 0 || static_cast<size_t>(*pending) >= model_->config().n_vocab)) {
    refuse("pending token", std::to_string(*pending),
           "< n_vocab = " + std::to_string(model_->config().n_vocab));
  }
  session_.reset();
  session_.emplace(std::move(loaded.session));
  history_ = std::move(loaded.tokens);
  pending_ = pending;
  logits_.clear();
  turns_ = turns;
  messages_ = std::move(messages);
}

}  // namespace snapkv
