// PCRE2-based pre-tokenizers for byte-level BPE; see bpe_pretokenizer.h. The patterns are the ones
// the models' tokenizer.json files publish, in the form llama.cpp runs them ((?i:'s|...) spelled
// out as '[sS]|..., so that PCRE2's case folding cannot take "'ſ" for "'s"), with \s and \S
// written as the White_Space class.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "bpe_pretokenizer.h"

#include <pcre2.h>

#include <array>

#include "snapkv/util/error.h"

namespace snapkv::detail {
namespace {

constexpr std::string_view kComponent = "tokenizer";

// Unicode White_Space: TAB..CR, NEL and the separators (Zs, Zl, Zp).
#define SNAPKV_WS "\\t-\\r\\x{85}\\p{Z}"
#define SNAPKV_S "[" SNAPKV_WS "]"
#define SNAPKV_NOT_S "[^" SNAPKV_WS "]"

constexpr const char* kGpt2 = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" SNAPKV_WS
                              "\\p{L}\\p{N}]+|" SNAPKV_S "+(?!" SNAPKV_NOT_S ")";

constexpr const char* kLlama3 =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
    "\\p{N}{1,3}| ?[^" SNAPKV_WS "\\p{L}\\p{N}]+[\\r\\n]*|" SNAPKV_S "*[\\r\\n]+|" SNAPKV_S
    "+(?!" SNAPKV_NOT_S ")|" SNAPKV_S "+";

constexpr const char* kQwen2 =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
    "\\p{N}| ?[^" SNAPKV_WS "\\p{L}\\p{N}]+[\\r\\n]*|" SNAPKV_S "*[\\r\\n]+|" SNAPKV_S
    "+(?!" SNAPKV_NOT_S ")|" SNAPKV_S "+";

struct Family {
  const char* name;
  std::vector<const char*> aliases;
  std::vector<const char*> patterns;
  bool ignore_merges;
};

const std::vector<Family>& families() {
  static const std::vector<Family> all = {
      {"llama-bpe", {"llama-bpe", "llama3", "llama-v3", "falcon3"}, {kLlama3}, true},
      // Same regex as Llama 3, without the whole-word shortcut.
      {"llama-bpe", {"dbrx", "smaug-bpe"}, {kLlama3}, false},
      {"qwen2", {"qwen2", "deepseek-r1-qwen", "stablelm2", "megrez"}, {kQwen2}, false},
      {"smollm",
       {"smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva-7b"},
       {"\\p{N}", kGpt2},
       false},
      {"gpt-2",
       {"gpt-2", "phi-2", "roberta-bpe", "mpt", "olmo", "jais", "gigachat", "jina-es", "jina-de",
        "jina-v1-en", "jina-v2-es", "jina-v2-de", "jina-v2-code"},
       {kGpt2},
       false},
      {"default",
       {"default", ""},
       {"[\\p{P}\\$\\+<=>\\^~\\|]+", kGpt2, "\\p{N}+", "[0-9][0-9][0-9]"},
       false},
  };
  return all;
}

}  // namespace

struct BpePreTokenizer::Regex {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Regex() { pcre2_code_free(code); }
};

std::string BpePreTokenizer::supported_names() {
  return "'llama-bpe' (or llama3, llama-v3, falcon3, dbrx, smaug-bpe), 'qwen2' (or "
         "deepseek-r1-qwen, stablelm2, megrez), 'smollm' (or starcoder, refact, command-r, "
         "codeshell, exaone, minerva-7b), 'gpt-2' (or phi-2, roberta-bpe, mpt, olmo, jais, "
         "gigachat, jina-*), 'default'";
}

BpePreTokenizer::BpePreTokenizer(std::string_view name) {
  const Family* found = nullptr;
  for (const Family& f : families()) {
    for (const char* alias : f.aliases) {
      if (name == alias) found = &f;
    }
  }
  if (found == nullptr) {
    throw_runtime(kComponent, "tokenizer.ggml.pre names an unsupported pre-tokenizer",
                  "'" + std::string(name) + "'", supported_names());
  }
  family_ = found->name;
  ignore_merges_ = found->ignore_merges;
  for (const char* pattern : found->patterns) {
    auto regex = std::make_unique<Regex>();
    int error = 0;
    PCRE2_SIZE error_offset = 0;
    regex->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern), PCRE2_ZERO_TERMINATED,
                                PCRE2_UTF | PCRE2_UCP, &error, &error_offset, nullptr);
    if (regex->code == nullptr) {
      std::array<PCRE2_UCHAR, 256> message{};
      pcre2_get_error_message(error, message.data(), message.size());
      throw_runtime(kComponent, "PCRE2 rejected a pre-tokenizer pattern",
                    std::string(pattern) + " (" + reinterpret_cast<const char*>(message.data()) +
                        " at " + std::to_string(error_offset) + ")",
                    "a valid pattern (is libpcre2 built with Unicode support?)");
    }
    regex->jit = pcre2_jit_compile(regex->code, PCRE2_JIT_COMPLETE) == 0;
    regexes_.push_back(std::move(regex));
  }
}

