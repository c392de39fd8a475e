#!/usr/bin/env bash
# Times one GGUF file with llama.cpp's llama-bench and with `snapkv bench --model`, with the same
# prompt length, generated tokens, threads and repetitions, and prints one table of ratios
# (ours / llama.cpp) per test (pp<P>: prefill of P tokens, tg<N>: N tokens generated from an empty
# context) and thread count, plus each side's thread scaling against the first thread count.
#
#   scripts/bench_vs_llamacpp.sh M.gguf                      # -p 512 -n 128 -t 1,2 -r 3
#   scripts/bench_vs_llamacpp.sh M.gguf -p 512,4096 -n 64 -t 2 -r 5 --out results/
#
# Options:
#   --llama-build DIR  llama.cpp build directory holding bin/llama-bench (default
#                      /work/llama.cpp/build; llama.cpp is built outside this repository)
#   --snapkv PATH      the snapkv binary (default: build/snapkv of this checkout)
#   -p LIST -n N -t LIST -r N   as llama-bench's flags (defaults 512, 128, 1,2, 3)
#   --out DIR          keep both JSON files (llama.json, snapkv.json) and the table there
#   --llama-json FILE  use this recorded `llama-bench -o json` output instead of running llama-bench
#                      (reruns of the comparison; tests)
# Runs unattended; exits 1 with a message when llama-bench or the model is missing or a run fails,
# 2 on bad usage. Timings are only meaningful on a quiet machine.
set -euo pipefail

die() {
  echo "bench_vs_llamacpp: error: $1" >&2
  exit "${2:-1}"
}

usage() {
  sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'
}

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
llama_build=/work/llama.cpp/build
snapkv="$repo/build/snapkv"
prompts=512
gen=128
threads=1,2
reps=3
out=""
llama_json=""
model=""

while [[ $# -gt 0 ]]; do
  case "$1" in
    -h | --help) usage; exit 0 ;;
    --llama-build) llama_build="${2:?--llama-build needs a directory}"; shift 2 ;;
    --snapkv) snapkv="${2:?--snapkv needs a path}"; shift 2 ;;
    -p | --n-prompt) prompts="${2:?-p needs a list}"; shift 2 ;;
    -n | --n-gen) gen="${2:?-n needs a count}"; shift 2 ;;
    -t | --threads) threads="${2:?-t needs a list}"; shift 2 ;;
    -r | --repetitions) reps="${2:?-r needs a count}"; shift 2 ;;
    --out) out="${2:?--out needs a directory}"; shift 2 ;;
    --llama-json) llama_json="${2:?--llama-json needs a file}"; shift 2 ;;
    -*) die "unknown option '$1', expected one of: --llama-build --snapkv -p -n -t -r --out --llama-json" 2 ;;
    *)
      [[ -z "$model" ]] || die "a second model file '$1', expected one GGUF path" 2
      model="$1"; shift ;;
  esac
done

[[ -n "$model" ]] || { usage >&2; die "no model file given, expected: bench_vs_llamacpp.sh M.gguf [options]" 2; }
[[ -f "$model" ]] || die "model file not found: '$model', expected an existing GGUF file"
[[ "$prompts" =~ ^[0-9]+(,[0-9]+)*$ ]] || die "-p '$prompts', expected comma-separated counts" 2
[[ "$threads" =~ ^[0-9]+(,[0-9]+)*$ ]] || die "-t '$threads', expected comma-separated counts" 2
[[ "$gen" =~ ^[0-9]+$ ]] || die "-n '$gen', expected a count" 2
[[ "$reps" =~ ^[1-9][0-9]*$ ]] || die "-r '$reps', expected a count >= 1" 2
[[ -x "$snapkv" ]] || die "snapkv binary not found at '$snapkv', expected a build (cmake --build build --target snapkv_cli) or --snapkv PATH"
command -v python3 >/dev/null || die "python3 not found, expected it on PATH (scripts/setup.sh installs it)"

work="$(mktemp -d "${TMPDIR:-/tmp}/bench_vs_llamacpp.XXXXXX")"
trap 'rm -rf "$work"' EXIT

if [[ -n "$llama_json" ]]; then
  [[ -f "$llama_json" ]] || die "--llama-json file not found: '$llama_json'"
  cp "$llama_json" "$work/llama.json"
