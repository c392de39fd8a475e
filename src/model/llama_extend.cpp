// LlamaSession::extend: append tokens after the prompt without compression (UpdateKind::decode).
// Kept apart from llama.cpp so that the evaluation protocols (question-agnostic prompts, perplexity
// of a continuation) need no edit of the engine's main file. Same forward pass as decode(), several
// tokens per call: causal attention inside each chunk, every new row appended, nothing evicted.
#include <algorithm>
#include <string>

#include "snapkv/model/llama.h"
#include "snapkv/util/error.h"

namespace snapkv {

std::vector<float> LlamaSession::extend(std::span<const int32_t> tokens,
                                        std::vector<float>* all_logits) {
  const LlamaConfig& c = model_->config();
  if (!prefilled_) throw_invalid("llama", "extend before prefill", "no prompt", "prefill first");
  check_not_shared("extend");
  if (tokens.empty()) throw_invalid("llama", "extend with no tokens", "0 tokens", ">= 1 token");
  if (!plan_.reindex && next_position() + tokens.size() > c.n_ctx) {
    throw_invalid(
        "llama", "extend past the context",
        std::to_string(n_past()) + " + " + std::to_string(tokens.size()) + " tokens",
        "<= " + std::string(c.arch_name()) + ".context_length = " + std::to_string(c.n_ctx));
  }
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || static_cast<size_t>(tokens[i]) >= c.n_vocab) {
      throw_invalid("llama", "token id out of range at extend index " + std::to_string(i),
                    std::to_string(tokens[i]), "0.." + std::to_string(c.n_vocab - 1));
    }
  }
  const size_t n = tokens.size();
  // Under a decode-time budget, forwards of at most decode_interval tokens: the cache re-selects
  // between them as it would during step-by-step generation (every decode_interval tokens).
  const size_t chunk = std::min(options_.prefill_chunk, plan_.extend_chunk);
  if (all_logits != nullptr) all_logits->assign(n * c.n_vocab, 0.0f);
  std::vector<float> last(c.n_vocab);
  for (size_t start = 0; start < n; start += chunk) {
    const size_t s = std::min(chunk, n - start);
    const bool is_last = start + s == n;
    // With a decode-time budget the newest queries join the cache's recent-query window.
    const size_t window_rows = std::min(plan_.extend_window, s);
    make_room(s, "extend");
    if (all_logits != nullptr) {
      forward(tokens.subspan(start, s), UpdateKind::decode, window_rows,
              all_logits->data() + start * c.n_vocab, true);
    } else {
      forward(tokens.subspan(start, s), UpdateKind::decode, window_rows,
              is_last ? last.data() : nullptr, false);
    }
  }
  if (all_logits != nullptr) {
    std::copy_n(all_logits->data() + (n - 1) * c.n_vocab, c.n_vocab, last.data());
  }
  return last;
}

}  // namespace snapkv
