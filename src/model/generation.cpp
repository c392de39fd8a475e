// The shared generation loop (semantics in include/snapkv/model/generation.h).
#include "snapkv/model/generation.h"

#include <algorithm>
#include <cmath>
#include <limits>

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

GenerationResult generate(LlamaSession& session, std::vector<float> logits,
                          const Tokenizer& tokenizer, const GenerationConfig& config,
                          std::span<const int32_t> history, const PieceCallback& on_piece) {
  config.validate();
  Sampler sampler(config.sampler);
  const size_t model_ctx = session.model().config().n_ctx;
  const size_t n_ctx =
      config.context_limit == 0 ? model_ctx : std::min(model_ctx, config.context_limit);
  GenerationResult r;
  std::vector<int32_t> seen(history.begin(), history.end());
  size_t emitted = 0;  // bytes of r.text passed to on_piece
  Timer timer;
  auto release = [&](size_t upto, const GeneratedToken* token) {
    const std::string_view piece = std::string_view(r.text).substr(emitted, upto - emitted);
    emitted = upto;
    return !on_piece || on_piece(GenerationPiece{piece, token});
  };
  while (true) {
    const int32_t token = sampler.sample(logits, seen);
    if (tokenizer.is_eog(token) && !config.ignore_eos) {
      r.finish = FinishReason::stop;
      r.end_token = token;
      break;
    }
    r.tokens.push_back(token);
    seen.push_back(token);
    const GeneratedToken* detail = nullptr;
    if (config.top_logprobs >= 0) {
      r.details.push_back(token_logprobs(logits, token, static_cast<size_t>(config.top_logprobs)));
      detail = &r.details.back();
    }
    const size_t before = r.text.size();
    r.text += tokenizer.token_to_piece(token);
    if (!config.stop.empty()) {
      // A match may start in the held-back tail of the earlier text.
      const size_t longest = std::max_element(config.stop.begin(), config.stop.end(),
                                              [](const std::string& a, const std::string& b) {
                                                return a.size() < b.size();
                                              })
                                 ->size();
      const size_t from = before >= longest ? before - longest + 1 : 0;
      const size_t at = find_stop(r.text, std::max(from, emitted), config.stop);
      if (at != std::string_view::npos) {
        r.text.resize(at);
        r.finish = FinishReason::stop;
        release(r.text.size(), detail);
        break;
      }
    }
    const size_t hold = config.stop.empty() ? 0 : held_back(r.text, config.stop);
    if (!release(r.text.size() - hold, detail)) {
      r.finish = FinishReason::cancelled;
      break;
    }
    if (r.tokens.size() >= config.max_tokens) {
      r.finish = FinishReason::length;
      break;
    }
    if (session.n_past() >= n_ctx) {
      r.finish = FinishReason::context;
      break;
    }
    logits = session.decode(token);
    ++r.decode_steps;
  }
  // A held-back tail that never became a stop string is text.
  if (r.finish != FinishReason::cancelled && emitted < r.text.size()) {
    release(r.text.size(), r.details.empty() ? nullptr : &r.details.back());
  }
  r.decode_s = timer.seconds();
  return r;
}

}  // namespace snapkv