BpePreTokenizer::~BpePreTokenizer() = default;

std::vector<TextPiece> BpePreTokenizer::split(std::string_view text) const {
  std::vector<TextPiece> pieces;
  if (text.empty()) return pieces;
  pieces.push_back({0, text.size()});
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  for (const auto& regex : regexes_) {
    std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> match(
        pcre2_match_data_create_from_pattern(regex->code, nullptr), &pcre2_match_data_free);
    if (!match) throw std::bad_alloc();
    std::vector<TextPiece> next;
    next.reserve(pieces.size() * 2);
    for (const TextPiece& piece : pieces) {
      // Match inside the piece only: the subject ends where the piece ends.
      const PCRE2_SPTR begin = subject + piece.offset;
      size_t done = 0;  // bytes of the piece already emitted
      size_t start = 0;
      while (start < piece.length) {
        const int rc = regex->jit ? pcre2_jit_match(regex->code, begin, piece.length, start,
                                                    PCRE2_NO_UTF_CHECK, match.get(), nullptr)
                                  : pcre2_match(regex->code, begin, piece.length, start,
                                                PCRE2_NO_UTF_CHECK, match.get(), nullptr);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
          std::array<PCRE2_UCHAR, 256> message{};
          pcre2_get_error_message(rc, message.data(), message.size());
          throw_runtime(kComponent, "PCRE2 match failed",
                        reinterpret_cast<const char*>(message.data()), "a match or no match");
        }
        const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match.get());
        const size_t m_begin = ovector[0];
        const size_t m_end = ovector[1];
        if (m_end == m_begin) {  // the patterns never match empty text; step over one character
          start = m_end + 1;
          while (start < piece.length &&
                 (static_cast<unsigned char>(begin[start]) & 0xC0) == 0x80) {
            ++start;
          }
          continue;
        }
        if (m_begin > done) next.push_back({piece.offset + done, m_begin - done});
        next.push_back({piece.offset + m_begin, m_end - m_begin});
        done = m_end;
        start = m_end;
      }
      if (done < piece.length) next.push_back({piece.offset + done, piece.length - done});
    }
    pieces = std::move(next);
  }
  return pieces;
}

namespace {

// Length of the well-formed UTF-8 sequence at text[i], or 0 when the byte does not begin one.
size_t well_formed_length(std::string_view text, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char lead = byte(i);
  if (lead < 0x80) return 1;
  size_t n = 0;
  unsigned char lo = 0x80;
  unsigned char hi = 0xBF;  // allowed range of the second byte
  if (lead >= 0xC2 && lead <= 0xDF) {
    n = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    n = 3;
    if (lead == 0xE0) lo = 0xA0;  // no overlong forms
    if (lead == 0xED) hi = 0x9F;  // no surrogates
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    n = 4;
    if (lead == 0xF0) lo = 0x90;
    if (lead == 0xF4) hi = 0x8F;  // at most U+10FFFF
  } else {
    return 0;
  }
  if (i + n > text.size()) return 0;
  if (byte(i + 1) < lo || byte(i + 1) > hi) return 0;
  for (size_t k = 2; k < n; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
  }
  return n;
}

}  // namespace

bool is_valid_utf8(std::string_view text) {
  for (size_t i = 0; i < text.size();) {
    const size_t n = well_formed_length(text, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::string sanitize_utf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const size_t n = well_formed_length(text, i);
    if (n == 0) {
      out += "\xEF\xBF\xBD";  // U+FFFD
      ++i;
    } else {
      out.append(text.substr(i, n));
      i += n;
    }
  }
  return out;
}

}  // namespace snapkv::detail
