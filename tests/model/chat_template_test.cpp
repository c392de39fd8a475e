// Chat templates: recognition by family markers, clear errors, and renderings identical to
// Jinja2's (Hugging Face apply_chat_template settings) for the real Llama 3 and Qwen 3 templates
// (read from the committed vocabulary GGUFs) and, from marker snippets, Llama 3.2 / Qwen 2.5 /
// Mistral [INST] (tests/model/data/chat/chat_cases.json, tools/chat_template_cases.py).
#include "snapkv/model/chat_template.h"

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "snapkv/gguf/gguf.h"
#include "snapkv/util/error.h"

namespace snapkv {
namespace {

const std::string kVocabDir = std::string(SNAPKV_VOCAB_DIR) + "/";

nlohmann::json load_cases() {
  std::ifstream in(std::string(SNAPKV_SOURCE_DIR) + "/tests/model/data/chat/chat_cases.json");
  if (!in) throw std::runtime_error("cannot open chat_cases.json");
  std::stringstream ss;
  ss << in.rdbuf();
  return nlohmann::json::parse(ss.str());
}

ChatTemplate from_vocab(const std::string& name) {
  return ChatTemplate::from_gguf(gguf::File::open(kVocabDir + name + "-vocab.gguf"));
}

// The templates of the fixture, by name. Llama 3.2 and Qwen 2.5 come from snippets holding only
// the markers recognise() reads (their full texts are not committed).
std::map<std::string, ChatTemplate> templates(const nlohmann::json& fixture) {
  std::map<std::string, ChatTemplate> t;
  t.emplace("llama3", from_vocab("llama3"));
  t.emplace("qwen3", from_vocab("qwen3"));
  t.emplace("mistral", ChatTemplate::recognise(fixture.at("mistral_template").get<std::string>(),
                                               "<s>", "</s>"));
  t.emplace("llama3.2", ChatTemplate::recognise(
                            "{{- bos_token }}{{- \"<|start_header_id|>system<|end_header_id|>"
                            "\\n\\n\" }}{{- \"Cutting Knowledge Date: December 2023\\n\" }}"
                            "{%- if add_generation_prompt %}{%- endif %}",
                            "<|begin_of_text|>", "<|eot_id|>"));
  t.emplace("qwen2.5", ChatTemplate::recognise(
                           "{%- if messages[0]['role'] == 'system' %}{{- '<|im_start|>system\\n' "
                           "+ messages[0]['content'] + '<|im_end|>\\n' }}{%- else %}{{- "
                           "'<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are "
                           "a helpful assistant.<|im_end|>\\n' }}{%- endif %}",
                           "", "<|im_end|>"));
  return t;
}

TEST(ChatTemplate, RendersLikeJinjaOnEveryFixtureConversation) {
  const auto fixture = load_cases();
  const auto tmpl = templates(fixture);
  size_t checked = 0;
  std::map<std::string, size_t> per_template;
  for (const auto& c : fixture.at("cases")) {
    const std::string name = c.at("template").get<std::string>();
    std::vector<ChatMessage> messages;
    for (const auto& m : c.at("messages")) {
      messages.push_back({m.at("role").get<std::string>(), m.at("content").get<std::string>()});
    }
    ChatOptions options;
    options.add_generation_prompt = c.at("add_generation_prompt").get<bool>();
    if (c.contains("enable_thinking"))
      options.enable_thinking = c.at("enable_thinking").get<bool>();
    const std::string got = tmpl.at(name).render(messages, options);
    EXPECT_EQ(got, c.at("expected").get<std::string>())
        << name << " conversation of " << messages.size() << " messages, generation prompt "
        << options.add_generation_prompt;
    ++checked;
    ++per_template[name];
  }
  EXPECT_GE(checked, 80u);
  for (const char* name : {"llama3", "qwen3", "mistral"})
    EXPECT_GE(per_template[name], 10u) << name;
}

TEST(ChatTemplate, RecognisesFamiliesOfTheRealTemplates) {
  EXPECT_EQ(from_vocab("llama3").family(), ChatFamily::llama3);
  EXPECT_EQ(from_vocab("qwen3").family(), ChatFamily::chatml);
  const auto fixture = load_cases();
  EXPECT_EQ(templates(fixture).at("mistral").family(), ChatFamily::mistral);
  EXPECT_EQ(to_string(ChatFamily::chatml), "chatml");
}

TEST(ChatTemplate, UnrecognisedTemplateIsAClearError) {
  try {
    (void)ChatTemplate::recognise(
        "{% for m in messages %}<start_of_turn>{{ m.content }}{% endfor %}", "", "");
    FAIL() << "no error";
  } catch (const RuntimeError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("[chat] unrecognised tokenizer.chat_template, got '{% for m in messages %}"),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find("expected a Llama 3 (<|start_header_id|>), ChatML / Qwen (<|im_start|>) or "
                       "Mistral ([INST]) template"),
              std::string::npos)
        << msg;
  }
  EXPECT_THROW((void)ChatTemplate::recognise("[SYSTEM_PROMPT] [INST]", "<s>", "</s>"),
               RuntimeError);
  gguf::Writer w;
  w.set_string("tokenizer.ggml.model", "gpt2");
  try {
    (void)ChatTemplate::from_gguf(gguf::File::from_bytes(w.to_bytes()));
    FAIL() << "no error";
  } catch (const RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find("no tokenizer.chat_template"), std::string::npos)
        << e.what();
  }
}

TEST(ChatTemplate, BadConversationsAreRejected) {
  const ChatTemplate llama = from_vocab("llama3");
  const std::vector<ChatMessage> tool = {{"user", "hi"}, {"tool", "{}"}};
  EXPECT_THROW((void)llama.render(tool), std::invalid_argument);
  const auto fixture = load_cases();
  const ChatTemplate mistral = templates(fixture).at("mistral");
  const std::vector<ChatMessage> two_users = {{"user", "a"}, {"user", "b"}};
  EXPECT_THROW((void)mistral.render(two_users), std::invalid_argument);
  const std::vector<ChatMessage> assistant_first = {{"assistant", "a"}};
  EXPECT_THROW((void)mistral.render(assistant_first), std::invalid_argument);
}

TEST(ChatTemplate, TrimFollowsPythonWhiteSpace) {
  const ChatTemplate llama = from_vocab("llama3");
  // U+3000 and U+0085 are stripped by Jinja's trim (Python str.strip); U+200B is not white space.
  const std::vector<ChatMessage> m = {{"user", "\xE3\x80\x80 hi\xC2\x85"},
                                      {"user", "\xE2\x80\x8Bx"}};
  ChatOptions o;
  o.add_generation_prompt = false;
  EXPECT_EQ(llama.render(m, o),
            "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\n\xE2\x80\x8Bx<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

TEST(ChatTemplate, PlainWritesEachContentOnALine) {
  const ChatTemplate t = ChatTemplate::plain("<s>");
  EXPECT_EQ(t.family(), ChatFamily::plain);
  EXPECT_EQ(to_string(ChatFamily::plain), "plain");
  const std::vector<ChatMessage> m = {{"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Yo"}};
  EXPECT_EQ(t.render(m), "<s>Be brief.\nHi\nYo\n");
  EXPECT_EQ(ChatTemplate::plain("").render(std::span(m).subspan(1, 1)), "Hi\n");
  const std::vector<ChatMessage> bad = {{"tool", "x"}};
  EXPECT_THROW((void)t.render(bad), std::invalid_argument);
}

}  // namespace
}  // namespace snapkv
