// Byte-level BPE merge pass and byte alphabet; see tokenizer_bpe.h. Follows the behaviour of
// llama.cpp's llm_tokenizer_bpe_session, written from its description.
#include "tokenizer_bpe.h"

#include <algorithm>
#include <array>

#include "bigram_merge.h"
#include "snapkv/util/error.h"

namespace snapkv::detail {
namespace {

constexpr std::string_view kComponent = "tokenizer";

std::string utf8_of(uint32_t cpt) {
  std::string out;
  if (cpt < 0x80) {
    out += static_cast<char>(cpt);
  } else if (cpt < 0x800) {
    out += static_cast<char>(0xC0 | (cpt >> 6));
    out += static_cast<char>(0x80 | (cpt & 0x3F));
  } else {  // the alphabet stays below U+0800
    out += static_cast<char>(0xE0 | (cpt >> 12));
    out += static_cast<char>(0x80 | ((cpt >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cpt & 0x3F));
  }
  return out;
}

// GPT-2's bytes_to_unicode: bytes that are printable Latin-1 ('!'..'~', U+00A1..U+00AC,
// U+00AE..U+00FF) stand for themselves; the others, in byte order, take U+0100, U+0101, ...
struct ByteAlphabet {
  std::array<std::string, 256> to_char;
  std::array<int, 512> to_byte;  // code point -> byte, -1 when none
  ByteAlphabet() {
    to_byte.fill(-1);
    uint32_t next = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      const uint32_t cpt = printable ? b : next++;
      to_char[b] = utf8_of(cpt);
      to_byte[cpt] = static_cast<int>(b);
    }
  }
};

const ByteAlphabet& alphabet() {
  static const ByteAlphabet a;
  return a;
}

}  // namespace

const std::string& byte_level_char(unsigned char byte) {
  return alphabet().to_char[byte];
}

std::optional<std::string> byte_level_decode(std::string_view token_text) {
  std::string out;
  out.reserve(token_text.size());
  for (size_t i = 0; i < token_text.size();) {
    const auto lead = static_cast<unsigned char>(token_text[i]);
    uint32_t cpt = 0;
    size_t n = 0;
    if (lead < 0x80) {
      cpt = lead;
      n = 1;
    } else if ((lead & 0xE0) == 0xC0 && i + 1 < token_text.size() &&
               (static_cast<unsigned char>(token_text[i + 1]) & 0xC0) == 0x80) {
      cpt = ((lead & 0x1Fu) << 6) | (static_cast<unsigned char>(token_text[i + 1]) & 0x3Fu);
      n = 2;
    } else {
      return std::nullopt;  // the alphabet is U+0021..U+0143: one or two bytes
    }
    if (cpt >= alphabet().to_byte.size() || alphabet().to_byte[cpt] < 0) return std::nullopt;
    out += static_cast<char>(alphabet().to_byte[cpt]);
    i += n;
  }
  return out;
}

BpeEncoder::BpeEncoder(std::string_view pre, const std::vector<std::string>& merges) : pre_(pre) {
  ranks_.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const std::string& merge = merges[i];
    // As llama.cpp: the separator is the first space after the first byte.
    const size_t space = merge.size() > 1 ? merge.find(' ', 1) : std::string::npos;
    if (space == std::string::npos || space + 1 >= merge.size()) {
      throw_invalid(kComponent, "merge " + std::to_string(i) + " is not 'left right'",
                    "'" + merge.substr(0, 40) + "'", "two non-empty pieces separated by a space");
    }
    // A repeated merge keeps its first (lowest) rank.
    ranks_.emplace(merge, static_cast<int>(i));
  }
}

int BpeEncoder::rank(std::string_view left, std::string_view right, std::string& key) const {
  key.assign(left);
  key += ' ';
  key.append(right);
  const auto it = ranks_.find(std::string_view(key));
  return it == ranks_.end() ? -1 : it->second;
}

void BpeEncoder::merge_word(std::string_view word,
                            const std::function<TokenId(std::string_view)>& find,
                            std::vector<TokenId>& out) const {
  if (pre_.ignore_merges()) {
    const TokenId whole = find(word);
    if (whole >= 0) {
      out.push_back(whole);
      return;
    }
  }
  // Two symbols merge when "left right" is a merge, lowest rank first.
  std::string key;
  const auto rank_of = [&](std::string_view left, std::string_view right) -> std::optional<double> {
    const int rk = rank(left, right, key);
    if (rk < 0) return std::nullopt;
    return -static_cast<double>(rk);
  };
  for (const std::string_view piece : merge_bigrams(word, rank_of)) {
    const TokenId id = find(piece);
    if (id >= 0) {
      out.push_back(id);
      continue;
    }
    for (size_t k = 0; k < piece.size(); ++k) {
      const TokenId byte_id = find(piece.substr(k, 1));
      if (byte_id >= 0) out.push_back(byte_id);
    }
  }
}

void BpeEncoder::encode_fragment(std::string_view text,
                                 const std::function<TokenId(std::string_view)>& find,
                                 std::vector<TokenId>& out) const {
  const std::string clean = sanitize_utf8(text);
  std::string word;
  for (const TextPiece& piece : pre_.split(clean)) {
    word.clear();
    for (size_t i = piece.offset; i < piece.offset + piece.length; ++i) {
      word += byte_level_char(static_cast<unsigned char>(clean[i]));
    }
    merge_word(word, find, out);
  }
}

}  // namespace snapkv::detail
