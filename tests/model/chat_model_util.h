// Test helper: the shipped tiny model (models/snapkv-tiny4.gguf, SPM vocabulary, no chat
// template) with a tokenizer.chat_template added, as GGUF bytes. Its tensors and other keys are
// copied unchanged, so the result runs exactly like the shipped model.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "snapkv/gguf/gguf.h"

namespace snapkv::testing {

inline std::string tiny_model_path() {
  return std::string(SNAPKV_SOURCE_DIR) + "/models/snapkv-tiny4.gguf";
}

// Family markers only (ChatTemplate recognises templates by them), not whole Jinja programs.
inline constexpr std::string_view kMistralTemplate =
    "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}"
    "{{ '[INST] ' + message['content'] + ' [/INST]' }}{% else %}"
    "{{ message['content'] + eos_token }}{% endif %}{% endfor %}";
inline constexpr std::string_view kChatmlTemplate =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\\n' }}{% endif %}";
inline constexpr std::string_view kLlama3Template =
    "{{ bos_token }}{% for message in messages %}{{ '<|start_header_id|>' + message['role'] + "
    "'<|end_header_id|>\n\n' + message['content'] | trim + '<|eot_id|>' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}"
    "{% endif %}";

// The tiny model's bytes with tokenizer.chat_template = chat_template (none when empty).
inline std::vector<uint8_t> tiny_model_with_template(std::string_view chat_template) {
  const gguf::File src = gguf::File::open(tiny_model_path());
  gguf::Writer w;
  for (const gguf::KeyValue& kv : src.metadata()) w.set(kv.key, kv.value);
  if (!chat_template.empty()) w.set_string("tokenizer.chat_template", chat_template);
  for (const gguf::TensorInfo& t : src.tensors()) {
    w.add_tensor(t.name, t.type, t.ne, std::span<const uint8_t>(t.data, t.n_bytes), true);
  }
  return w.to_bytes();
}

}  // namespace snapkv::testing
