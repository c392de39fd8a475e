// The shared generation loop (semantics in include/snapkv/model/generation.h).
#include "snapkv/model/generation.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <utility>

#include "snapkv/util/error.h"
#include "snapkv/util/timer.h"

namespace snapkv {
namespace {

constexpr std::string_view kComponent = "generation";
constexpr int kMaxTopLogprobs = 20;

// Length of the longest suffix of `text` that is a proper prefix of some stop string: that many
// bytes are held back, since the next token may complete a stop string.
size_t held_back(std::string_view text, const std::vector<std::string>& stop) {
  size_t hold = 0;
  for (const std::string& s : stop) {
    const size_t max_len = std::min(s.size() - 1, text.size());
    for (size_t len = max_len; len > hold; --len) {
      if (text.substr(text.size() - len) == std::string_view(s).substr(0, len)) {
        hold = len;
        break;
      }
    }
  }
  return hold;
}

// Earliest position of a stop string in text at or after `from` (npos if none).
size_t find_stop(std::string_view text, size_t from, const std::vector<std::string>& stop) {
  size_t best = std::string_view::npos;
  for (const std::string& s : stop) {
    const size_t at = text.find(s, from);
    if (at < best) best = at;
  }
  return best;
}

}  // namespace

void GenerationConfig::validate() const {
  if (max_tokens == 0) throw_invalid(kComponent, "max_tokens", "0", ">= 1");
  sampler.validate();
  for (const std::string& s : stop) {
    if (s.empty()) throw_invalid(kComponent, "empty stop string", "\"\"", "a non-empty string");
  }
  if (context_limit != 0 && context_limit < 2) {
    throw_invalid(kComponent, "context_limit", std::to_string(context_limit),
                  "0 (the model's) or >= 2");
  }
  if (top_logprobs < -1 || top_logprobs > kMaxTopLogprobs) {
    throw_invalid(kComponent, "top_logprobs out of range", std::to_string(top_logprobs),
                  "-1 (none) or 0.." + std::to_string(kMaxTopLogprobs));
  }
}

std::string_view to_string(FinishReason reason) {
  switch (reason) {
    case FinishReason::stop:
      return "stop";
    case FinishReason::length:
      return "length";
    case FinishReason::context:
      return "context";
    case FinishReason::cancelled:
      return "cancelled";
  }
  return "?";
}

GeneratedToken token_logprobs(std::span<const float> logits, int32_t id, size_t k) {
  if (logits.empty() || id < 0 || static_cast<size_t>(id) >= logits.size()) {
    throw_invalid(kComponent, "token id outside the logits", std::to_string(id),
                  "0.." + std::to_string(logits.size()));
  }
  const double max_logit = *std::max_element(logits.begin(), logits.end());
  double sum = 0.0;
  for (float l : logits) sum += std::exp(static_cast<double>(l) - max_logit);
  const double log_z = max_logit + std::log(sum);
  GeneratedToken t;
  t.id = id;
  t.logprob = static_cast<double>(logits[static_cast<size_t>(id)]) - log_z;
  k = std::min(k, logits.size());
  std::vector<int32_t> order(logits.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int32_t>(i);
  std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k), order.end(),
                    [&](int32_t a, int32_t b) {
                      const float la = logits[static_cast<size_t>(a)];
                      const float lb = logits[static_cast<size_t>(b)];
                      return la > lb || (la == lb && a < b);
                    });
  for (size_t i = 0; i < k; ++i) {
    t.top.push_back({order[i], static_cast<double>(logits[static_cast<size_t>(order[i])]) - log_z});
  }
  return t;
}

namespace {

// The sampler's settings; ignore_eos bans every end-of-generation token (a -inf bias), as
// llama.cpp's --ignore-eos does, so the text never holds one.
SamplerConfig sampler_config(const GenerationConfig& config, const Tokenizer& tokenizer) {
  SamplerConfig s = config.sampler;
  if (config.ignore_eos) {
    for (TokenId id : tokenizer.eog_ids()) {
      s.logit_bias.emplace_back(id, -std::numeric_limits<float>::infinity());
    }
  }
  return s;
}

}  // namespace

