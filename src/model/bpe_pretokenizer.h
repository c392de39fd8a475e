// Pre-tokenizers of GGUF "gpt2" (byte-level BPE) vocabularies, named by tokenizer.ggml.pre, and
// the UTF-8 clean-up that runs before them.
//
// Promises:
//  - BpePreTokenizer(name) knows llama.cpp's names for five regex families: "llama-bpe" (Llama 3;
//    also "llama3", "llama-v3", "falcon3", "dbrx", "smaug-bpe"), "qwen2" (also "deepseek-r1-qwen",
//    "stablelm2", "megrez"), "smollm" (also "starcoder", "refact", "command-r", "codeshell",
//    "exaone", "minerva-7b"), "gpt-2" (also "phi-2", "roberta-bpe", "mpt", "olmo", "jais",
//    "gigachat", "jina-*"), and "default" (also the empty name). Any other name throws
//    RuntimeError listing these.
//  - split(text) applies the family's regexes in order, as llama.cpp's unicode_regex_split does:
//    each regex runs over every piece left by the previous one (a regex never sees past the end of
//    its piece), and both its matches and the text between them become pieces. Unicode classes
//    (\p{L}, \p{N}, \p{P}, \p{Z}) come from PCRE2 (UTF + UCP mode); white space is the Unicode
//    White_Space property written as [\t-\r\x{85}\p{Z}], as llama.cpp's table has it (PCRE2
//    10.42's \s would also take U+180E).
//  - sanitize_utf8 replaces every byte that does not begin a well-formed UTF-8 sequence (RFC 3629:
//    shortest form, no surrogates, at most U+10FFFF) by U+FFFD and resumes at the next byte. For
//    stray continuation bytes, truncated sequences and bytes 0xF8..0xFF this is llama.cpp's
//    unicode_cpts_from_utf8; llama.cpp instead decodes overlong forms (C0 AF -> '/') and
//    surrogates as if they were valid, which snapkv refuses to do.
//
// Leaves out: the other llama.cpp pre-tokenizers (deepseek-*, falcon, chatglm, tekken, bloom,
// chameleon, ...): they throw with the list above. Unicode version: PCRE2's tables (Unicode 14
// for Debian 12's 10.42); llama.cpp's tables are newer, so a character assigned after Unicode 14
// may be classed differently.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace snapkv::detail {

// [offset, length) of one piece, in bytes of the text that was split.
struct TextPiece {
  size_t offset = 0;
  size_t length = 0;
};

class BpePreTokenizer {
 public:
  explicit BpePreTokenizer(std::string_view name);
  ~BpePreTokenizer();
  BpePreTokenizer(const BpePreTokenizer&) = delete;
  BpePreTokenizer& operator=(const BpePreTokenizer&) = delete;

  // text must be valid UTF-8 (see sanitize_utf8). Pieces cover the text in order, none empty.
  std::vector<TextPiece> split(std::string_view text) const;

  // The family the name resolved to: "llama-bpe", "qwen2", "smollm", "gpt-2" or "default".
  const std::string& family() const { return family_; }
  // Llama 3's rule (llama.cpp's ignore_merges): a whole piece that is a token is emitted as is.
  bool ignore_merges() const { return ignore_merges_; }

  // "llama-bpe, qwen2, smollm, gpt-2, default (and their aliases)".
  static std::string supported_names();

 private:
  struct Regex;
  std::string family_;
  bool ignore_merges_ = false;
  std::vector<std::unique_ptr<Regex>> regexes_;
};

// text with each byte that does not begin a well-formed UTF-8 sequence replaced by U+FFFD.
std::string sanitize_utf8(std::string_view text);
// True when every byte of text belongs to a well-formed UTF-8 sequence.
bool is_valid_utf8(std::string_view text);

}  // namespace snapkv::detail
