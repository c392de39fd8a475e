// ChatSession: multi-turn chat in one LlamaSession, on the shipped tiny model with a chat template
// added (chat_model_util.h).
#include "snapkv/model/chat_session.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "chat_model_util.h"
#include "snapkv/gguf/gguf.h"
#include "snapkv/model/llama.h"
#include "snapkv/model/random_model.h"
#include "snapkv/model/tokenizer.h"
#include "snapkv/util/error.h"

namespace snapkv {
namespace {

struct ChatFixture {
  LlamaModel model;
  Tokenizer tokenizer;
  ChatTemplate chat_template;

  explicit ChatFixture(std::string_view tmpl)
      : model(gguf::File::from_bytes(testing::tiny_model_with_template(tmpl))),
        tokenizer(Tokenizer::from_gguf(model.file())),
        chat_template(ChatTemplate::from_gguf(model.file())) {}

  std::vector<int32_t> tokenize_render(const std::vector<ChatMessage>& messages) const {
    return tokenizer.encode(chat_template.render(messages), false, true);
  }
};

// A small budget that the first turns already pass, re-selected every 4 appended tokens.
CacheConfig small_budget_config() {
  CacheConfig c;
  c.budget = 48;
  c.window = 8;
  c.n_sink = 4;
  c.kernel = 5;
  c.decode_budget = 48;
  c.decode_interval = 4;
  return c;
}

const std::vector<std::string> kTurns = {
    "The pass key is 71432. Remember it, please, and tell me when I ask for it later on.",
    "What is the capital of France? Answer with one word.",
    "Now tell me the pass key that I gave you at the start of this conversation.",
    "Thank you. Goodbye."};

// The conversation without its last reply: what the cache holds once the last user turn and the
// generation prompt were appended.
std::vector<ChatMessage> without_last_reply(const std::vector<ChatMessage>& messages) {
  std::vector<ChatMessage> m = messages;
  EXPECT_EQ(m.back().role, "assistant");
  m.pop_back();
  return m;
}

class ChatSessionFamilies : public ::testing::TestWithParam<std::string_view> {};

// Without replies the token history must equal the tokenized render of the whole conversation
// after every turn: each turn appended exactly the rendered delta.
TEST_P(ChatSessionFamilies, HistoryIsTheTokenizedFullRender) {
  const ChatFixture f(GetParam());
  ChatSession chat(f.model, f.tokenizer, f.chat_template, small_budget_config(), {}, {},
                   "You are a helpful assistant.");
  size_t previous = 0;
  for (const std::string& user : kTurns) {
    const ChatTurn turn = chat.send(user, 0);
    EXPECT_TRUE(turn.canonical);
    EXPECT_TRUE(turn.generated.empty());
    EXPECT_EQ(turn.stop, ChatStop::max_tokens);
    const std::vector<int32_t> expected = f.tokenize_render(without_last_reply(chat.messages()));
    EXPECT_EQ(chat.history(), expected);
    EXPECT_EQ(chat.session()->n_past(), expected.size());
    EXPECT_EQ(turn.fed.size(), expected.size() - previous);
    previous = expected.size();
  }
  EXPECT_EQ(chat.messages().size(), 1 + 2 * kTurns.size());
  EXPECT_EQ(chat.messages().front().role, "system");
}

INSTANTIATE_TEST_SUITE_P(Templates, ChatSessionFamilies,
                         ::testing::Values(testing::kMistralTemplate, testing::kChatmlTemplate,
                                           testing::kLlama3Template));

// With replies: the budget holds after every turn (compressions happen), the cache holds every
// token of the history, and a turn appends either the exact continuation of the tokenized render
// (canonical) or the close of the reply followed by the render of the new user turn.
// Counts the later turns of each kind (canonical / boundary) over a 4-turn chat with replies.
void check_budget_case(std::string_view tmpl, size_t& canonical_turns, size_t& boundary_turns) {
  const ChatFixture f(tmpl);
  const CacheConfig config = small_budget_config();
  ChatSession chat(f.model, f.tokenizer, f.chat_template, config, {}, {});
  size_t replies = 0;
  for (const std::string& user : kTurns) {
    const std::vector<int32_t> before = chat.history();
    const ChatTurn turn = chat.send(user, 6);
    replies += turn.generated.size();
    EXPECT_LE(turn.generated.size(), 6u);
    const LlamaSession& session = *chat.session();
    EXPECT_EQ(session.n_past(), chat.history().size());
    for (const LayerCache& cache : session.caches()) {
      for (size_t h = 0; h < cache.dims().n_kv_heads; ++h) {
        EXPECT_LE(cache.size(h), config.budget) << "layer " << cache.layer_index();
      }
    }
    // The user turn's tokens come first in the history after `before`.
    ASSERT_GE(chat.history().size(), before.size() + turn.fed.size());
    EXPECT_TRUE(std::equal(before.begin(), before.end(), chat.history().begin()));
    EXPECT_TRUE(std::equal(turn.fed.begin(), turn.fed.end(),
                           chat.history().begin() + static_cast<std::ptrdiff_t>(before.size())));
    if (!before.empty() && !turn.canonical) {
      ++boundary_turns;
      // The delta ends with the render of the new user turn, from its header on.
      const std::string full = f.chat_template.render(without_last_reply(chat.messages()));
      const std::string header =
          f.chat_template.family() == ChatFamily::llama3   ? "<|start_header_id|>user"
          : f.chat_template.family() == ChatFamily::chatml ? "<|im_start|>user"
                                                           : "[INST]";
      const std::string tail = full.substr(full.rfind(header));
      const std::string fed_text = f.tokenizer.decode(turn.fed, true);
      ASSERT_GE(fed_text.size(), tail.size());
      EXPECT_EQ(fed_text.substr(fed_text.size() - tail.size()), tail);
    }
    if (!before.empty() && turn.canonical) ++canonical_turns;
    if (turn.canonical) {
      // Up to the generation prompt, the cache holds the tokenized full render.
      const std::vector<int32_t> expected = f.tokenize_render(without_last_reply(chat.messages()));
      EXPECT_TRUE(std::equal(expected.begin(), expected.end(), chat.history().begin()));
    }
  }
  EXPECT_GT(replies, 0u);
  size_t reselections = 0;
  for (const LayerCache& cache : chat.session()->caches()) {
    reselections += cache.decode_reselections();
  }
  EXPECT_GT(reselections, 0u) << "the chat never passed the budget: the test proves nothing";
}

TEST(ChatSession, BudgetHoldsAcrossTurnsWithReplies) {
  size_t canonical_turns = 0, boundary_turns = 0;
  check_budget_case(testing::kChatmlTemplate, canonical_turns, boundary_turns);
  check_budget_case(testing::kMistralTemplate, canonical_turns, boundary_turns);
  check_budget_case(testing::kLlama3Template, canonical_turns, boundary_turns);
  // Both ways of appending a turn after a reply run (checked: with ChatML this model's greedy
  // replies re-tokenize to themselves; they end in spaces, which the Llama 3 template trims).
  EXPECT_GT(canonical_turns, 0u);
  EXPECT_GT(boundary_turns, 0u);
}

#ifdef SNAPKV_VOCAB_DIR
// A random-weight model of the vocabulary's size with a real vocabulary and its real chat template
// (tokenizer.* keys of tests/model/data/vocab/*.gguf: byte-level BPE, special tokens such as
// "<|eot_id|>" and "<|im_end|>" parsed from the render).
std::vector<uint8_t> random_model_with_vocab(const std::string& vocab_path) {
  const gguf::File vocab = gguf::File::open(vocab_path);
  RandomModelSpec spec;
  spec.n_layers = 1;
  spec.n_embd = 32;
  spec.n_heads = 2;
  spec.n_kv_heads = 1;
  spec.n_ff = 32;
  spec.n_vocab = vocab.get_string_array("tokenizer.ggml.tokens").size();
  spec.n_ctx = 4096;
  const gguf::File model = make_random_model(spec);
  gguf::Writer w;
  for (const gguf::KeyValue& kv : model.metadata()) w.set(kv.key, kv.value);
  for (const gguf::KeyValue& kv : vocab.metadata()) {
    if (kv.key.rfind("tokenizer.", 0) == 0) w.set(kv.key, kv.value);
  }
  for (const gguf::TensorInfo& t : model.tensors()) {
    w.add_tensor(t.name, t.type, t.ne, std::span<const uint8_t>(t.data, t.n_bytes), true);
  }
  return w.to_bytes();
}

class ChatSessionRealVocab : public ::testing::TestWithParam<const char*> {};

// The real Llama 3 and Qwen 3 templates: without replies the history is the tokenized render of
// the whole conversation; with replies every turn still lands in the cache.
TEST_P(ChatSessionRealVocab, HistoryIsTheTokenizedFullRender) {
  const LlamaModel model(gguf::File::from_bytes(
      random_model_with_vocab(std::string(SNAPKV_VOCAB_DIR) + "/" + GetParam())));
  const Tokenizer tokenizer = Tokenizer::from_gguf(model.file());
  const ChatTemplate tmpl = ChatTemplate::from_gguf(model.file());
  ChatSession chat(model, tokenizer, tmpl, small_budget_config(), {}, {}, "Be brief.");
  for (const std::string& user : kTurns) {
    const ChatTurn turn = chat.send(user, 0);
    EXPECT_TRUE(turn.canonical);
    const std::vector<int32_t> expected =
        tokenizer.encode(tmpl.render(without_last_reply(chat.messages())), false, true);
    EXPECT_EQ(chat.history(), expected);
  }
  // The turn markers are single special tokens, not text.
  const int32_t marker = tmpl.family() == ChatFamily::llama3 ? tokenizer.find("<|eot_id|>")
                                                             : tokenizer.find("<|im_end|>");
  ASSERT_GE(marker, 0);
  EXPECT_NE(std::find(chat.history().begin(), chat.history().end(), marker), chat.history().end());

  ChatSession replies(model, tokenizer, tmpl, small_budget_config(), {}, {});
  for (const std::string& user : kTurns) {
    const ChatTurn turn = replies.send(user, 4);
    EXPECT_EQ(replies.session()->n_past(), replies.history().size());
    for (const LayerCache& cache : replies.session()->caches()) EXPECT_LE(cache.size(), 48u);
  }
}

INSTANTIATE_TEST_SUITE_P(Vocabs, ChatSessionRealVocab,
                         ::testing::Values("llama3-vocab.gguf", "qwen3-vocab.gguf"));
#endif

TEST(ChatSession, ContextOverflowIsAnErrorAndLeavesTheSession) {
  const ChatFixture f(testing::kChatmlTemplate);
  ChatSession chat(f.model, f.tokenizer, f.chat_template, small_budget_config(), {}, {});
  chat.send("hello", 0);
  const std::vector<int32_t> before = chat.history();
  const std::string huge(f.model.config().n_ctx * 2, 'x');
  EXPECT_THROW(chat.send(huge, 0), std::invalid_argument);
  EXPECT_EQ(chat.history(), before);
  EXPECT_EQ(chat.session()->n_past(), before.size());
  EXPECT_THROW(chat.send("", 0), std::invalid_argument);
  EXPECT_THROW(chat.send(" \n ", 0), std::invalid_argument);
}

TEST(ChatSession, ModelWithoutTemplateIsANamedError) {
  const LlamaModel model(gguf::File::from_bytes(testing::tiny_model_with_template("")));
  try {
    (void)ChatTemplate::from_gguf(model.file());
    FAIL() << "no error";
  } catch (const RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find("no tokenizer.chat_template"), std::string::npos);
  }
}

}  // namespace
}  // namespace snapkv
