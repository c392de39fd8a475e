#!/usr/bin/env python3
"""Generate the tokenizer test strings (deterministic, seed fixed) for the BPE fixtures.

Writes a JSON list of cases {"cat": category, "text": str} or {"cat": "invalid_utf8", "hex": ...,
"text": <the text with each invalid byte replaced by U+FFFD, as snapkv and llama.cpp read it>}.
Categories: llama.cpp's own test strings (models/ggml-vocab-*.inp), unicode scripts, digit runs,
whitespace runs, code, emoji, contractions, special tokens written in the text, random mixtures,
invalid UTF-8.

Usage: tools/bpe_cases.py --specials '<|begin_of_text|>,<|eot_id|>' --inp FILE.inp --out cases.json
"""
import argparse
import json
import random

SCRIPTS = {
    "latin": [(0x41, 0x5A), (0x61, 0x7A), (0xC0, 0xFF), (0x100, 0x17F)],
    "greek": [(0x391, 0x3A9), (0x3B1, 0x3C9)],
    "cyrillic": [(0x410, 0x44F)],
    "armenian": [(0x531, 0x556), (0x561, 0x586)],
    "hebrew": [(0x5D0, 0x5EA)],
    "arabic": [(0x621, 0x64A), (0x660, 0x669)],
    "devanagari": [(0x905, 0x939), (0x93E, 0x94D), (0x966, 0x96F)],
    "bengali": [(0x985, 0x9B9)],
    "tamil": [(0xB85, 0xBB9), (0xBBE, 0xBCD)],
    "thai": [(0xE01, 0xE3A), (0xE40, 0xE4E)],
    "khmer": [(0x1780, 0x17B3), (0x17B6, 0x17D2)],
    "georgian": [(0x10D0, 0x10FA)],
    "hangul": [(0xAC00, 0xD7A3)],
    "hiragana": [(0x3041, 0x3096)],
    "katakana": [(0x30A1, 0x30FA)],
    "cjk": [(0x4E00, 0x9FA5)],
    "fullwidth": [(0xFF01, 0xFF5E)],
    "math": [(0x2200, 0x22FF), (0x1D400, 0x1D4FF)],
    "combining": [(0x300, 0x36F)],
}
WHITESPACE = [" ", "\t", "\n", "\r", "\u000b", "\u000c", "\u00a0", "\u2009", "\u3000", "\u0085",
              "\u2028", "\u200b", "\u1680", "\u202f"]
EMOJI = ["🦙", "🚀", "😁", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "❤️", "🇫🇷", "🤖", "😶‍🌫️", "✅", "🔥", "🧑‍💻", "©", "™"]
CODE = [
    "def f(x):\n    return x**2 + 1\n",
    "int main() { printf(\"%d\\n\", 42); return 0; }",
    "for (size_t i = 0; i < n; ++i) {\n\tsum += a[i] * b[i];\n}",
    "{\"key\": [1, 2.5, -3e10, null, true], \"nested\": {\"a\": \"b\"}}",
    "SELECT id, name FROM users WHERE age >= 18 ORDER BY name;",
    "#include <vector>\nstd::vector<int> v{1,2,3};",
    "const x = (a, b) => a ?? b; // nullish",
    "if x != None and y == '':\n        pass",
    "<div class=\"row\"><span>&nbsp;&lt;tag&gt;</span></div>",
    "fn main() -> Result<(), Box<dyn Error>> { Ok(()) }",
    "$ ls -la | grep '.cpp' > out.txt 2>&1",
    "x = [i for i in range(10) if i % 2 == 0]",
    "    \n    indented\n\t\ttabs\n",
    "/* comment */ a+=b; a-=c; a*=d; a/=e; a%=f; a<<=1; a>>=2;",
    "https://example.com/path?query=1&other=two#frag",
    "user@example.org, +1 (555) 010-9999",
]
WORDS = ["hello", "world", "The", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "naïve",
         "café", "résumé", "Führer", "straße", "über", "coöperate", "Ελληνικά", "русский", "日本語",
         "中文", "한국어", "العربية", "עברית", "हिन्दी", "ไทย", "tokenization", "SnapKV", "llama.cpp"]
CONTRACTIONS = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'Ve", "'lL", "'D", "'x", "''"]


def rand_script_text(rng, ranges, n):
    out = []
    for _ in range(n):
        lo, hi = rng.choice(ranges)
        out.append(chr(rng.randint(lo, hi)))
    return "".join(out)


