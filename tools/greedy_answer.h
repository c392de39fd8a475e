// The greedy answer of a task sample as `snapkv eval` decodes it, for the diagnostic tools
// (kept_rows, kvzap_profile): stops at EOS, a newline or max_new tokens.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "snapkv/model/llama.h"
#include "snapkv/model/sampler.h"
#include "snapkv/model/tokenizer.h"

namespace snapkv::tools {

// *min_margin, when given, gets the smallest top-1 minus top-2 logit over the tokens that hold a
// digit.
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
