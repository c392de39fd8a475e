// Tokenizers of GGUF vocabularies: "llama" (SentencePiece-style, llama.cpp's SPM tokenization) and
// "gpt2" (byte-level BPE with a named pre-tokenizer), behind one Tokenizer value.
//
// Promises (SPM, tokenizer.ggml.model = "llama"):
//  - encode() reproduces llama.cpp's llm_tokenizer_spm exactly (llama_tokenize with
//    parse_special = false): spaces become U+2581 ("▁"), one "▁" is prepended when
//    add_space_prefix is set and the text is non-empty, the text is split into UTF-8 characters,
//    adjacent symbols are merged greedily (the pair whose merged text is a vocabulary piece with
//    the highest score first; equal scores: the leftmost pair), and every final symbol that is not
//    a piece is re-split along its merge history, with characters that are no piece falling back to
//    byte tokens <0xXX>. For BPE models trained with byte_fallback this equals SentencePiece's
//    EncodeAsIds on valid UTF-8 (tested against libsentencepiece).
//  - USER_DEFINED pieces are matched literally in the text before the SPM pass (longest first), as
//    llama.cpp does even without parse_special; after such a piece the next text fragment gets the
//    space prefix again (llama.cpp's behaviour). CONTROL and UNKNOWN pieces ("<s>", "<unk>") are
//    parsed from text only with parse_special: otherwise "<s>" in a prompt is '<', 's', '>'.
//  - decode() is the inverse for text that encode() produced: "▁" -> ' ', <0xXX> -> that byte,
//    CONTROL / UNKNOWN / UNUSED tokens emit nothing, USER_DEFINED tokens emit their text, and when
//    add_space_prefix is set the first emitted character is dropped if it is a space (the dummy
//    prefix), wherever the first text-producing token sits (after a BOS too, as SentencePiece
//    decodes; llama.cpp's detokenize keeps that space when the sequence starts with BOS).
//
// Promises (byte-level BPE, tokenizer.ggml.model = "gpt2"; details in src/model/tokenizer_bpe.h
// and bpe_pretokenizer.h):
//  - encode() gives llama.cpp's llama_tokenize ids: special tokens written in the text are split
//    out first (USER_DEFINED always, CONTROL / UNKNOWN only with parse_special; longest text first,
//    leftmost occurrences), every other fragment is cleaned of invalid UTF-8 (each byte that does
//    not begin a well-formed sequence becomes U+FFFD, as llama.cpp does for stray and truncated
//    bytes), pre-tokenized by the regexes tokenizer.ggml.pre names (PCRE2 Unicode classes), and
//    merged by merge rank within each word.
//  - decode() is exact for every text encode() produced from valid UTF-8: NORMAL tokens map back
//    through GPT-2's byte alphabet, USER_DEFINED tokens give their text, CONTROL / UNKNOWN /
//    UNUSED / BYTE tokens give nothing (their text with special = true, CONTROL and UNKNOWN only).
//    llama.cpp's clean_up_tokenization_spaces pass (" ," -> ",") is not applied: it would break
//    the round trip.
//  - add_special (encode's 3-argument form) adds BOS when tokenizer.ggml.add_bos_token is set and
//    EOS when tokenizer.ggml.add_eos_token is set, as llama_tokenize(add_special = true).
//
// Leaves out: "bert", "t5", "rwkv" and other tokenizer models (from_gguf throws naming the
// supported ones); SentencePiece normalization (identity is assumed; invalid UTF-8 is tokenized
// byte by byte by SPM, as llama.cpp does) and Hugging Face normalizers (Qwen's NFC: llama.cpp does
// not apply it either); per-token lstrip / rstrip attributes (llama.cpp sets them only for a few
// named models).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace snapkv::gguf {
class File;
}  // namespace snapkv::gguf

namespace snapkv {
namespace detail {
class BpeEncoder;
}  // namespace detail

using TokenId = int32_t;

// tokenizer.ggml.model: "llama" (SentencePiece-style) or "gpt2" (byte-level BPE).
enum class TokenizerModel { spm, bpe };

// Token types as stored in tokenizer.ggml.token_type (SentencePiece's ModelProto types + 1).
enum class TokenType : int32_t {
  normal = 1,
  unknown = 2,
  control = 3,
  user_defined = 4,
  unused = 5,
  byte = 6,
};

// "normal", "unknown", ...; "invalid" for values outside 1..6.
std::string_view to_string(TokenType type);

// A plain vocabulary value: what a GGUF tokenizer stores. tokens[i], scores[i], types[i]
// describe token id i; the three vectors have the same length n_vocab.
struct Vocab {
  TokenizerModel model = TokenizerModel::spm;
  std::vector<std::string> tokens;  // [n_vocab] piece text (SPM: spaces as U+2581, bytes as
                                    // <0xXX>; BPE: GPT-2's byte alphabet, "Ġ" for a space)
  std::vector<float> scores;        // [n_vocab] SPM merge priority (higher merges first)
  std::vector<TokenType> types;     // [n_vocab]
  std::vector<std::string> merges;  // BPE only: [n_merges] "left right", rank = index
  std::string pre = "default";      // BPE only: tokenizer.ggml.pre
  TokenId bos_id = 1;               // llama.cpp's SPM defaults; -1 = none (BPE only)
  TokenId eos_id = 2;
  TokenId unk_id = 0;
  bool add_bos = true;           // tokenizer.ggml.add_bos_token
  bool add_eos = false;          // tokenizer.ggml.add_eos_token
  bool add_space_prefix = true;  // tokenizer.ggml.add_space_prefix (SPM only)