Generator::Generator(const Tokenizer& tokenizer, const GenerationConfig& config, size_t model_ctx,
                     std::span<const int32_t> history, PieceCallback on_piece)
    : tokenizer_(&tokenizer),
      config_(config),
      on_piece_(std::move(on_piece)),
      sampler_((config.validate(), sampler_config(config, tokenizer))),
      n_ctx_(config.context_limit == 0 ? model_ctx : std::min(model_ctx, config.context_limit)),
      seen_(history.begin(), history.end()) {
  for (const std::string& s : config_.stop) longest_stop_ = std::max(longest_stop_, s.size());
}

bool Generator::release(size_t upto, int32_t id, const GeneratedToken* token) {
  const std::string_view piece = std::string_view(r_.text).substr(emitted_, upto - emitted_);
  emitted_ = upto;
  return !on_piece_ || on_piece_(GenerationPiece{piece, token, id});
}

std::optional<int32_t> Generator::step(std::span<const float> logits, size_t n_past) {
  if (done_) return std::nullopt;
  const int32_t token = sampler_.sample(logits, seen_);
  if (tokenizer_->is_eog(token) && !config_.ignore_eos) {
    r_.finish = FinishReason::stop;
    r_.end_token = token;
    done_ = true;
    return std::nullopt;
  }
  r_.tokens.push_back(token);
  seen_.push_back(token);
  const GeneratedToken* detail = nullptr;
  if (config_.top_logprobs >= 0) {
    r_.details.push_back(token_logprobs(logits, token, static_cast<size_t>(config_.top_logprobs)));
    detail = &r_.details.back();
  }
  const size_t before = r_.text.size();
  r_.text += tokenizer_->token_to_piece(token);
  if (!config_.stop.empty()) {
    // A match may start in the held-back tail of the earlier text.
    const size_t from = before >= longest_stop_ ? before - longest_stop_ + 1 : 0;
    const size_t at = find_stop(r_.text, std::max(from, emitted_), config_.stop);
    if (at != std::string_view::npos) {
      r_.text.resize(at);
      r_.finish = FinishReason::stop;
      release(r_.text.size(), token, detail);
      done_ = true;
      return std::nullopt;
    }
  }
  const size_t hold = config_.stop.empty() ? 0 : held_back(r_.text, config_.stop);
  if (!release(r_.text.size() - hold, token, detail)) {
    r_.finish = FinishReason::cancelled;
    done_ = true;
    return std::nullopt;
  }
  if (r_.tokens.size() >= config_.max_tokens) {
    r_.finish = FinishReason::length;
    done_ = true;
    return std::nullopt;
  }
  if (n_past >= n_ctx_) {
    r_.finish = FinishReason::context;
    done_ = true;
    return std::nullopt;
  }
  ++r_.decode_steps;
  return token;
}

void Generator::cancel() {
  if (done_) return;
  r_.finish = FinishReason::cancelled;
  done_ = true;
}

GenerationResult Generator::finish() {
  // A held-back tail that never became a stop string is text.
  if (r_.finish != FinishReason::cancelled && emitted_ < r_.text.size()) {
    release(r_.text.size(), r_.tokens.empty() ? -1 : r_.tokens.back(),
            r_.details.empty() ? nullptr : &r_.details.back());
  }
  r_.decode_s = timer_.seconds();
  return std::move(r_);
}

GenerationResult generate(LlamaSession& session, std::vector<float> logits,
                          const Tokenizer& tokenizer, const GenerationConfig& config,
                          std::span<const int32_t> history, const PieceCallback& on_piece) {
  Generator g(tokenizer, config, session.model().config().n_ctx, history, on_piece);
  // The context counts the positions the next step would use: past the model's context an
  // evicting cache re-indexes (LlamaSession::position_for), the full cache stops.
  while (const std::optional<int32_t> token =
             g.step(logits, session.position_for(1).value_or(session.model().config().n_ctx))) {
    logits = session.decode(*token);
  }
  return g.finish();
}

}  // namespace snapkv
