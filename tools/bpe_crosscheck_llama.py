#!/usr/bin/env python3
"""Compare a BPE fixture (tests/model/data/bpe/*_cases.json, ids from the JS reference) with
llama.cpp's tokenizer on the same vocabulary GGUF, through tools/llama_tokenize_batch.cpp.

  tools/bpe_crosscheck_llama.py --fixture F.json --vocab V.gguf --batch /tmp/llama_tokenize_batch \
      [--adopt]

Prints every disagreement (category, text, both id lists). With --adopt the fixture's expected ids
become llama.cpp's wherever the two disagree on valid UTF-8 (the JS ids are kept as "js_ids" /
"js_ids_special"); invalid-UTF-8 cases keep the documented U+FFFD-per-byte ids and record
llama.cpp's as "llama_ids" when they differ.
"""
import argparse
import json
import subprocess


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fixture", required=True)
    ap.add_argument("--vocab", required=True)
    ap.add_argument("--batch", required=True)
    ap.add_argument("--adopt", action="store_true")
    args = ap.parse_args()
    with open(args.fixture, encoding="utf-8") as f:
        cases = json.load(f)
    lines = "".join((c["hex"] if "hex" in c else c["text"].encode("utf-8").hex()) + "\n" for c in cases)
    out = subprocess.run([args.batch, args.vocab], input=lines, capture_output=True, text=True, check=True)
    results = out.stdout.splitlines()
    assert len(results) == len(cases), (len(results), len(cases))
    n_bad = {}
    for c, line in zip(cases, results):
        plain_s, special_s = line.split("|")

        def parse(text):  # ids, or the exception text llama.cpp threw
            return [int(x) for x in text.split()] if "EXCEPTION" not in text else text.strip()
        plain = parse(plain_s)
        special = parse(special_s)
        want_special = c.get("ids_special", c["ids"])
        if plain == c["ids"] and special == want_special:
            continue
        n_bad[c["cat"]] = n_bad.get(c["cat"], 0) + 1
        print(f"{c['cat']}: {c.get('hex') or c['text']!r}\n  js    {c['ids']} / {want_special}\n"
              f"  llama {plain} / {special}")
        if not args.adopt:
            continue
        if "hex" in c:
            c["llama_ids"] = plain
            continue
        c["js_ids"] = c["ids"]
        if "ids_special" in c:
            c["js_ids_special"] = c["ids_special"]
        c["ids"] = plain
        if special != plain:
            c["ids_special"] = special
        else:
            c.pop("ids_special", None)
    print(f"{sum(n_bad.values())} of {len(cases)} cases disagree: {n_bad}")
    if args.adopt:
        with open(args.fixture, "w", encoding="utf-8") as f:
            json.dump(cases, f, ensure_ascii=False)


if __name__ == "__main__":
    main()