else
  llama_bench="$llama_build/bin/llama-bench"
  [[ -x "$llama_bench" ]] || die "llama-bench not found at '$llama_bench', expected a llama.cpp build there: cmake -S /work/llama.cpp -B $llama_build -DCMAKE_BUILD_TYPE=Release && cmake --build $llama_build --target llama-bench (or --llama-build DIR)"
  echo "[bench_vs_llamacpp] llama-bench -m $model -p $prompts -n $gen -t $threads -r $reps" >&2
  if ! "$llama_bench" -m "$model" -p "$prompts" -n "$gen" -t "$threads" -r "$reps" -o json \
      >"$work/llama.json" 2>"$work/llama.err"; then
    tail -n 20 "$work/llama.err" >&2
    die "llama-bench failed (its last lines above)"
  fi
fi

echo "[bench_vs_llamacpp] snapkv bench --model $model -p $prompts -n $gen --threads $threads -r $reps" >&2
if ! "$snapkv" bench --model "$model" -p "$prompts" -n "$gen" --threads "$threads" -r "$reps" \
    --quiet --json "$work/snapkv.json" >"$work/snapkv.txt" 2>"$work/snapkv.err"; then
  tail -n 20 "$work/snapkv.err" >&2
  die "snapkv bench failed (its last lines above)"
fi

status=0
python3 - "$work/llama.json" "$work/snapkv.json" "$threads" >"$work/table.txt" <<'EOF' || status=$?
import json, statistics, sys

llama_path, snapkv_path, threads_arg = sys.argv[1:4]
try:
    llama = json.load(open(llama_path))
except ValueError as e:
    sys.exit(f"bench_vs_llamacpp: error: llama-bench output is not JSON ({e}), expected `-o json` output")
if not isinstance(llama, list):
    sys.exit("bench_vs_llamacpp: error: llama-bench JSON is not an array, expected `-o json` output")
ours = json.load(open(snapkv_path))

def llama_rate(row):
    # the median of the samples when llama-bench gives them, else its mean
    samples = row.get("samples_ts") or []
    return statistics.median(samples) if samples else float(row["avg_ts"])

theirs = {}
for row in llama:
    p, n, t = int(row["n_prompt"]), int(row["n_gen"]), int(row["n_threads"])
    if p > 0 and n == 0:
        theirs[(f"pp{p}", t)] = llama_rate(row)
    elif p == 0 and n > 0:
        theirs[(f"tg{n}", t)] = llama_rate(row)
mine = {}
for row in ours["results"]:
    if row["method"] == "full" and row["kind"] in ("pp", "tg"):
        mine[(row["test"], int(row["threads"]))] = row["tokens_per_s"]["median"]

tests = sorted({k[0] for k in mine} | {k[0] for k in theirs}, key=lambda s: (s[:2], int(s[2:])))
thread_list = [int(t) for t in threads_arg.split(",")]
m = ours["model"]
print(f"model: {m['path']} ({m['arch']}, {m['type']}, {m['n_layers']} layers, embd {m['n_embd']}); "
      f"medians of {ours['settings']['repetitions']} runs; ratio = snapkv / llama.cpp")
print(f"{'test':<10} {'threads':>7} {'llama.cpp t/s':>14} {'snapkv t/s':>11} {'ratio':>7} "
      f"{'llama x':>8} {'snapkv x':>9}")
missing = []
for test in tests:
    base_l = theirs.get((test, thread_list[0]))
    base_s = mine.get((test, thread_list[0]))
    for t in thread_list:
        l, s = theirs.get((test, t)), mine.get((test, t))
        if l is None or s is None:
            missing.append(f"{test} t={t} ({'llama.cpp' if l is None else 'snapkv'})")
            continue
        ratio = s / l if l > 0 else float("nan")
        sl = f"{l / base_l:8.2f}" if base_l else f"{'-':>8}"
        ss = f"{s / base_s:9.2f}" if base_s else f"{'-':>9}"
        print(f"{test:<10} {t:>7} {l:>14.2f} {s:>11.2f} {ratio:>7.2f} {sl} {ss}")
print(f"'llama x' / 'snapkv x': each side's median over its own at {thread_list[0]} threads")
if missing:
    print("no pair for: " + ", ".join(missing))
    sys.exit(3)
EOF
cat "$work/table.txt"
if [[ -n "$out" ]]; then
  mkdir -p "$out"
  cp "$work/llama.json" "$work/snapkv.json" "$work/table.txt" "$out/"
  echo "[bench_vs_llamacpp] JSON and table kept in $out" >&2
fi
exit "$status"
