// What the diagnostic tools (kept_rows, kvzap_profile) share: one task sample with its tokens, the
// text of a token run with each token's character offset, and the greedy answer as `snapkv eval`
// decodes it.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "snapkv/eval/harness.h"
#include "snapkv/eval/tasks.h"

#include "snapkv/model/llama.h"
#include "snapkv/model/sampler.h"
#include "snapkv/model/tokenizer.h"

namespace snapkv::tools {

// Sample `index` of `task` with the tokenizer's own token counts, and its tokens.
struct TaskPrompt {
  eval::Sample sample;
  eval::PromptTokens prompt;
};
inline TaskPrompt task_prompt(const Tokenizer& tok, eval::Task task,
                              const eval::TaskOptions& options, size_t index) {
  const eval::TokenCounter counter = [&tok](std::string_view t) {
    return tok.encode(t, false).size();
  };
  eval::Sample sample = eval::generate_sample(task, options, index, counter);
  eval::PromptTokens prompt = eval::tokenize_prompt(tok, sample);
  return TaskPrompt{std::move(sample), std::move(prompt)};
}

// The text of tokens[1..] (tokens[0] is BOS and has none) and each token's first character in it,
// offset[tokens.size()] = text.size().
struct TokenText {
  std::string text;
  std::vector<size_t> offset;
};
inline TokenText token_text(const Tokenizer& tok, std::span<const int32_t> tokens) {
  TokenText t;
  t.offset.assign(tokens.size() + 1, 0);
  for (size_t i = 0; i < tokens.size(); ++i) {
    t.offset[i] = t.text.size();
    if (i > 0) t.text += tok.token_to_piece(tokens[i]);
  }
  t.offset[tokens.size()] = t.text.size();
  return t;
}

// The greedy answer: stops at EOS, a newline or max_new tokens.// *min_margin, when given, gets the
// smallest top-1 minus top-2 logit over the tokens that hold a digit.
inline std::string greedy_answer(LlamaSession& s, std::vector<float> logits, const Tokenizer& tok,
                                 size_t max_new, float* min_margin = nullptr) {
  std::string text;
  for (size_t step = 0; step < max_new; ++step) {
    const int32_t t = argmax(logits);
    if (t == tok.eos()) break;
    const std::string piece = tok.token_to_piece(t);
    if (min_margin != nullptr && piece.find_first_of("0123456789") != std::string::npos) {
      float second = -INFINITY;
      for (size_t i = 0; i < logits.size(); ++i) {
        if (static_cast<int32_t>(i) != t) second = std::max(second, logits[i]);
      }
      *min_margin = std::min(*min_margin, logits[static_cast<size_t>(t)] - second);
    }
    text += piece;
    if (text.find('\n') != std::string::npos) break;
    if (step + 1 < max_new) logits = s.decode(t);
  }
  return text.substr(0, text.find('\n'));
}

}  // namespace snapkv::tools
