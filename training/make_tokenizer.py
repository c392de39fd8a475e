"""Trains the SentencePiece BPE tokenizer and exports it in the raw format `snapkv convert` reads.

  /usr/bin/python3 training/make_tokenizer.py --out training/runs/tok

Writes OUT/spm.model (SentencePiece), OUT/spm.vocab and OUT/tokenizer.json
({"model":"llama","tokens","scores","token_types","bos_id","eos_id","unk_id","add_bos",
"add_space_prefix"}; token types as GGUF: NORMAL 1, UNKNOWN 2, CONTROL 3, USER_DEFINED 4,
UNUSED 5, BYTE 6). Corpus: task text (train split, seed 7) + fortunes + license texts.
"""
import argparse
import json
import os
import random
import re
import subprocess

import corpus


def build_corpus(path, snapkv):
    lines = []
    for task in corpus.TASKS:
        for sample in corpus.generate_tasks(task, 150, 512, seed=7, snapkv=snapkv):
            text = sample["context"] + sample["question"] + sample["answer_prefix"] + " " + \
                ", ".join(sample["answers"]) + "."
            lines.extend(x for x in re.split(r"(?<=[.?!:])\s+|\n", text) if x.strip())
    for para in corpus.natural_paragraphs():
        lines.extend(x for x in para.split("\n") if x.strip())
    random.Random(7).shuffle(lines)
    with open(path, "w", encoding="utf-8") as f:
        for line in lines:
            f.write(line + "\n")
    return len(lines)


def export_json(model_path, out_path):
    import sentencepiece as spm
    sp = spm.SentencePieceProcessor(model_file=model_path)
    tokens, scores, types = [], [], []
    for i in range(sp.get_piece_size()):
        tokens.append(sp.id_to_piece(i))
        scores.append(float(sp.get_score(i)))
        if sp.is_unknown(i):
            types.append(2)
        elif sp.is_control(i):
            types.append(3)
        elif sp.is_byte(i):
            types.append(6)
        elif sp.is_unused(i):
            types.append(5)
        else:
            types.append(1)
    doc = {"model": "llama", "tokens": tokens, "scores": scores, "token_types": types,
           "bos_id": sp.bos_id(), "eos_id": sp.eos_id(), "unk_id": sp.unk_id(), "add_bos": True,
           "add_space_prefix": True}
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="training/runs/tok")
    ap.add_argument("--vocab", type=int, default=2000)
    ap.add_argument("--snapkv", default=None)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    text_path = os.path.join(args.out, "corpus.txt")
    n = build_corpus(text_path, args.snapkv)
    print(f"corpus: {n} lines -> {text_path}")
    prefix = os.path.join(args.out, "spm")
    subprocess.run(["spm_train", f"--input={text_path}", f"--model_prefix={prefix}",
                    "--model_type=bpe", f"--vocab_size={args.vocab}", "--byte_fallback=true",
                    "--normalization_rule_name=identity", "--add_dummy_prefix=true",
                    "--split_digits=true", "--remove_extra_whitespaces=false",
                    "--character_coverage=1.0", "--unk_id=0", "--bos_id=1", "--eos_id=2",
                    "--pad_id=-1", "--input_sentence_size=2000000", "--shuffle_input_sentence=true",
                    "--seed_sentencepiece_size=1000000", "--num_threads=2"],
                   check=True, capture_output=True)
    export_json(prefix + ".model", os.path.join(args.out, "tokenizer.json"))
    print(f"wrote {prefix}.model and {args.out}/tokenizer.json")


if __name__ == "__main__":
    main()
