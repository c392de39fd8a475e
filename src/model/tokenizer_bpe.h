// Byte-level BPE (GGUF tokenizer.ggml.model = "gpt2"): the merge pass and the byte <-> text
// mapping, as llama.cpp's llm_tokenizer_bpe_session does; used by Tokenizer (tokenizer.h), which
// handles special tokens, BOS/EOS and decoding.
//
// Promises:
//  - encode_fragment(text): invalid UTF-8 bytes become U+FFFD (sanitize_utf8), the pre-tokenizer
//    splits the text into words, each word's bytes are mapped to GPT-2's printable byte alphabet,
//    and within each word adjacent symbols are merged by merge rank (lowest rank first; equal
//    ranks: leftmost pair first). With ignore_merges (Llama 3) a word that is a whole token is
//    emitted as that token without merging. A final symbol that is not a token is emitted as the
//    tokens of its single bytes that exist (llama.cpp's behaviour; real vocabularies hold every
//    byte, so nothing is lost).
//  - byte_level_decode(token text) inverts the byte alphabet; nullopt when the text holds a
//    character outside it.
//
// Leaves out: BPE dropout, continuing-subword prefixes and end-of-word suffixes (not used by
// byte-level GGUF vocabularies).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "bpe_pretokenizer.h"
#include "snapkv/model/tokenizer.h"

namespace snapkv::detail {

class BpeEncoder {
 public:
  // merges: "left right" in rank order (rank = index). Throws std::invalid_argument for a merge
  // without a separating space or with an empty side, RuntimeError for an unknown pre-tokenizer.
  BpeEncoder(std::string_view pre, const std::vector<std::string>& merges);

  // Appends the ids of one raw text fragment (no special tokens inside). find(piece) -> id or -1.
  void encode_fragment(std::string_view text, const std::function<TokenId(std::string_view)>& find,
                       std::vector<TokenId>& out) const;

  const BpePreTokenizer& pre_tokenizer() const { return pre_; }
  size_t n_merges() const { return ranks_.size(); }

 private:
  struct KeyHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  int rank(std::string_view left, std::string_view right, std::string& key) const;
  void merge_word(std::string_view word, const std::function<TokenId(std::string_view)>& find,
                  std::vector<TokenId>& out) const;

  BpePreTokenizer pre_;
  std::unordered_map<std::string, int, KeyHash, std::equal_to<>> ranks_;  // "left right" -> rank
};

// GPT-2's byte alphabet: the printable character standing for each byte, UTF-8 encoded.
const std::string& byte_level_char(unsigned char byte);
// Bytes of a byte-level token text, or nullopt when a character is outside the alphabet.
std::optional<std::string> byte_level_decode(std::string_view token_text);

}  // namespace snapkv::detail