def sanitize(data: bytes) -> str:
    """Each byte that does not start a valid UTF-8 sequence (RFC 3629: shortest form, no
    surrogates, <= U+10FFFF) becomes U+FFFD, and decoding resumes at the next byte."""
    out = []
    i = 0
    while i < len(data):
        b = data[i]
        n = 1 if b < 0x80 else 2 if 0xC2 <= b <= 0xDF else 3 if 0xE0 <= b <= 0xEF else 4 if 0xF0 <= b <= 0xF4 else 0
        if n == 0:
            out.append("\ufffd"); i += 1; continue
        chunk = data[i:i + n]
        try:
            if len(chunk) < n:
                raise ValueError
            out.append(chunk.decode("utf-8", "strict"))
            i += n
        except (UnicodeDecodeError, ValueError):
            out.append("\ufffd"); i += 1
    return "".join(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--specials", default="", help="comma-separated special token texts")
    ap.add_argument("--inp", action="append", default=[], help="llama.cpp .inp test file")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    specials = [s for s in args.specials.split(",") if s]
    cases = []

    def add(cat, text):
        cases.append({"cat": cat, "text": text})

    for path in args.inp:
        with open(path, encoding="utf-8") as f:
            # each test string is followed by the separator; the last split part is the tail
            for text in f.read().split("\n__ggml_vocab_test__\n")[:-1]:
                add("llama.cpp-inp", text)
    add("empty", "")
    for name, ranges in SCRIPTS.items():
        for _ in range(30):
            n = rng.randint(1, 24)
            words = [rand_script_text(rng, ranges, rng.randint(1, 8)) for _ in range(rng.randint(1, 4))]
            add("script:" + name, rng.choice([" ", "", "  ", "\n"]).join(words) if n % 3 else words[0])
    for length in range(1, 25):
        add("digits", "".join(rng.choice("0123456789") for _ in range(length)))
        add("digits", "x" + "7" * length + " " + "1" * (length % 5 + 1))
    for _ in range(120):
        parts = []
        for _ in range(rng.randint(1, 5)):
            parts.append("".join(rng.choice("0123456789") for _ in range(rng.randint(1, 9))))
        sep = rng.choice([" ", ",", ".", "", "-", "٫", "\n"])
        add("digits", sep.join(parts))
    for digits in ["٠١٢٣٤٥٦٧٨٩", "０１２３４５", "²³¹½¼¾", "ⅠⅡⅢⅣ", "①②③", "१२३४५"]:
        add("digits", digits)
        add("digits", "a" + digits + " b")
    for _ in range(300):
        pieces = []
        for _ in range(rng.randint(1, 6)):
            pieces.append("".join(rng.choice(WHITESPACE) for _ in range(rng.randint(1, 6))))
            if rng.random() < 0.7:
                pieces.append(rng.choice(WORDS + ["x", "1", "!", "."]))
        add("whitespace", "".join(pieces))
    for k in range(1, 20):
        add("whitespace", " " * k)
        add("whitespace", "\n" * k)
        add("whitespace", "a" + " " * k + "b")
    for snippet in CODE:
        add("code", snippet)
        add("code", " " + snippet)
        add("code", snippet.replace(" ", "  "))
    for _ in range(120):
        add("code", "".join(rng.choice(CODE)[rng.randint(0, 5):] for _ in range(2)))
    for _ in range(150):
        add("emoji", "".join(rng.choice(EMOJI + [" ", "a", "1", "!"]) for _ in range(rng.randint(1, 8))))
    for _ in range(150):
        add("contractions", " ".join(rng.choice(WORDS) + rng.choice(CONTRACTIONS) for _ in range(rng.randint(1, 4))))
    for c in CONTRACTIONS:
        add("contractions", c)
        add("contractions", "I" + c + " " + c.upper())
    for _ in range(200):
        pieces = []
        for _ in range(rng.randint(1, 5)):
            r = rng.random()
            if specials and r < 0.4:
                s = rng.choice(specials)
                if rng.random() < 0.15:
                    s = s[: rng.randint(1, len(s) - 1)]  # a broken special
                pieces.append(s)
            else:
                pieces.append(rng.choice(WORDS + [" ", "\n", "  ", "12", "!"]))
        add("special", "".join(pieces))
    for s in specials:
        add("special", s)
        add("special", " " + s + " ")
        add("special", s + s)
        add("special", "<" + s)
    pool = ("abcXYZ019 ,.;:!?'\"-_()[]{}<>@#$%^&*+=/\\|`~\t\n" + "éßøñçœ" + "日本語中文한국" + "🦙😁" +
            "\u00a0\u3000\u200d\u0301\u0085")
    for _ in range(450):
        add("random", "".join(rng.choice(pool) for _ in range(rng.randint(1, 40))))
    for _ in range(150):
        words = []
        for _ in range(rng.randint(1, 6)):
            lo, hi = rng.choice(rng.choice(list(SCRIPTS.values())))
            words.append("".join(chr(rng.randint(lo, hi)) for _ in range(rng.randint(1, 5))))
        add("mixed-scripts", rng.choice([" ", "", "\n", "1"]).join(words))
    invalid = [b"\x80", b"\xff", b"\xfe\xff", b"abc\xe2\x82", b"\xe2\x82abc", b"\xc3", b"a\xc3 b",
               b"\xf0\x9f\xa6", b"\xf0\x9f\xa6 x", b"\xed\xa0\x80", b"\xc0\xaf", b"\xe0\x80\xaf",
               b"\xf4\x90\x80\x80", b"\xf8\x88\x80\x80\x80", b"ok\x80\x80\x80ok", b"\xc3\xa9\xa9",
               b"\x61\xf1\x80\x80\xe1\x80\xc2\x62\x80\x63\x80\xbf\x64"]
    for _ in range(60):
        blob = bytearray()
        for _ in range(rng.randint(1, 8)):
            if rng.random() < 0.5:
                blob += rng.choice(WORDS).encode()
            else:
                blob += bytes(rng.randint(0x80, 0xFF) for _ in range(rng.randint(1, 3)))
        invalid.append(bytes(blob))
    for data in invalid:
        cases.append({"cat": "invalid_utf8", "hex": data.hex(), "text": sanitize(data)})

    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(cases, f, ensure_ascii=False)
    print(f"{args.out}: {len(cases)} cases")


if __name__ == "__main__":
    main()
