// Byte-level BPE tokenizer tests: ids identical to a reference tokenizer on every fixture string
// (tests/model/data/bpe/*_cases.json, recorded by tools/bpe_reference_ids.mjs from the Hugging Face
// tokenizers of Llama 3 and Qwen 3 and checked against llama.cpp), exact round trips, special
// tokens parsed only when asked, BOS/EOS flags, invalid UTF-8, and the pre-tokenizer and UTF-8
// helpers on their own. The vocabularies are the real ones (tests/model/data/vocab/*.tar.xz,
// unpacked by CMake into SNAPKV_VOCAB_DIR).
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "model/bpe_pretokenizer.h"
#include "model/tokenizer_bpe.h"
#include "snapkv/gguf/gguf.h"
#include "snapkv/model/tokenizer.h"
#include "snapkv/util/error.h"

namespace snapkv {
namespace {

const std::string kVocabDir = std::string(SNAPKV_VOCAB_DIR) + "/";
const std::string kCaseDir = std::string(SNAPKV_SOURCE_DIR) + "/tests/model/data/bpe/";

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// One tokenizer per vocabulary for the whole run (loading 128k tokens and 280k merges is the
// slow part).
const Tokenizer& vocab_tokenizer(const std::string& name) {
  static std::map<std::string, std::unique_ptr<Tokenizer>> cache;
  auto& slot = cache[name];
  if (!slot) {
    const gguf::File file = gguf::File::open(kVocabDir + name + "-vocab.gguf");
    slot = std::make_unique<Tokenizer>(Tokenizer::from_gguf(file));
  }
  return *slot;
}

std::string from_hex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    out += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
  }
  return out;
}

