"""Text sources for the tokenizer and the training mix.

- natural English from Debian packages: fortunes (package `fortunes`, `fortunes-min`) and the
  license texts in /usr/share/common-licenses;
- task text from the C++ generator, `snapkv tasks gen --split train` (one source of truth for the
  task templates and filler; Python never re-implements them).
"""
import argparse
import glob
import gzip
import json
import os
import subprocess

FORTUNE_DIR = "/usr/share/games/fortunes"
LICENSE_DIR = "/usr/share/common-licenses"
TASKS = ["niah_single", "niah_multikey", "niah_multivalue", "niah_multiquery", "vt", "passkey"]


def natural_paragraphs(path=None):
    """Fortunes (split at '%' lines) and license paragraphs, as a list of strings (sorted sources).
    path: read them from a file written by `corpus.py --dump-natural` instead (a machine without
    Debian's fortunes)."""
    if path:
        with (gzip.open if path.endswith(".gz") else open)(path, "rt", encoding="utf-8") as f:
            return json.load(f)
    paragraphs = []
    for path in sorted(glob.glob(os.path.join(FORTUNE_DIR, "*"))):
        if path.endswith((".dat", ".u8")) or os.path.isdir(path) or os.path.islink(path):
            continue
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
        for item in text.split("\n%\n"):
            item = item.strip("\n")
            if 20 <= len(item) <= 2000:
                paragraphs.append(item)
    for path in sorted(glob.glob(os.path.join(LICENSE_DIR, "*"))):
        if os.path.isdir(path) or os.path.islink(path):
            continue
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
        for item in text.split("\n\n"):
            item = item.strip("\n")
            if 20 <= len(item) <= 2000:
                paragraphs.append(item)
    return paragraphs


def default_snapkv():
    """The `snapkv` binary: $SNAPKV, else the first existing build output."""
    if os.environ.get("SNAPKV"):
        return os.environ["SNAPKV"]
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for rel in ["build/snapkv", "build-tasks/snapkv", "build-tasks/standalone/snapkv-tasks",
                "build-lead/snapkv"]:
        path = os.path.join(root, rel)
        if os.path.exists(path):
            return path
    raise FileNotFoundError("no snapkv binary; build it or set SNAPKV=/path/to/snapkv")


def generate_tasks(task, n, context, seed, split="train", snapkv=None, extra=()):
    """Runs `snapkv tasks gen` and returns the parsed samples (list of dicts)."""
    cmd = [snapkv or default_snapkv(), "tasks", "gen", "--task", task, "--n", str(n), "--context",
           str(context), "--seed", str(seed), "--split", split, "--quiet", *extra]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return [json.loads(line) for line in out.splitlines() if line.strip()]


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description="Training text sources")
    ap.add_argument("--dump-natural", metavar="FILE", required=True,
                    help="write the natural-text paragraphs as JSON (.gz: compressed), for "
                         "train.py --natural on a machine without Debian's fortunes")
    a = ap.parse_args()
    with (gzip.open if a.dump_natural.endswith(".gz") else open)(a.dump_natural, "wt",
                                                                 encoding="utf-8") as f:
        json.dump(natural_paragraphs(), f)
