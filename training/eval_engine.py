"""Scores a GGUF model with the C++ engine (`snapkv run`, full cache, greedy) on task jsonl files.

  snapkv tasks gen --task passkey --n 100 --context 1024 --seed 1 --tokenizer M.gguf --out pk.jsonl
  snapkv tasks gen --task passkey --n 100 --context 1024 --seed 1 --tokenizer M.gguf --no-needle \
      --out pk-control.jsonl
  /usr/bin/python3 training/eval_engine.py --model M.gguf --jsonl pk.jsonl pk-control.jsonl

For each sample: prompt = context + question + answer_prefix, `snapkv run --method full
--max-tokens N --temperature 0`, prediction = generated text up to the first newline, score = RULER
string_match_all. Prints one JSON line per file (mean x 100). Used for the model card's no-needle
control, which `snapkv eval` does not generate; the needle figures can also come from `snapkv eval`.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import corpus  # noqa: E402


def string_match_all(pred, answers):
    p = pred.lower()
    return sum(a.lower() in p for a in answers) / len(answers)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--jsonl", nargs="+", required=True)
    ap.add_argument("--snapkv", default=None)
    ap.add_argument("--max-new", type=int, default=48)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    exe = args.snapkv or corpus.default_snapkv()
    for path in args.jsonl:
        with open(path) as f:
            samples = [json.loads(x) for x in f if x.strip()]
        scores = []
        with tempfile.TemporaryDirectory() as tmp:
            prompt_file = os.path.join(tmp, "prompt.txt")
            for s in samples:
                with open(prompt_file, "w") as f:
                    f.write(s["context"] + s["question"] + s["answer_prefix"])
                out = subprocess.run([exe, "run", "--model", args.model, "--prompt-file",
                                      prompt_file, "--method", "full", "--max-tokens",
                                      str(args.max_new), "--temperature", "0", "--threads",
                                      str(args.threads), "--json", "--quiet"],
                                     check=True, capture_output=True, text=True).stdout
                text = json.loads(out)["text"].split("\n")[0]
                scores.append(string_match_all(text, s["answers"]))
        print(json.dumps({"file": path, "n": len(samples),
                          "string_match_all": round(100.0 * sum(scores) / len(scores), 1)}),
              flush=True)


if __name__ == "__main__":
    main()