std::string printable(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (c < 0x20 || c == 0x7F) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02X", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

std::string ids_text(const std::vector<TokenId>& ids) {
  std::string out = "[";
  for (size_t i = 0; i < ids.size(); ++i) out += (i ? ", " : "") + std::to_string(ids[i]);
  return out + "]";
}

struct Case {
  std::string cat;
  std::string input;     // bytes given to encode
  std::string expected;  // text decode() must give back (input with invalid bytes as U+FFFD)
  std::vector<TokenId> ids;
  std::vector<TokenId> ids_special;
};

std::vector<Case> load_cases(const std::string& file) {
  const auto json = nlohmann::json::parse(read_file(kCaseDir + file));
  std::vector<Case> cases;
  for (const auto& c : json) {
    Case k;
    k.cat = c.at("cat").get<std::string>();
    k.expected = c.at("text").get<std::string>();
    k.input = c.contains("hex") ? from_hex(c.at("hex").get<std::string>()) : k.expected;
    k.ids = c.at("ids").get<std::vector<TokenId>>();
    k.ids_special =
        c.contains("ids_special") ? c.at("ids_special").get<std::vector<TokenId>>() : k.ids;
    cases.push_back(std::move(k));
  }
  return cases;
}

// Tokenizer of `vocab` with another pre-tokenizer (Llama 3's vocabulary under gpt-2 / smollm /
// default rules).
const Tokenizer& with_pre(const std::string& vocab, const std::string& pre) {
  static std::map<std::string, std::unique_ptr<Tokenizer>> cache;
  auto& slot = cache[vocab + "/" + pre];
  if (!slot) {
    Vocab v = vocab_tokenizer(vocab).vocab();
    v.pre = pre;
    slot = std::make_unique<Tokenizer>(std::move(v));
  }
  return *slot;
}

struct FixtureParam {
  const char* vocab;
  const char* pre;  // nullptr: the vocabulary's own
  const char* file;
  size_t min_cases;
};

class BpeFixture : public ::testing::TestWithParam<FixtureParam> {
 protected:
  const Tokenizer& tok() const {
    const auto& p = GetParam();
    return p.pre ? with_pre(p.vocab, p.pre) : vocab_tokenizer(p.vocab);
  }
};

TEST_P(BpeFixture, IdsMatchReferenceOnEveryCase) {
  const auto cases = load_cases(GetParam().file);
  ASSERT_GE(cases.size(), GetParam().min_cases);
  size_t bad = 0;
  for (const Case& c : cases) {
    const auto plain = tok().encode(c.input, false, false);
    const auto special = tok().encode(c.input, false, true);
    if (plain != c.ids || special != c.ids_special) {
      if (++bad <= 10) {
        ADD_FAILURE() << c.cat << " '" << printable(c.input) << "'\n  plain   got "
                      << ids_text(plain) << "\n          want " << ids_text(c.ids)
                      << "\n  special got " << ids_text(special) << "\n          want "
                      << ids_text(c.ids_special);
      }
    }
  }
  EXPECT_EQ(bad, 0u) << "of " << cases.size() << " cases";
}

TEST_P(BpeFixture, DecodeInvertsEncode) {
  const auto cases = load_cases(GetParam().file);
  size_t bad = 0;
  for (const Case& c : cases) {
    const std::string plain = tok().decode(tok().encode(c.input, false, false));
    const std::string special = tok().decode(tok().encode(c.input, false, true), true);
    if (plain != c.expected || special != c.expected) {
      if (++bad <= 10) {
        ADD_FAILURE() << c.cat << " '" << printable(c.input) << "' decoded to '" << printable(plain)
                      << "' / '" << printable(special) << "'";
      }
    }
  }
  EXPECT_EQ(bad, 0u) << "of " << cases.size() << " cases";
}

INSTANTIATE_TEST_SUITE_P(
    Vocabularies, BpeFixture,
    ::testing::Values(FixtureParam{"llama3", nullptr, "llama3_cases.json", 2000},
                      FixtureParam{"qwen3", nullptr, "qwen3_cases.json", 2000},
                      FixtureParam{"llama3", "gpt-2", "llama3_pre_gpt-2_cases.json", 500},
                      FixtureParam{"llama3", "smollm", "llama3_pre_smollm_cases.json", 500},
                      FixtureParam{"llama3", "default", "llama3_pre_default_cases.json", 500}),
    [](const auto& param_info) {
      std::string name = std::string(param_info.param.vocab) + "_" +
                         (param_info.param.pre ? param_info.param.pre : "own");
      for (char& c : name) {
        if (c == '-') c = '_';
      }
      return name;
    });

// ---------------------------------------------------------------------------------------------
// Special tokens, BOS / EOS, end of generation

TEST(BpeTokenizer, GgufKeysAreRead) {
  const Tokenizer& l3 = vocab_tokenizer("llama3");
  EXPECT_EQ(l3.model(), TokenizerModel::bpe);
  EXPECT_EQ(l3.n_vocab(), 128256u);
  EXPECT_EQ(l3.vocab().pre, "llama-bpe");
  EXPECT_EQ(l3.vocab().merges.size(), 280147u);
  EXPECT_EQ(l3.bos(), 128000);
  EXPECT_TRUE(l3.vocab().add_bos);
  EXPECT_EQ(l3.type(128009), TokenType::control);
  const Tokenizer& q3 = vocab_tokenizer("qwen3");
  EXPECT_EQ(q3.n_vocab(), 151936u);
  EXPECT_EQ(q3.vocab().pre, "qwen2");
  EXPECT_FALSE(q3.vocab().add_bos);
  EXPECT_EQ(q3.eos(), 151645);
  EXPECT_EQ(q3.type(151667), TokenType::user_defined);  // <think>
  EXPECT_EQ(q3.type(151659), TokenType::control);       // <|fim_prefix|> looks special
  EXPECT_EQ(q3.type(151700), TokenType::unused);        // [PAD151700]
}

TEST(BpeTokenizer, AddSpecialFollowsTheVocabularyFlags) {
  const Tokenizer& l3 = vocab_tokenizer("llama3");
  EXPECT_EQ(l3.encode("Hello", true, false), (std::vector<TokenId>{128000, 9906}));
  EXPECT_EQ(l3.encode("Hello", false, false), (std::vector<TokenId>{9906}));
  EXPECT_EQ(l3.encode("", true, false), (std::vector<TokenId>{128000}));
  EXPECT_EQ(l3.encode("", false, false), (std::vector<TokenId>{}));
  const Tokenizer& q3 = vocab_tokenizer("qwen3");
  EXPECT_EQ(q3.encode("Hello", true, false), (std::vector<TokenId>{9707}));  // add_bos false
  Vocab v = q3.vocab();
  v.add_eos = true;
  const Tokenizer with_eos(std::move(v));
  EXPECT_EQ(with_eos.encode("Hello", true, false), (std::vector<TokenId>{9707, 151645}));
  EXPECT_EQ(with_eos.encode("Hello", false, false), (std::vector<TokenId>{9707}));
}

TEST(BpeTokenizer, ControlTokensAreParsedOnlyWhenAsked) {
  const Tokenizer& l3 = vocab_tokenizer("llama3");
  const auto off = l3.encode("<|eot_id|>", false, false);
  EXPECT_GT(off.size(), 1u);
  EXPECT_EQ(l3.decode(off), "<|eot_id|>");
  EXPECT_EQ(l3.encode("<|eot_id|>", false, true), (std::vector<TokenId>{128009}));
  EXPECT_EQ(l3.encode("a<|eot_id|>b", false, true), (std::vector<TokenId>{64, 128009, 65}));
  // Control tokens decode to nothing unless asked.
  EXPECT_EQ(l3.decode(std::vector<TokenId>{64, 128009, 65}), "ab");
  EXPECT_EQ(l3.decode(std::vector<TokenId>{64, 128009, 65}, true), "a<|eot_id|>b");
  EXPECT_EQ(l3.token_to_piece(128009), "");
  EXPECT_EQ(l3.token_to_piece(128009, true), "<|eot_id|>");

  const Tokenizer& q3 = vocab_tokenizer("qwen3");
  // USER_DEFINED <think> is always split out, CONTROL <|im_start|> only with parse_special.
  EXPECT_EQ(q3.encode("<think>", false, false), (std::vector<TokenId>{151667}));
  EXPECT_EQ(q3.encode("<|im_start|>", false, true), (std::vector<TokenId>{151644}));
  EXPECT_GT(q3.encode("<|im_start|>", false, false).size(), 1u);
}

TEST(BpeTokenizer, EndOfGenerationTokens) {
  const Tokenizer& l3 = vocab_tokenizer("llama3");
  EXPECT_TRUE(l3.is_eog(128001));  // eos <|end_of_text|>
  EXPECT_TRUE(l3.is_eog(128009));  // <|eot_id|>
  EXPECT_FALSE(l3.is_eog(128000));
  EXPECT_FALSE(l3.is_eog(9906));
  const Tokenizer& q3 = vocab_tokenizer("qwen3");
  EXPECT_TRUE(q3.is_eog(151645));  // <|im_end|>
  EXPECT_TRUE(q3.is_eog(151643));  // <|endoftext|>
  EXPECT_FALSE(q3.is_eog(151644));
}

// ---------------------------------------------------------------------------------------------
// Invalid UTF-8 and the byte alphabet

TEST(BpeTokenizer, InvalidUtf8BytesBecomeReplacementCharacters) {
  const Tokenizer& l3 = vocab_tokenizer("llama3");
  const std::string fffd = "\xEF\xBF\xBD";
  EXPECT_EQ(l3.encode("a\xFF"
                      "b",
                      false, false),
            l3.encode("a" + fffd + "b", false, false));
  EXPECT_EQ(l3.encode("\xE2\x82", false, false), l3.encode(fffd + fffd, false, false));
  EXPECT_EQ(l3.decode(l3.encode("x\xC0\xAFy", false, false)), "x" + fffd + fffd + "y");
}

// Arbitrary bytes (mostly invalid UTF-8): never a crash, and decode(encode(x)) is x with each
// invalid byte replaced by U+FFFD, for both vocabularies and with special parsing on.
TEST(BpeTokenizer, RandomBytesRoundTripThroughTheReplacementRule) {
  std::mt19937 rng(7);
  for (const char* name : {"llama3", "qwen3"}) {
    const Tokenizer& tok = vocab_tokenizer(name);
    for (int trial = 0; trial < 400; ++trial) {
      std::string bytes(rng() % 48, '\0');
      for (char& c : bytes) {
        const auto r = static_cast<uint32_t>(rng());
        // Bias towards lead and continuation bytes so that sequences form and break.
        c = static_cast<char>(r % 4 == 0   ? 0x80 + (r >> 8) % 0x40
                              : r % 4 == 1 ? 0xC0 + (r >> 8) % 0x40
                                           : (r >> 8) % 0x100);
      }
      const std::string expected = detail::sanitize_utf8(bytes);
      ASSERT_EQ(tok.decode(tok.encode(bytes, false, false)), expected)
          << name << " trial " << trial;
      ASSERT_EQ(tok.decode(tok.encode(bytes, false, true), true), expected) << name;
    }
  }
}

TEST(BpeHelpers, SanitizeUtf8ReplacesEachBadByte) {
  using detail::sanitize_utf8;
  const std::string r = "\xEF\xBF\xBD";
  EXPECT_EQ(sanitize_utf8("plain \xC3\xA9 \xF0\x9F\xA6\x99"), "plain \xC3\xA9 \xF0\x9F\xA6\x99");
  EXPECT_EQ(sanitize_utf8("\x80"), r);
  EXPECT_EQ(sanitize_utf8("\xE2\x82"
                          "a"),
            r + r + "a");                                       // truncated
  EXPECT_EQ(sanitize_utf8("\xC0\xAF"), r + r);                  // overlong
  EXPECT_EQ(sanitize_utf8("\xED\xA0\x80"), r + r + r);          // surrogate
  EXPECT_EQ(sanitize_utf8("\xF4\x90\x80\x80"), r + r + r + r);  // above U+10FFFF
  EXPECT_EQ(sanitize_utf8(std::string("\0a", 2)), std::string("\0a", 2));
  EXPECT_TRUE(detail::is_valid_utf8("\xF4\x8F\xBF\xBF"));
  EXPECT_FALSE(detail::is_valid_utf8("\xF5\x80\x80\x80"));
}

TEST(BpeHelpers, ByteAlphabetRoundTripsEveryByte) {
  std::string all;
  std::string encoded;
  for (int b = 0; b < 256; ++b) {
    all += static_cast<char>(b);
    encoded += detail::byte_level_char(static_cast<unsigned char>(b));
  }
  EXPECT_EQ(detail::byte_level_char(' '), "\xC4\xA0");   // "Ġ"
  EXPECT_EQ(detail::byte_level_char('\n'), "\xC4\x8A");  // "Ċ"
  EXPECT_EQ(detail::byte_level_char('a'), "a");
  EXPECT_EQ(detail::byte_level_decode(encoded), all);
  EXPECT_FALSE(detail::byte_level_decode("\xE4\xB8\xAD").has_value());  // 中 is no alphabet char
}

// ---------------------------------------------------------------------------------------------
// Pre-tokenizers on their own

std::vector<std::string> words(const detail::BpePreTokenizer& pre, const std::string& text) {
  std::vector<std::string> out;
  for (const auto& piece : pre.split(text)) out.push_back(text.substr(piece.offset, piece.length));
  return out;
}

using Words = std::vector<std::string>;

TEST(BpePreTokenizer, SplitsAsTheNamedRegexes) {
  const detail::BpePreTokenizer llama3("llama-bpe");
  EXPECT_TRUE(llama3.ignore_merges());
  EXPECT_EQ(words(llama3, "Hello world, it's 12345!"),
            (Words{"Hello", " world", ",", " it", "'s", " ", "123", "45", "!"}));
  EXPECT_EQ(words(llama3, "a  \n\n b"), (Words{"a", "  \n\n", " b"}));
  // White space is Unicode's White_Space: U+3000 is, U+180E (a format character) is not.
  EXPECT_EQ(words(llama3, "x\xE3\x80\x80y"), (Words{"x", "\xE3\x80\x80y"}));
  EXPECT_EQ(words(llama3, "x\xE1\xA0\x8Ey"), (Words{"x", "\xE1\xA0\x8Ey"}));
  EXPECT_EQ(words(llama3, "'\xC5\xBF"), (Words{"'\xC5\xBF"}));  // "'ſ" is not "'s"
  const detail::BpePreTokenizer qwen2("qwen2");
  EXPECT_FALSE(qwen2.ignore_merges());
  EXPECT_EQ(words(qwen2, "x 2024"), (Words{"x", " ", "2", "0", "2", "4"}));
  const detail::BpePreTokenizer gpt2("gpt-2");
  EXPECT_EQ(words(gpt2, "x 2024 ab"), (Words{"x", " 2024", " ab"}));
  const detail::BpePreTokenizer smollm("smollm");
  EXPECT_EQ(words(smollm, "x 24 ab"), (Words{"x", " ", "2", "4", " ab"}));
  const detail::BpePreTokenizer fallback("default");
  EXPECT_EQ(words(fallback, "ab 12345"), (Words{"ab", " ", "123", "45"}));
  EXPECT_EQ(words(fallback, ""), Words{});
}

TEST(BpePreTokenizer, AliasesResolveToTheirFamily) {
  EXPECT_EQ(detail::BpePreTokenizer("llama3").family(), "llama-bpe");
  EXPECT_TRUE(detail::BpePreTokenizer("llama-v3").ignore_merges());
  EXPECT_FALSE(detail::BpePreTokenizer("dbrx").ignore_merges());  // Llama 3's regex only
  EXPECT_EQ(detail::BpePreTokenizer("deepseek-r1-qwen").family(), "qwen2");
  EXPECT_EQ(detail::BpePreTokenizer("starcoder").family(), "smollm");
  EXPECT_EQ(detail::BpePreTokenizer("roberta-bpe").family(), "gpt-2");
  EXPECT_EQ(detail::BpePreTokenizer("").family(), "default");
}

TEST(BpePreTokenizer, UnknownNameIsAClearError) {
  try {
    detail::BpePreTokenizer pre("tekken");
    FAIL() << "no error";
  } catch (const RuntimeError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("[tokenizer] tokenizer.ggml.pre names an unsupported pre-tokenizer, got "
                       "'tekken', expected 'llama-bpe'"),
              std::string::npos)
        << msg;
  }
}

