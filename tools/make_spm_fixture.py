#!/usr/bin/python3
"""Regenerates the SentencePiece fixture under tests/model/data/spm/.

Trains a small SentencePiece BPE model with the settings this project's models use (byte fallback,
identity normalization, dummy prefix, split digits, extra whitespace kept) on the licence texts of
/usr/share/common-licenses plus generated lines of numbers, punctuation, whitespace runs and
non-ASCII text, then writes:

  spm.model     the SentencePiece model (libsentencepiece loads it in tokenizer_test.cpp)
  vocab.json    pieces, scores and token types (GGUF numbering) exported through the Python API,
                so the C++ test can build the vocabulary without libsentencepiece
  golden.jsonl  {"text": ..., "ids": [...]} for a few hundred strings, ids from EncodeAsIds,
                so the exact-id test runs even where libsentencepiece is not installed

Needs Debian's python3-sentencepiece; run with /usr/bin/python3 from the repository root:
    /usr/bin/python3 tools/make_spm_fixture.py
Deterministic: fixed seeds, single-threaded training, sorted input files.
"""

import json
import os
import random
import sys
import tempfile

import sentencepiece as spm

OUT_DIR = os.path.join("tests", "model", "data", "spm")
LICENSE_DIR = "/usr/share/common-licenses"
VOCAB_SIZE = 2000

# A few sentences per script, so some non-ASCII characters become pieces and rarer ones must fall
# back to bytes (character_coverage < 1).
NON_ASCII_LINES = [
    "Le cœur a ses raisons que la raison ne connaît point. Déjà vu, naïve façade, où est l'été ?",
    "Größe, Übermäßig, schön: Die Bücher liegen auf dem Tisch, und das Mädchen liest.",
    "¿Dónde está la estación? Mañana vamos a la montaña con el niño.",
    "Η γλώσσα είναι ελληνική και η θάλασσα είναι γαλάζια.",
    "Съешь же ещё этих мягких французских булок, да выпей чаю.",
    "日本語のテキストと中文文本，还有한국어 문장도 있습니다。",
    "Ça coûte 12,50 € ou £10 — «quotes» and “curly quotes” … • ✓",
    "Zürich, Ærøskøbing, Łódź, Čeština, Þingvellir, İstanbul.",
]


def generated_lines(rng):
    """Numbers, punctuation, whitespace runs and mixed text, deterministic for rng."""
    lines = []
    punct = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"
    words = ["the", "pass", "key", "is", "VAR", "magic", "number", "for", "value", "remember"]
    for _ in range(3000):
        kind = rng.randrange(5)
        if kind == 0:
            lines.append(" ".join(str(rng.randrange(10 ** rng.randrange(1, 9))) for _ in range(6)))
        elif kind == 1:
            lines.append("".join(rng.choice(punct) for _ in range(rng.randrange(3, 20))))
        elif kind == 2:
            lines.append(" " * rng.randrange(1, 9) + " ".join(rng.choice(words) for _ in range(5)))
        elif kind == 3:
            key = rng.choice(words)
            lines.append(f"VAR {key.upper()} = {rng.randrange(100000)}. "
                         f"The pass key is {rng.randrange(10**7)}. Remember it.")
        else:
            lines.append(rng.choice(NON_ASCII_LINES))
    return lines


def test_strings(rng, corpus_text):
    """Strings for the golden file: corpus slices, edge cases, random unicode."""
    strings = ["", " ", "  ", "\t", "\n", "a", "Hello world", " Hello  world ", "hello\n\nworld",
               "1234567890", "3.14159 and 2,718", "emoji 😀🎉👍🏽 end", "▁", "▁▁x▁", "<s>",
               "</s>", "<unk>", "<0x41>", "tab\there", "trailing   ", "日本語", "Ελληνικά",
               "\u00a0non-breaking\u00a0space", "a\u0301 combining", "\U0001F600", "x" * 200]
    for _ in range(150):
        start = rng.randrange(len(corpus_text))
        strings.append(corpus_text[start:start + rng.randrange(1, 200)])
    pool = ([chr(c) for c in range(0x20, 0x7F)] + list(" \t\n") * 10 +
            list("éèüößçñÆøåλΩжЯ中文日本한€£•✓—") + ["😀", "🎉", "👍🏽", "\u2581", "\U00010348"])
    for _ in range(100):
        strings.append("".join(rng.choice(pool) for _ in range(rng.randrange(1, 60))))
    return strings


def token_type(sp, i):
    """GGUF token type (SentencePiece ModelProto type + 1)."""
    if sp.is_unknown(i):
        return 2
    if sp.is_control(i):
        return 3
    if sp.is_unused(i):
        return 5
    if sp.is_byte(i):
        return 6
    return 1  # normal (this fixture defines no user symbols)


def main():
    if not os.path.isdir(os.path.join("tests", "model")):
        sys.exit("run from the repository root")
    os.makedirs(OUT_DIR, exist_ok=True)
    rng = random.Random(20240501)
    corpus = []
    for name in sorted(os.listdir(LICENSE_DIR)):
        path = os.path.join(LICENSE_DIR, name)
        if os.path.isfile(path):
            with open(path, encoding="utf-8", errors="replace") as f:
                corpus.extend(line.rstrip("\n") for line in f if line.strip())
    corpus.extend(generated_lines(rng))
    # A fixed scratch path: the model records its input path, so a random one would change it.
    tmp = os.path.join(tempfile.gettempdir(), "snapkv-spm-fixture")
    os.makedirs(tmp, exist_ok=True)
    text_path = os.path.join(tmp, "corpus.txt")
    with open(text_path, "w", encoding="utf-8") as f:
        f.write("\n".join(corpus) + "\n")
    prefix = os.path.join(tmp, "spm")
    spm.SentencePieceTrainer.train(
        input=text_path, model_prefix=prefix, model_type="bpe", vocab_size=VOCAB_SIZE,
        byte_fallback=True, normalization_rule_name="identity", add_dummy_prefix=True,
        split_digits=True, remove_extra_whitespaces=False, allow_whitespace_only_pieces=True,
        character_coverage=0.9995, num_threads=1, unk_id=0, bos_id=1, eos_id=2, pad_id=-1,
        minloglevel=2)
    with open(prefix + ".model", "rb") as f:
        model_bytes = f.read()
    with open(os.path.join(OUT_DIR, "spm.model"), "wb") as f:
        f.write(model_bytes)

    sp = spm.SentencePieceProcessor(model_proto=model_bytes)
    n = sp.get_piece_size()
    vocab = {
        "pieces": [sp.id_to_piece(i) for i in range(n)],
        "scores": [sp.get_score(i) for i in range(n)],
        "types": [token_type(sp, i) for i in range(n)],
        "bos_id": sp.bos_id(), "eos_id": sp.eos_id(), "unk_id": sp.unk_id(),
    }
    with open(os.path.join(OUT_DIR, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False, indent=0)
        f.write("\n")
    corpus_text = "\n".join(corpus)
    with open(os.path.join(OUT_DIR, "golden.jsonl"), "w", encoding="utf-8") as f:
        for s in test_strings(rng, corpus_text):
            f.write(json.dumps({"text": s, "ids": sp.encode_as_ids(s)}, ensure_ascii=False) + "\n")
    print(f"wrote {OUT_DIR}: vocab {n}, model {len(model_bytes)} bytes")


if __name__ == "__main__":
    main()