  // Throws std::invalid_argument "[tokenizer] ..." on: empty vocabulary, vectors of different
  // lengths, an empty or duplicate piece, a non-finite score, a type outside 1..6, a BYTE token not
  // named <0xXX> (two upper-case hex digits), two BYTE tokens for one byte, bos/eos/unk out of
  // range (BPE: -1 allowed, unless add_bos / add_eos needs that token), merges given to an SPM
  // vocabulary or a BPE vocabulary without merges.
  void validate() const;
};

class Tokenizer {
 public:
  // Validates the vocabulary (Vocab::validate) and builds the lookup tables.
  explicit Tokenizer(Vocab vocab);

  // Reads tokenizer.ggml.{model,tokens,scores,token_type,merges,pre,bos_token_id,eos_token_id,
  // unknown_token_id,add_bos_token,add_eos_token,add_space_prefix}. model "llama" and "gpt2" are
  // supported; any other model throws RuntimeError naming both. A missing tokens array (or merges
  // array for "gpt2"), an array whose length differs from tokens (or, when present, from
  // <arch>.vocab_size), a bad element type or an unknown pre-tokenizer throws RuntimeError naming
  // the key. Missing scores default to 0, missing token_type to NORMAL, ids and flags to
  // llama.cpp's defaults (SPM: bos 1, eos 2, unk 0, add_bos; BPE: bos = eos = 11, no unk, add_bos
  // only for the Llama 3 pre-tokenizer).
  static Tokenizer from_gguf(const gguf::File& file);

  // Token ids of `text` (bytes, UTF-8 expected). With add_bos the vocabulary's BOS comes first.
  // The empty text gives {} (or {bos}). Special tokens in the text are not parsed.
  std::vector<TokenId> encode(std::string_view text, bool add_bos) const;
  // Same, with add_bos taken from the vocabulary (tokenizer.ggml.add_bos_token).
  std::vector<TokenId> encode(std::string_view text) const { return encode(text, vocab_.add_bos); }
  // llama_tokenize(text, add_special, parse_special): add_special adds BOS / EOS as the
  // vocabulary's add_bos / add_eos flags say; parse_special turns CONTROL / UNKNOWN token texts
  // written in the text into those tokens.
  std::vector<TokenId> encode(std::string_view text, bool add_special, bool parse_special) const;

  // Text of a whole sequence (see the file comment); with special, CONTROL and UNKNOWN tokens give
  // their text. Throws std::invalid_argument naming the first id outside [0, n_vocab).
  std::string decode(std::span<const TokenId> ids, bool special = false) const;

  // Raw text of one token for streaming output: like decode() but without removing the dummy-prefix
  // space. An SPM BYTE token gives its single byte and a BPE token may end inside a character, so a
  // multi-byte character may span several tokens. Throws std::invalid_argument for an id outside
  // [0, n_vocab).
  std::string token_to_piece(TokenId id, bool special = false) const;

  // End of generation: eos, and the tokens llama.cpp recognises by their text ("<|eot_id|>",
  // "<|im_end|>", "<|endoftext|>", "<|eom_id|>", "<|end|>", "<end_of_turn>", "<EOT>").
  bool is_eog(TokenId id) const;
  // Every end-of-generation id, sorted.
  const std::vector<TokenId>& eog_ids() const { return eog_ids_; }

  // Id of a piece (exact text, spaces as U+2581), or -1 when the vocabulary has no such piece.
  TokenId find(std::string_view piece) const;

  // Byte-fallback token of a byte, as llama.cpp's byte_to_token: the piece "<0xXX>" (upper-case
  // hex), else the one-byte piece holding that byte, else -1. When some byte of a character that
  // is no piece has no fallback, encode() emits unk() once for that character (llama.cpp throws).
  TokenId byte_token(uint8_t byte) const { return byte_to_id_[byte]; }

  const Vocab& vocab() const { return vocab_; }
  TokenizerModel model() const { return vocab_.model; }
  size_t n_vocab() const { return vocab_.tokens.size(); }
  TokenId bos() const { return vocab_.bos_id; }
  TokenId eos() const { return vocab_.eos_id; }
  TokenId unk() const { return vocab_.unk_id; }
  TokenType type(TokenId id) const;  // throws std::invalid_argument for an id out of range

 private:
  void check_id(TokenId id) const;
  void encode_spm(std::string_view text, std::vector<TokenId>& out) const;
  std::vector<TokenId> encode_impl(std::string_view text, bool add_bos, bool add_eos,
                                   bool parse_special) const;

  // Hash for lookups by std::string_view without building a std::string.
  struct PieceHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };

  Vocab vocab_;
  std::unordered_map<std::string, TokenId, PieceHash, std::equal_to<>> piece_to_id_;
  TokenId byte_to_id_[256];
  std::vector<TokenId> special_by_length_;  // CONTROL, USER_DEFINED, UNKNOWN ids, longest first
  std::vector<TokenId> eog_ids_;            // sorted
  // BPE only (shared: the encoder is immutable, and Tokenizer stays cheap to copy).
  std::shared_ptr<const detail::BpeEncoder> bpe_;
  std::vector<std::string> bpe_pieces_;  // [n_vocab] decoded text of NORMAL tokens
};

}  // namespace snapkv
