// Chat templates: recognise a GGUF's tokenizer.chat_template (a Jinja program) by the markers of
// its family and render a conversation with our own code, not a Jinja interpreter.
//
// Promises:
//  - ChatTemplate::recognise(text) knows three families by distinctive markers:
//      llama3   "<|start_header_id|>": "<|start_header_id|>ROLE<|end_header_id|>\n\n" +
//               trim(content) + "<|eot_id|>" per message, BOS text before the first; the Llama
//               3.1+ form ("Cutting Knowledge Date" in the template) always opens with a system
//               turn "Cutting Knowledge Date: December 2023\nToday Date: DATE\n\n" + system text;
//               the assistant header as generation prompt (always, when the template does not
//               test add_generation_prompt, as Llama 3.0's does not);
//      chatml   "<|im_start|>": "<|im_start|>ROLE\n" + content + "<|im_end|>\n"; a default
//               system prompt written in the template ('<|im_start|>system\nTEXT<|im_end|>\n',
//               Qwen 2.5) is used when the conversation has none; Qwen 3's reasoning rules when
//               the template mentions "<think>" (reasoning stripped from assistant turns before
//               the last user query, "<think>\n...\n</think>\n\n" on later ones, and
//               "<think>\n\n</think>\n\n" after the generation prompt when thinking is off);
//      mistral  "[INST]": BOS text, "[INST] " + content + " [/INST]" per user turn (a system
//               prompt joins the next user turn, followed by "\n\n"), assistant content + EOS
//               text; user and assistant turns must alternate.
//    Anything else throws RuntimeError naming the three families and their markers; a missing
//    tokenizer.chat_template (from_gguf) throws RuntimeError suggesting to go without a template.
//  - render() gives, for conversations of system / user / assistant messages without tools,
//    exactly what Hugging Face's apply_chat_template renders with the real templates (tested
//    against Jinja2 on the Llama 3 and Qwen 3 templates). The text contains special-token texts
//    ("<|eot_id|>", and the BOS text where the template writes it): tokenize it with
//    parse_special and without adding BOS again.
//
// Leaves out: tools / tool calls / the "tool" and "ipython" roles (invalid_argument), arbitrary
// Jinja, other families (Gemma, Phi, DeepSeek, Mistral v7 "[SYSTEM_PROMPT]").
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace snapkv::gguf {
class File;
}  // namespace snapkv::gguf

namespace snapkv {

// plain: no template at all (`--no-chat`): each message's content on a line of its own.
enum class ChatFamily { llama3, chatml, mistral, plain };

// "llama3", "chatml", "mistral", "plain".
std::string_view to_string(ChatFamily family);

struct ChatMessage {
  std::string role;  // "system", "user" or "assistant"
  std::string content;
};

struct ChatOptions {
  bool add_generation_prompt = true;
  bool enable_thinking = true;       // Qwen 3: false closes an empty <think></think> block
  std::string date = "26 Jul 2024";  // Llama 3.1+: "Today Date" (the templates' default)
};

class ChatTemplate {
 public:
  // bos_text / eos_text: the texts of the vocabulary's BOS / EOS tokens (the templates' bos_token
  // and eos_token). Throws RuntimeError for an unrecognised template (see the file comment).
  static ChatTemplate recognise(std::string_view template_text, std::string bos_text,
                                std::string eos_text);
  // Reads tokenizer.chat_template and the BOS / EOS token texts (tokenizer.ggml.*).
  static ChatTemplate from_gguf(const gguf::File& file);
  // No template (`chat --no-chat`, a base model): bos_text (empty: none) and then each message's
  // content followed by "\n", whatever its role; the generation prompt adds nothing.
  static ChatTemplate plain(std::string bos_text);

  // Throws std::invalid_argument for a role other than system / user / assistant, or (mistral)
  // turns that do not alternate user / assistant.
  std::string render(std::span<const ChatMessage> messages, const ChatOptions& options) const;
  std::string render(std::span<const ChatMessage> messages) const {
    return render(messages, ChatOptions{});
  }

  ChatFamily family() const { return family_; }

 private:
  std::string render_llama3(std::span<const ChatMessage> messages, const ChatOptions& o) const;
  std::string render_chatml(std::span<const ChatMessage> messages, const ChatOptions& o) const;
  std::string render_mistral(std::span<const ChatMessage> messages) const;
  std::string render_plain(std::span<const ChatMessage> messages) const;

  ChatFamily family_ = ChatFamily::chatml;
  std::string bos_text_;
  std::string eos_text_;
  bool generation_prompt_optional_ = true;  // llama3: the template tests add_generation_prompt
  bool date_preamble_ = false;              // llama3: Llama 3.1+ system turn
  bool qwen3_thinking_ = false;             // chatml: the template handles <think>
  std::string default_system_;              // chatml: system prompt when none is given
};

}  // namespace snapkv
