// Tokenizer::from_gguf: a tokenizer from a GGUF file's tokenizer.ggml.* keys (vocabulary, scores,
// token types, merges, special tokens; include/snapkv/model/tokenizer.h).
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "snapkv/gguf/gguf.h"
#include "snapkv/model/tokenizer.h"
#include "snapkv/util/error.h"

namespace snapkv {
namespace {

constexpr std::string_view kComponent = "tokenizer";

// Integer array elements of `key` as int64 (token_type is i32 in llama.cpp's files; accept any
// integer element type).
std::vector<int64_t> integer_array(const gguf::Value& value, std::string_view key) {
  std::vector<int64_t> out;
  bool ok = false;
  std::visit(
      [&](const auto& v) {
        using V = std::decay_t<decltype(v)>;
        if constexpr (requires { typename V::value_type; } && !std::is_same_v<V, std::string>) {
          using E = typename V::value_type;
          if constexpr (std::is_integral_v<E> && !std::is_same_v<E, bool>) {
            out.reserve(v.size());
            for (const auto e : v) out.push_back(static_cast<int64_t>(e));
            ok = true;
          }
        }
      },
      value.storage());
  if (!ok) {
    throw_runtime(kComponent, "key '" + std::string(key) + "' has the wrong type",
                  value.is_array()
                      ? "array of " + std::string(gguf::value_type_name(value.array_type()))
                      : std::string(gguf::value_type_name(value.type())),
                  "an array of integers");
  }
  return out;
}

TokenId special_id(const gguf::File& file, std::string_view key, TokenId fallback) {
  if (!file.has_key(key)) return fallback;
  const int64_t id = static_cast<int64_t>(file.get_u32_or(key, static_cast<uint32_t>(fallback)));
  if (id > INT32_MAX) {
    throw_runtime(kComponent, "key '" + std::string(key) + "' out of range", std::to_string(id),
                  "a token id");
  }
  return static_cast<TokenId>(id);
}

}  // namespace

Tokenizer Tokenizer::from_gguf(const gguf::File& file) {
  const std::string model = file.get_string("tokenizer.ggml.model");
  if (model != "llama" && model != "gpt2") {
    throw_runtime(kComponent, "tokenizer.ggml.model not supported", "'" + model + "'",
                  "'llama' (SentencePiece-style) or 'gpt2' (byte-level BPE)");
  }
  const bool bpe = model == "gpt2";
  Vocab vocab;
  vocab.tokens = file.get_string_array("tokenizer.ggml.tokens");
  const size_t n = vocab.tokens.size();
  const auto check_length = [&](std::string_view key, size_t got) {
    if (got != n) {
      throw_runtime(kComponent, "key '" + std::string(key) + "' length differs from tokens",
                    std::to_string(got), std::to_string(n));
    }
  };
  if (file.has_key("tokenizer.ggml.scores")) {
    const auto scores = file.get_f32_array("tokenizer.ggml.scores");
    check_length("tokenizer.ggml.scores", scores.size());
    vocab.scores.assign(scores.begin(), scores.end());
  } else {
    vocab.scores.assign(n, 0.0f);
  }
  if (const gguf::Value* types = file.find("tokenizer.ggml.token_type")) {
    const auto values = integer_array(*types, "tokenizer.ggml.token_type");
    check_length("tokenizer.ggml.token_type", values.size());
    vocab.types.reserve(n);
    for (size_t i = 0; i < n; ++i) {
      if (values[i] < 1 || values[i] > 6) {
        throw_runtime(kComponent, "tokenizer.ggml.token_type[" + std::to_string(i) + "] invalid",
                      std::to_string(values[i]), "1 (normal) .. 6 (byte)");
      }
      vocab.types.push_back(static_cast<TokenType>(values[i]));
    }
  } else {
    vocab.types.assign(n, TokenType::normal);
  }
  const std::string arch = file.get_string_or("general.architecture", "");
  if (!arch.empty() && file.has_key(arch + ".vocab_size")) {
    check_length(arch + ".vocab_size", file.get_u64(arch + ".vocab_size"));
  }
  if (bpe) {
    // llama.cpp's defaults for "gpt2" vocabularies; add_bos only for the Llama 3 pre-tokenizer.
    vocab.model = TokenizerModel::bpe;
    vocab.merges = file.get_string_array("tokenizer.ggml.merges");
    vocab.pre = file.get_string_or("tokenizer.ggml.pre", "default");
    vocab.bos_id = 11;
    vocab.eos_id = 11;
    vocab.unk_id = -1;
    vocab.add_bos = vocab.pre == "llama-bpe" || vocab.pre == "llama3" || vocab.pre == "llama-v3" ||
                    vocab.pre == "falcon3";
  }
  vocab.bos_id = special_id(file, "tokenizer.ggml.bos_token_id", vocab.bos_id);
  vocab.eos_id = special_id(file, "tokenizer.ggml.eos_token_id", vocab.eos_id);
  vocab.unk_id = special_id(file, "tokenizer.ggml.unknown_token_id", vocab.unk_id);
  vocab.add_bos = file.get_bool_or("tokenizer.ggml.add_bos_token", vocab.add_bos);
  vocab.add_eos = file.get_bool_or("tokenizer.ggml.add_eos_token", false);
  vocab.add_space_prefix = file.get_bool_or("tokenizer.ggml.add_space_prefix", !bpe);
  try {
    return Tokenizer(std::move(vocab));
  } catch (const std::invalid_argument& e) {
    // Bad content of a file is a RuntimeError; keep the precise message.
    throw RuntimeError(std::string(e.what()) + " (in the GGUF tokenizer.ggml.* keys)");
  }
}

}  // namespace snapkv
