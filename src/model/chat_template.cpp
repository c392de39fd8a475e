// Chat-template recognition and rendering; see include/snapkv/model/chat_template.h. The rendering
// rules are read off the templates' behaviour (checked against Jinja2 in the tests), not
// interpreted from the Jinja text.
#include "snapkv/model/chat_template.h"

#include <cstdint>

#include "snapkv/gguf/gguf.h"
#include "snapkv/util/error.h"

namespace snapkv {
namespace {

constexpr std::string_view kComponent = "chat";

bool contains(std::string_view text, std::string_view marker) {
  return text.find(marker) != std::string_view::npos;
}

// Python's str.isspace over one code point (what Jinja's trim and str.strip remove).
bool is_python_space(uint32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

// Code point at text[i] (with its byte length), or the byte itself when not well-formed.
uint32_t code_point_at(std::string_view text, size_t i, size_t& length) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char lead = b(i);
  length = 1;
  if (lead < 0x80) return lead;
  size_t n = (lead & 0xE0) == 0xC0 ? 2 : (lead & 0xF0) == 0xE0 ? 3 : (lead & 0xF8) == 0xF0 ? 4 : 0;
  if (n == 0 || i + n > text.size()) return lead;
  uint32_t c = lead & (0x7Fu >> n);
  for (size_t k = 1; k < n; ++k) {
    if ((b(i + k) & 0xC0) != 0x80) return lead;
    c = (c << 6) | (b(i + k) & 0x3Fu);
  }
  length = n;
  return c;
}

// Jinja's |trim / Python's str.strip(): white space removed at both ends.
std::string trim(std::string_view text) {
  size_t begin = 0;
  while (begin < text.size()) {
    size_t n = 0;
    if (!is_python_space(code_point_at(text, begin, n))) break;
    begin += n;
  }
  size_t end = begin;  // one past the last non-space character
  for (size_t i = begin; i < text.size();) {
    size_t n = 0;
    const bool space = is_python_space(code_point_at(text, i, n));
    i += n;
    if (!space) end = i;
  }
  return std::string(text.substr(begin, end - begin));
}

// str.strip / lstrip / rstrip of one character.
std::string_view lstrip_char(std::string_view s, char c) {
  while (!s.empty() && s.front() == c) s.remove_prefix(1);
  return s;
}
std::string_view rstrip_char(std::string_view s, char c) {
  while (!s.empty() && s.back() == c) s.remove_suffix(1);
  return s;
}

void check_roles(std::span<const ChatMessage> messages) {
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string& role = messages[i].role;
    if (role != "system" && role != "user" && role != "assistant") {
      throw_invalid(kComponent, "message " + std::to_string(i) + " has an unsupported role",
                    "'" + role + "'", "system, user or assistant");
    }
  }
}

bool starts_with(std::string_view s, std::string_view p) {
  return s.substr(0, p.size()) == p;
}
bool ends_with(std::string_view s, std::string_view p) {
  return s.size() >= p.size() && s.substr(s.size() - p.size()) == p;
}

}  // namespace

std::string_view to_string(ChatFamily family) {
  switch (family) {
    case ChatFamily::llama3:
      return "llama3";
    case ChatFamily::chatml:
      return "chatml";
    case ChatFamily::mistral:
      return "mistral";
    case ChatFamily::plain:
      return "plain";
  }
  return "invalid";
}

ChatTemplate ChatTemplate::recognise(std::string_view text, std::string bos_text,
                                     std::string eos_text) {
  ChatTemplate t;
  t.bos_text_ = std::move(bos_text);
  t.eos_text_ = std::move(eos_text);
  if (contains(text, "<|start_header_id|>")) {
    t.family_ = ChatFamily::llama3;
    t.generation_prompt_optional_ = contains(text, "add_generation_prompt");
    t.date_preamble_ = contains(text, "Cutting Knowledge Date");
  } else if (contains(text, "<|im_start|>")) {
    t.family_ = ChatFamily::chatml;
    t.qwen3_thinking_ = contains(text, "<think>");
    // A default system prompt written literally in the template (Qwen 2.5).
    constexpr std::string_view kOpen = "'<|im_start|>system\\n";
    constexpr std::string_view kClose = "<|im_end|>\\n'";
    for (size_t open = text.find(kOpen); open != std::string_view::npos;
         open = text.find(kOpen, open + 1)) {
      const size_t start = open + kOpen.size();
      const size_t close = text.find(kClose, start);
      if (close == std::string_view::npos) break;
      const std::string_view body = text.substr(start, close - start);
      if (!contains(body, "'") && !contains(body, "\\")) {
        t.default_system_ = std::string(body);
        break;
      }
    }
  } else if (contains(text, "[INST]")) {
    if (contains(text, "[SYSTEM_PROMPT]") || contains(text, "[AVAILABLE_TOOLS]")) {
      throw_runtime(kComponent, "Mistral template with tool / system-prompt blocks not supported",
                    "a template with [SYSTEM_PROMPT] or [AVAILABLE_TOOLS]",
                    "the plain [INST] ... [/INST] form");
    }
    t.family_ = ChatFamily::mistral;
  } else {
    std::string head(text.substr(0, 60));
    for (char& c : head) {
      if (c == '\n') c = ' ';
    }
    throw_runtime(kComponent, "unrecognised tokenizer.chat_template",
                  "'" + head + (text.size() > 60 ? "...'" : "'"),
                  "a Llama 3 (<|start_header_id|>), ChatML / Qwen (<|im_start|>) or Mistral "
                  "([INST]) template; run without a chat template instead");
  }
  return t;
}

