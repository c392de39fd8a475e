// GGUF tokenizers: vocabulary checks, special-token partition, llama.cpp's SPM encode, dispatch to
// byte-level BPE (tokenizer_bpe.cpp), decode; GGUF loading is in tokenizer_gguf.cpp. Semantics are
// documented in include/snapkv/model/tokenizer.h; this file follows llama.cpp's llm_tokenizer_spm /
// llama_vocab::tokenize / token_to_piece behaviour, written from its description.
#include "snapkv/model/tokenizer.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>
#include <utility>

#include "bigram_merge.h"
#include "snapkv/util/error.h"
#include "tokenizer_bpe.h"

namespace snapkv {
namespace {

constexpr std::string_view kComponent = "tokenizer";
constexpr std::string_view kSpaceMark = "\xE2\x96\x81";  // U+2581 LOWER ONE EIGHTH BLOCK

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

// The byte of a "<0xXX>" piece, or nullopt when the text has another form.
std::optional<uint8_t> parse_byte_piece(std::string_view text) {
  if (text.size() != 6 || text.substr(0, 3) != "<0x" || text[5] != '>') return std::nullopt;
  const int hi = hex_value(text[3]);
  const int lo = hex_value(text[4]);
  if (hi < 0 || lo < 0) return std::nullopt;
  return static_cast<uint8_t>(hi * 16 + lo);
}

std::string byte_piece_name(uint8_t byte) {
  char buf[8];
  std::snprintf(buf, sizeof(buf), "<0x%02X>", static_cast<unsigned>(byte));
  return buf;
}

// Printable rendering of a piece for messages (control bytes escaped, long pieces cut).
std::string quoted(std::string_view text) {
  std::string out = "'";
  for (size_t i = 0; i < text.size() && i < 40; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x20 || c == 0x7F) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02X", static_cast<unsigned>(c));
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  if (text.size() > 40) out += "...";
  out += "'";
  return out;
}

void replace_spaces(std::string_view text, std::string& out) {
  for (char c : text) {
    if (c == ' ') {
      out += kSpaceMark;
    } else {
      out += c;
    }
  }
}

std::string unescape_spaces(std::string_view piece) {
  std::string out;
  out.reserve(piece.size());
  size_t i = 0;
  while (i < piece.size()) {
    if (piece.substr(i, kSpaceMark.size()) == kSpaceMark) {
      out += ' ';
      i += kSpaceMark.size();
    } else {
      out += piece[i];
      ++i;
    }
  }
  return out;
}

}  // namespace

std::string_view to_string(TokenType type) {
  switch (type) {
    case TokenType::normal:
      return "normal";
    case TokenType::unknown:
      return "unknown";
    case TokenType::control:
      return "control";
    case TokenType::user_defined:
      return "user_defined";
    case TokenType::unused:
      return "unused";
    case TokenType::byte:
      return "byte";
  }
  return "invalid";
}

// ---------------------------------------------------------------------------------------------
// Vocab

void Vocab::validate() const {
  const size_t n = tokens.size();
  if (n == 0) throw_invalid(kComponent, "empty vocabulary", "0 tokens", "at least 1");
  if (n > static_cast<size_t>(INT32_MAX)) {
    throw_invalid(kComponent, "vocabulary too large", std::to_string(n), "at most 2^31-1 tokens");
  }
  if (scores.size() != n) {
    throw_invalid(kComponent, "scores length differs from tokens", std::to_string(scores.size()),
                  std::to_string(n));
  }
  if (types.size() != n) {
    throw_invalid(kComponent, "token types length differs from tokens",
                  std::to_string(types.size()), std::to_string(n));
  }
  std::unordered_map<std::string_view, size_t> seen;
  seen.reserve(n);
  std::vector<int> byte_owner(256, -1);
  for (size_t i = 0; i < n; ++i) {
    const std::string id = "token " + std::to_string(i);
    if (tokens[i].empty()) throw_invalid(kComponent, id + " is empty", "''", "a non-empty piece");
    const auto [it, inserted] = seen.emplace(tokens[i], i);
    if (!inserted) {
      throw_invalid(kComponent, id + " duplicates token " + std::to_string(it->second),
                    quoted(tokens[i]), "distinct pieces");
    }
    if (!std::isfinite(scores[i])) {
      throw_invalid(kComponent, id + " score is not finite", std::to_string(scores[i]),
                    "a finite float");
    }
    const auto t = static_cast<int32_t>(types[i]);
    if (t < 1 || t > 6) {
      throw_invalid(kComponent, id + " has an invalid token type", std::to_string(t),
                    "1 (normal) .. 6 (byte)");
    }
    if (types[i] == TokenType::byte) {
      const auto byte = parse_byte_piece(tokens[i]);
      if (!byte) {
        throw_invalid(kComponent, id + " is a BYTE token with a bad name", quoted(tokens[i]),
                      "<0xXX> with two hex digits");
      }
      if (byte_owner[*byte] >= 0) {
        throw_invalid(
            kComponent, id + " is a second BYTE token for one byte", quoted(tokens[i]),
            "one token per byte (first: token " + std::to_string(byte_owner[*byte]) + ")");
      }
      byte_owner[*byte] = static_cast<int>(i);
    }
  }
  const bool bpe = model == TokenizerModel::bpe;
  const auto check_special = [&](const char* name, TokenId value, bool needed) {
    if (bpe && value == -1 && !needed) return;  // BPE vocabularies may lack the token
    if (value < 0 || static_cast<size_t>(value) >= n) {
      throw_invalid(kComponent, std::string(name) + " out of range", std::to_string(value),
                    "0 <= id < " + std::to_string(n) +
                        (bpe ? std::string(needed ? " (add_bos/add_eos needs it)" : " or -1")
                             : std::string()));
    }
  };
  check_special("bos_id", bos_id, add_bos);
  check_special("eos_id", eos_id, add_eos);
  check_special("unk_id", unk_id, false);
  if (bpe && merges.empty()) {
    throw_invalid(kComponent, "BPE vocabulary without merges", "0 merges", "at least 1");
  }
  if (!bpe && !merges.empty()) {
    throw_invalid(kComponent, "merges given to an SPM vocabulary",
                  std::to_string(merges.size()) + " merges", "none (merges are for BPE)");
  }
}

// ---------------------------------------------------------------------------------------------
// Tokenizer: construction

Tokenizer::Tokenizer(Vocab vocab) : vocab_(std::move(vocab)) {
  vocab_.validate();
  const size_t n = vocab_.tokens.size();
  piece_to_id_.reserve(n);
  for (size_t i = 0; i < n; ++i) piece_to_id_.emplace(vocab_.tokens[i], static_cast<TokenId>(i));
  // Byte fallback as llama.cpp's byte_to_token: the piece "<0xXX>" (whatever its type), else the
  // one-byte piece holding that byte, else none.
  for (int b = 0; b < 256; ++b) {
    const auto byte = static_cast<uint8_t>(b);
    TokenId id = find(byte_piece_name(byte));
    if (id < 0) id = find(std::string_view(reinterpret_cast<const char*>(&byte), 1));
    byte_to_id_[b] = id;
  }
  // Special tokens, matched in the text longest first (llama.cpp's cache_special_tokens).
  static constexpr std::string_view kEogTexts[] = {"<|eot_id|>",    "<|im_end|>",    "<|end|>",
                                                   "<end_of_turn>", "<|endoftext|>", "<|eom_id|>",
                                                   "<EOT>"};
  for (size_t i = 0; i < n; ++i) {
    const TokenType t = vocab_.types[i];
    if (t == TokenType::user_defined || t == TokenType::control || t == TokenType::unknown) {
      special_by_length_.push_back(static_cast<TokenId>(i));
    }
    for (const std::string_view eog : kEogTexts) {
      if (vocab_.tokens[i] == eog) eog_ids_.push_back(static_cast<TokenId>(i));
    }
  }
  if (vocab_.eos_id >= 0) eog_ids_.push_back(vocab_.eos_id);
  std::sort(eog_ids_.begin(), eog_ids_.end());
  eog_ids_.erase(std::unique(eog_ids_.begin(), eog_ids_.end()), eog_ids_.end());
  std::stable_sort(special_by_length_.begin(), special_by_length_.end(), [&](TokenId a, TokenId b) {
    return vocab_.tokens[a].size() > vocab_.tokens[b].size();
  });

  if (vocab_.model == TokenizerModel::bpe) {
    bpe_ = std::make_shared<const detail::BpeEncoder>(vocab_.pre, vocab_.merges);
    bpe_pieces_.resize(n);
    for (size_t i = 0; i < n; ++i) {
      if (vocab_.types[i] != TokenType::normal) continue;
      // A NORMAL token outside the byte alphabet (none in real vocabularies) decodes as its text.
      auto bytes = detail::byte_level_decode(vocab_.tokens[i]);
      bpe_pieces_[i] = bytes ? std::move(*bytes) : vocab_.tokens[i];
    }
  }
}

bool Tokenizer::is_eog(TokenId id) const {
  return std::binary_search(eog_ids_.begin(), eog_ids_.end(), id);
}

TokenId Tokenizer::find(std::string_view piece) const {
  const auto it = piece_to_id_.find(piece);
  return it == piece_to_id_.end() ? -1 : it->second;
}

void Tokenizer::check_id(TokenId id) const {
  if (id < 0 || static_cast<size_t>(id) >= vocab_.tokens.size()) {
    throw_invalid(kComponent, "token id out of range", std::to_string(id),
                  "0 <= id < " + std::to_string(vocab_.tokens.size()));
  }
}

TokenType Tokenizer::type(TokenId id) const {
  check_id(id);
  return vocab_.types[id];
}

// ---------------------------------------------------------------------------------------------
// Encode

void Tokenizer::encode_spm(std::string_view text, std::vector<TokenId>& out) const {
  // text: already escaped (spaces as U+2581, dummy prefix added by the caller). Two symbols merge
  // when their joined text is a piece, highest piece score first.
  const auto score = [&](std::string_view left, std::string_view right) -> std::optional<double> {
    const TokenId id = find(std::string_view(left.data(), left.size() + right.size()));
    if (id < 0) return std::nullopt;
    return vocab_.scores[id];
  };
  // Every merged symbol is a piece (merges only make pieces), so a final symbol is either a piece
  // or one unmerged character that is not: llama.cpp's rev_merge re-split never applies to the
  // latter, which falls back to one byte token per byte.
  for (const std::string_view piece : detail::merge_bigrams(text, score)) {
    const TokenId id = find(piece);
    if (id >= 0) {
      out.push_back(id);
      continue;
    }
    const bool all_bytes = std::all_of(piece.begin(), piece.end(), [&](char c) {
      return byte_to_id_[static_cast<unsigned char>(c)] >= 0;
    });
    if (!all_bytes) {  // no byte fallback in this vocabulary: one unknown token per character
      out.push_back(vocab_.unk_id);
      continue;
    }
    for (char c : piece) out.push_back(byte_to_id_[static_cast<unsigned char>(c)]);
  }
}

std::vector<TokenId> Tokenizer::encode(std::string_view text, bool add_bos) const {
  return encode_impl(text, add_bos, false, false);
}

std::vector<TokenId> Tokenizer::encode(std::string_view text, bool add_special,
                                       bool parse_special) const {
  return encode_impl(text, add_special && vocab_.add_bos, add_special && vocab_.add_eos,
                     parse_special);
}

std::vector<TokenId> Tokenizer::encode_impl(std::string_view text, bool add_bos, bool add_eos,
                                            bool parse_special) const {
  // Symbols are indexed by int (as in llama.cpp); the escaped text grows by at most 3x + 3 bytes.
  if (text.size() > static_cast<size_t>(INT32_MAX) / 4) {
    throw_invalid(kComponent, "text too long to encode", std::to_string(text.size()) + " bytes",
                  "at most " + std::to_string(INT32_MAX / 4) + " bytes");
  }
  if (add_bos && vocab_.bos_id < 0) {
    throw_invalid(kComponent, "BOS requested but the vocabulary has none", "bos_id -1",
                  "a vocabulary with tokenizer.ggml.bos_token_id");
  }
  if (add_eos && vocab_.eos_id < 0) {
    throw_invalid(kComponent, "EOS requested but the vocabulary has none", "eos_id -1",
                  "a vocabulary with tokenizer.ggml.eos_token_id");
  }
  // Fragments: raw text ranges and special tokens matched literally (longest piece first,
  // leftmost occurrences), as llama.cpp's tokenizer_st_partition. USER_DEFINED tokens are always
  // matched; CONTROL and UNKNOWN ones only with parse_special.
  struct Fragment {
    TokenId token = -1;  // >= 0: a matched special token
    size_t offset = 0;
    size_t length = 0;
  };
  std::vector<Fragment> fragments;
  if (!text.empty()) fragments.push_back({-1, 0, text.size()});
  for (const TokenId special : special_by_length_) {
    if (!parse_special && vocab_.types[special] != TokenType::user_defined) continue;
    const std::string& piece = vocab_.tokens[special];
    std::vector<Fragment> split;
    split.reserve(fragments.size() + 2);
    for (const Fragment& f : fragments) {
      if (f.token >= 0) {
        split.push_back(f);
        continue;
      }
      const size_t end = f.offset + f.length;
      size_t pos = f.offset;
      while (pos < end) {
        const size_t match = text.substr(0, end).find(piece, pos);
        if (match == std::string_view::npos) break;
        if (match > pos) split.push_back({-1, pos, match - pos});
        split.push_back({special, match, piece.size()});
        pos = match + piece.size();
      }
      if (pos < end) split.push_back({-1, pos, end - pos});
    }
    fragments = std::move(split);
  }

  std::vector<TokenId> out;
  out.reserve(text.size() / 2 + 2);
  if (add_bos) out.push_back(vocab_.bos_id);
  bool previous_was_special = true;  // the first fragment gets the dummy prefix
  std::string escaped;
  const auto find_piece = [this](std::string_view piece) { return find(piece); };
  for (const Fragment& f : fragments) {
    if (f.token >= 0) {
      out.push_back(f.token);
      previous_was_special = true;
      continue;
    }
    if (bpe_) {
      bpe_->encode_fragment(text.substr(f.offset, f.length), find_piece, out);
      continue;
    }
    escaped.clear();
    escaped.reserve(f.length + 8);
    if (vocab_.add_space_prefix && previous_was_special) escaped += kSpaceMark;
    replace_spaces(text.substr(f.offset, f.length), escaped);
    encode_spm(escaped, out);
    previous_was_special = false;
  }
  if (add_eos) out.push_back(vocab_.eos_id);
  return out;
}

// ---------------------------------------------------------------------------------------------
// Decode

std::string Tokenizer::token_to_piece(TokenId id, bool special) const {
  check_id(id);
  const std::string& text = vocab_.tokens[id];
  const bool bpe = vocab_.model == TokenizerModel::bpe;
  switch (vocab_.types[id]) {
    case TokenType::normal:
      return bpe ? bpe_pieces_[id] : unescape_spaces(text);
    case TokenType::byte:  // llama.cpp gives nothing for a BYTE token of a BPE vocabulary
      return bpe ? std::string() : std::string(1, static_cast<char>(*parse_byte_piece(text)));
    case TokenType::user_defined:
      return text;
    case TokenType::unknown:
    case TokenType::control:
      return special ? text : std::string();
    case TokenType::unused:
      return {};
  }
  return {};
}

std::string Tokenizer::decode(std::span<const TokenId> ids, bool special) const {
  for (const TokenId id : ids) check_id(id);
  std::string out;
  bool first_text = vocab_.model == TokenizerModel::spm;
  for (const TokenId id : ids) {
    std::string piece = token_to_piece(id, special);
    if (piece.empty()) continue;
    if (first_text && vocab_.add_space_prefix && piece.front() == ' ') piece.erase(0, 1);
    first_text = false;
    out += piece;
  }
  return out;
}

}  // namespace snapkv