// ---------------------------------------------------------------------------------------------
// Vocabulary checks for BPE

Vocab tiny_bpe() {
  Vocab v;
  v.model = TokenizerModel::bpe;
  v.tokens = {"a", "b", "ab", "<|end|>"};
  v.scores.assign(4, 0.0f);
  v.types = {TokenType::normal, TokenType::normal, TokenType::normal, TokenType::control};
  v.merges = {"a b"};
  v.pre = "gpt-2";
  v.bos_id = -1;
  v.eos_id = 3;
  v.unk_id = -1;
  v.add_bos = false;
  return v;
}

TEST(BpeTokenizer, TinyVocabularyMergesAndChecks) {
  const Tokenizer tok(tiny_bpe());
  EXPECT_EQ(tok.encode("abab", false, false), (std::vector<TokenId>{2, 2}));
  EXPECT_EQ(tok.encode("ba", false, false), (std::vector<TokenId>{1, 0}));
  EXPECT_THROW(tok.encode("a", true), std::invalid_argument);  // no BOS in this vocabulary
  {
    Vocab v = tiny_bpe();
    v.merges.clear();
    EXPECT_THROW(Tokenizer{v}, std::invalid_argument);
  }
  {
    Vocab v = tiny_bpe();
    v.merges = {"ab"};
    EXPECT_THROW(Tokenizer{v}, std::invalid_argument);
  }
  {
    Vocab v = tiny_bpe();
    v.add_bos = true;  // needs a BOS
    EXPECT_THROW(Tokenizer{v}, std::invalid_argument);
  }
  {
    Vocab v = tiny_bpe();
    v.pre = "no-such-pre";
    EXPECT_THROW(Tokenizer{v}, RuntimeError);
  }
}

