// The merge pass both tokenizers run over a piece of text: SentencePiece's (tokenizer.cpp, pairs
// ranked by the joined piece's score) and byte-level BPE's (tokenizer_bpe.cpp, pairs ranked by
// merge rank), as llama.cpp's llm_tokenizer_spm and llm_tokenizer_bpe_session do.
//
// Promises: the text is split into UTF-8 characters (a lead byte's announced length, cut at the
// end of the text; continuation and invalid bytes count as one-byte characters, as llama.cpp's
// unicode_len_utf8), then the adjacent pair with the highest priority is merged, again and again,
// until no adjacent pair has one; equal priorities merge the leftmost pair first. The result is
// the final symbols, left to right, as views into the text.
// Leaves out: what a final symbol becomes (a token, byte tokens, unknown): the caller's.
#pragma once

#include <algorithm>
#include <cstddef>
#include <optional>
#include <queue>
#include <string_view>
#include <vector>

namespace snapkv::detail {

// Byte length of the UTF-8 sequence a lead byte announces, by its high nibble.
inline size_t utf8_char_length(unsigned char lead) {
  static constexpr size_t kByHighNibble[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kByHighNibble[lead >> 4];
}

// priority(left, right) -> std::optional<double>: the priority of merging the adjacent symbols
// left and right (higher merges first), nullopt when they may not merge.
template <class Priority>
std::vector<std::string_view> merge_bigrams(std::string_view text, const Priority& priority) {
  // One symbol: a byte range of the text, linked to its live neighbours.
  struct Symbol {
    int prev = -1;
    int next = -1;
    size_t offset = 0;
    size_t n = 0;  // bytes; 0 once merged into its left neighbour
  };
  // A candidate merge of two adjacent symbols.
  struct Bigram {
    int left = 0;
    int right = 0;
    double priority = 0.0;
    size_t size = 0;  // bytes of left + right when the candidate was made
  };
  // Highest priority first; equal priorities: the leftmost pair first (std::priority_queue pops
  // the "largest").
  struct BigramOrder {
    bool operator()(const Bigram& a, const Bigram& b) const {
      return a.priority < b.priority || (a.priority == b.priority && a.left > b.left);
    }
  };

  std::vector<Symbol> symbols;
  symbols.reserve(text.size());
  for (size_t offset = 0; offset < text.size();) {
    Symbol sym;
    sym.offset = offset;
    sym.n =
        std::min(utf8_char_length(static_cast<unsigned char>(text[offset])), text.size() - offset);
    offset += sym.n;
    const int index = static_cast<int>(symbols.size());
    sym.prev = index - 1;
    sym.next = offset == text.size() ? -1 : index + 1;
    symbols.push_back(sym);
  }

  std::priority_queue<Bigram, std::vector<Bigram>, BigramOrder> queue;
  const auto try_add = [&](int left, int right) {
    if (left < 0 || right < 0) return;
    const Symbol& l = symbols[left];
    const Symbol& r = symbols[right];
    const std::optional<double> p =
        priority(text.substr(l.offset, l.n), text.substr(r.offset, r.n));
    if (!p) return;
    queue.push(Bigram{left, right, *p, l.n + r.n});
  };
  for (int i = 1; i < static_cast<int>(symbols.size()); ++i) try_add(i - 1, i);

  while (!queue.empty()) {
    const Bigram bigram = queue.top();
    queue.pop();
    Symbol& left = symbols[bigram.left];
    Symbol& right = symbols[bigram.right];
    // Stale candidate: one side was merged away or grew since the candidate was made.
    if (left.n == 0 || right.n == 0 || left.n + right.n != bigram.size) continue;
    left.n += right.n;
    right.n = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = bigram.left;
    try_add(left.prev, bigram.left);
    try_add(bigram.left, left.next);
  }

  std::vector<std::string_view> pieces;
  for (int i = symbols.empty() ? -1 : 0; i != -1; i = symbols[i].next) {
    pieces.push_back(text.substr(symbols[i].offset, symbols[i].n));
  }
  return pieces;
}

}  // namespace snapkv::detail