ChatTemplate ChatTemplate::from_gguf(const gguf::File& file) {
  if (!file.has_key("tokenizer.chat_template")) {
    throw_runtime(kComponent, "the model has no tokenizer.chat_template", "no such key",
                  "a chat template in the GGUF; run without a chat template instead");
  }
  const std::string text = file.get_string("tokenizer.chat_template");
  const auto token_text = [&](std::string_view key) -> std::string {
    if (!file.has_key(key) || !file.has_key("tokenizer.ggml.tokens")) return {};
    const auto& tokens = file.get_string_array("tokenizer.ggml.tokens");
    const uint32_t id = file.get_u32_or(key, 0);
    return id < tokens.size() ? tokens[id] : std::string();
  };
  return recognise(text, token_text("tokenizer.ggml.bos_token_id"),
                   token_text("tokenizer.ggml.eos_token_id"));
}

ChatTemplate ChatTemplate::plain(std::string bos_text) {
  ChatTemplate t;
  t.family_ = ChatFamily::plain;
  t.bos_text_ = std::move(bos_text);
  return t;
}

std::string ChatTemplate::render_plain(std::span<const ChatMessage> messages) const {
  std::string out = bos_text_;
  for (const ChatMessage& m : messages) out += m.content + "\n";
  return out;
}

std::string ChatTemplate::render(std::span<const ChatMessage> messages,
                                 const ChatOptions& options) const {
  check_roles(messages);
  switch (family_) {
    case ChatFamily::llama3:
      return render_llama3(messages, options);
    case ChatFamily::chatml:
      return render_chatml(messages, options);
    case ChatFamily::mistral:
      return render_mistral(messages);
    case ChatFamily::plain:
      return render_plain(messages);
  }
  return {};
}

std::string ChatTemplate::render_llama3(std::span<const ChatMessage> messages,
                                        const ChatOptions& o) const {
  std::string out;
  const auto turn = [&](std::string_view role, std::string_view content) {
    out += "<|start_header_id|>";
    out += role;
    out += "<|end_header_id|>\n\n";
    out += content;
    out += "<|eot_id|>";
  };
  if (date_preamble_) {
    // Llama 3.1+: BOS, then always a system turn with the knowledge / today dates.
    out += bos_text_;
    std::string system;
    if (!messages.empty() && messages.front().role == "system") {
      system = trim(messages.front().content);
      messages = messages.subspan(1);
    }
    turn("system",
         "Cutting Knowledge Date: December 2023\nToday Date: " + o.date + "\n\n" + system);
    for (const ChatMessage& m : messages) turn(m.role, trim(m.content));
  } else {
    for (size_t i = 0; i < messages.size(); ++i) {
      if (i == 0) out += bos_text_;
      turn(messages[i].role, trim(messages[i].content));
    }
  }
  if (o.add_generation_prompt || !generation_prompt_optional_) {
    out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
  }
  return out;
}

std::string ChatTemplate::render_chatml(std::span<const ChatMessage> messages,
                                        const ChatOptions& o) const {
  std::string out;
  const bool has_system = !messages.empty() && messages.front().role == "system";
  if (!has_system && !default_system_.empty()) {
    out += "<|im_start|>system\n" + default_system_ + "<|im_end|>\n";
  }
  // Qwen 3: the last user turn that is not a tool response splits history from the current turn.
  size_t last_query = messages.empty() ? 0 : messages.size() - 1;
  for (size_t k = messages.size(); k-- > 0;) {
    const std::string& c = messages[k].content;
    if (messages[k].role == "user" &&
        !(starts_with(c, "<tool_response>") && ends_with(c, "</tool_response>"))) {
      last_query = k;
      break;
    }
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role != "assistant" || !qwen3_thinking_) {
      out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
      continue;
    }
    std::string_view content = m.content;
    std::string reasoning;
    const size_t close = m.content.rfind("</think>");
    if (close != std::string::npos) {
      content = lstrip_char(std::string_view(m.content).substr(close + 8), '\n');
      std::string_view before = std::string_view(m.content).substr(0, m.content.find("</think>"));
      before = rstrip_char(before, '\n');
      const size_t open = before.rfind("<think>");
      if (open != std::string_view::npos) before = before.substr(open + 7);
      reasoning = std::string(lstrip_char(before, '\n'));
    }
    out += "<|im_start|>assistant\n";
    if (i > last_query && (i + 1 == messages.size() || !reasoning.empty())) {
      out += "<think>\n";
      out += rstrip_char(lstrip_char(reasoning, '\n'), '\n');
      out += "\n</think>\n\n";
      out += lstrip_char(content, '\n');
    } else {
      out += content;
    }
    out += "<|im_end|>\n";
  }
  if (o.add_generation_prompt) {
    out += "<|im_start|>assistant\n";
    if (qwen3_thinking_ && !o.enable_thinking) out += "<think>\n\n</think>\n\n";
  }
  return out;
}

std::string ChatTemplate::render_mistral(std::span<const ChatMessage> messages) const {
  std::string out = bos_text_;
  std::string system;
  bool pending_system = false;
  size_t turn = 0;  // user / assistant turns seen
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role == "system") {
      system = m.content;
      pending_system = true;
      continue;
    }
    const bool expect_user = turn % 2 == 0;
    if ((m.role == "user") != expect_user) {
      throw_invalid(kComponent, "message " + std::to_string(i) + " breaks the turn order",
                    "'" + m.role + "'",
                    std::string(expect_user ? "user" : "assistant") +
                        " (Mistral templates need user / assistant turns in alternation)");
    }
    ++turn;
    if (m.role == "user") {
      out += "[INST] ";
      if (pending_system) out += system + "\n\n";
      pending_system = false;
      out += m.content + " [/INST]";
    } else {
      out += m.content + eos_text_;
    }
  }
  return out;
}

}  // namespace snapkv
