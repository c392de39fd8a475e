// Tokenizer for GGUF "llama" vocabularies (SentencePiece-style): llama.cpp's SPM tokenization.
//
// Promises:
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
//    never parsed from text: "<s>" in a prompt is the characters '<', 's', '>'.
//  - decode() is the inverse for text that encode() produced: "▁" -> ' ', <0xXX> -> that byte,
//    CONTROL / UNKNOWN / UNUSED tokens emit nothing, USER_DEFINED tokens emit their text, and when
//    add_space_prefix is set the first emitted character is dropped if it is a space (the dummy
//    prefix), wherever the first text-producing token sits (after a BOS too, as SentencePiece
//    decodes; llama.cpp's detokenize keeps that space when the sequence starts with BOS).
//
// Leaves out: GGUF "gpt2" (byte-level BPE with merges), "bert", "t5" and other tokenizer models
// (from_gguf throws "not supported yet"); SentencePiece normalization (the models this project
// trains use identity normalization; invalid UTF-8 is tokenized byte by byte, as llama.cpp does,
// where SentencePiece would substitute U+FFFD); EOS appending (callers append eos() if they want
// it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace snapkv::gguf {
class File;
}  // namespace snapkv::gguf

namespace snapkv {

using TokenId = int32_t;

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

// A plain vocabulary value: what a GGUF "llama" tokenizer stores. tokens[i], scores[i], types[i]
// describe token id i; the three vectors have the same length n_vocab.
struct Vocab {
  std::vector<std::string> tokens;  // [n_vocab] piece text, spaces as U+2581, bytes as <0xXX>
  std::vector<float> scores;        // [n_vocab] merge priority (higher merges first)
  std::vector<TokenType> types;     // [n_vocab]
  TokenId bos_id = 1;               // llama.cpp's SPM defaults
  TokenId eos_id = 2;
  TokenId unk_id = 0;
  bool add_bos = true;           // tokenizer.ggml.add_bos_token
  bool add_space_prefix = true;  // tokenizer.ggml.add_space_prefix

  // Throws std::invalid_argument "[tokenizer] ..." on: empty vocabulary, vectors of different
  // lengths, an empty or duplicate piece, a non-finite score, a type outside 1..6, a BYTE token not
  // named <0xXX> (two upper-case hex digits), two BYTE tokens for one byte, bos/eos/unk out of
  // range.
  void validate() const;
};

class Tokenizer {
 public:
  // Validates the vocabulary (Vocab::validate) and builds the lookup tables.
  explicit Tokenizer(Vocab vocab);

  // Reads tokenizer.ggml.{model,tokens,scores,token_type,bos_token_id,eos_token_id,
  // unknown_token_id,add_bos_token,add_space_prefix}. model "llama" is supported; "gpt2" and any
  // other model throw RuntimeError "[tokenizer] tokenizer.ggml.model ... not supported yet". A
  // missing tokens array, a scores/token_type array whose length differs from tokens (or, when
  // present, from llama.vocab_size), or a bad element type throws RuntimeError naming the key.
  // Missing scores default to 0, missing token_type to NORMAL, ids and flags to Vocab's defaults.
  static Tokenizer from_gguf(const gguf::File& file);

  // Token ids of `text` (bytes, UTF-8 expected). With add_bos the vocabulary's BOS comes first.
  // The empty text gives {} (or {bos}).
  std::vector<TokenId> encode(std::string_view text, bool add_bos) const;
  // Same, with add_bos taken from the vocabulary (tokenizer.ggml.add_bos_token).
  std::vector<TokenId> encode(std::string_view text) const { return encode(text, vocab_.add_bos); }

  // Text of a whole sequence (see the file comment). Throws std::invalid_argument naming the first
  // id outside [0, n_vocab).
  std::string decode(std::span<const TokenId> ids) const;

  // Raw text of one token for streaming output: like decode() but without removing the dummy-prefix
  // space. A BYTE token gives its single byte, so a multi-byte character may span several tokens.
  // Throws std::invalid_argument for an id outside [0, n_vocab).
  std::string token_to_piece(TokenId id) const;

  // Id of a piece (exact text, spaces as U+2581), or -1 when the vocabulary has no such piece.
  TokenId find(std::string_view piece) const;

  // Byte-fallback token of a byte, as llama.cpp's byte_to_token: the piece "<0xXX>" (upper-case
  // hex), else the one-byte piece holding that byte, else -1. When some byte of a character that
  // is no piece has no fallback, encode() emits unk() once for that character (llama.cpp throws).
  TokenId byte_token(uint8_t byte) const { return byte_to_id_[byte]; }

  const Vocab& vocab() const { return vocab_; }
  size_t n_vocab() const { return vocab_.tokens.size(); }
  TokenId bos() const { return vocab_.bos_id; }
  TokenId eos() const { return vocab_.eos_id; }
  TokenId unk() const { return vocab_.unk_id; }
  TokenType type(TokenId id) const;  // throws std::invalid_argument for an id out of range

 private:
  void check_id(TokenId id) const;
  void encode_spm(std::string_view text, std::vector<TokenId>& out) const;

  // Hash for lookups by std::string_view without building a std::string.
  struct PieceHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };

  Vocab vocab_;
  std::unordered_map<std::string, TokenId, PieceHash, std::equal_to<>> piece_to_id_;
  TokenId byte_to_id_[256];
  std::vector<TokenId> user_defined_by_length_;  // USER_DEFINED ids, longest text first
};

}  // namespace snapkv