TEST(BpeTokenizer, GgufWithoutMergesIsRejected) {
  gguf::Writer w;
  w.set_string("tokenizer.ggml.model", "gpt2");
  w.set_string("tokenizer.ggml.pre", "gpt-2");
  w.set_string_array("tokenizer.ggml.tokens", {"a", "b"});
  const auto bytes = w.to_bytes();
  try {
    (void)Tokenizer::from_gguf(gguf::File::from_bytes(bytes));
    FAIL() << "no error";
  } catch (const RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer.ggml.merges"), std::string::npos) << e.what();
  }
}

// llama.cpp's own test strings and ids for its GPT-2 vocabulary (models/ggml-vocab-gpt-2.gguf +
// .inp/.out), when a llama.cpp checkout is named by SNAPKV_LLAMA_CPP_DIR (not committed here).
TEST(BpeTokenizer, LlamaCppGpt2VocabTestFiles) {
  const char* dir = std::getenv("SNAPKV_LLAMA_CPP_DIR");
  if (dir == nullptr) GTEST_SKIP() << "set SNAPKV_LLAMA_CPP_DIR to a llama.cpp checkout";
  const std::string base = std::string(dir) + "/models/ggml-vocab-gpt-2.gguf";
  const Tokenizer tok = Tokenizer::from_gguf(gguf::File::open(base));
  const std::string inp = read_file(base + ".inp");
  const std::string out = read_file(base + ".out");
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> texts;
  for (size_t pos = 0, next; (next = inp.find(sep, pos)) != std::string::npos;
       pos = next + sep.size()) {
    texts.push_back(inp.substr(pos, next - pos));
  }
  std::istringstream lines(out);
  std::string line;
  size_t i = 0;
  for (; i < texts.size() && std::getline(lines, line); ++i) {
    std::vector<TokenId> want;
    std::istringstream ids(line);
    for (TokenId id; ids >> id;) want.push_back(id);
    EXPECT_EQ(tok.encode(texts[i], false, false), want) << "'" << printable(texts[i]) << "'";
    EXPECT_EQ(tok.decode(tok.encode(texts[i], false, false)), texts[i]);
  }
  EXPECT_EQ(i, texts.size());
  EXPECT_GT(i, 40u);
}

}  // namespace
}  // namespace snapkv
