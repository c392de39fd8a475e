#!/usr/bin/env bash
# A whole-suite eval on the shipped model, small N: every policy and codec, both protocols and
# perplexity, on seed 3. Run it with two builds and compare them with scripts/eval_diff.py: a
# change that should not move any number (a refactor, a file move) must give identical results.
# Usage: scripts/eval_suite.sh BIN OUT_DIR      (BIN: a built snapkv; a few minutes on 2 cores)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:?usage: scripts/eval_suite.sh BIN OUT_DIR}
OUT=${2:?usage: scripts/eval_suite.sh BIN OUT_DIR}
mkdir -p "$OUT"
M=models/snapkv-tiny4.gguf
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
methods=full,snapkv,snapkv-proxy,streaming,chunkkv,knorm,random,keydiff,expected_attention
methods+=,expected_attention-proxy,kvzip,ada-snapkv,pyramid-snapkv,ada-pyramid-keydiff
methods+=,snapkv+kivi2,kivi2,kivi4,kivi2r,kivi4r,kitty,zipcache,gear,zipcacher,kivi42,kivi24
methods+=,kivi42r,kivi32,kivimix,snapkv+kivi42
common=(--model "$M" --seed 3 --context 1024 --quiet --threads 2)
"$BIN" eval "${common[@]}" --methods "$methods" --keep 0.1,0.2 --n 3 --tasks all \
  --json "$OUT/qa.json" > "$OUT/qa.txt"
"$BIN" eval "${common[@]}" --question-agnostic --keep 0.1,0.2 --n 3 --tasks all \
  --methods full,snapkv,kvzip,ada-kvzip,pyramid-kvzip,keydiff,snapkv-proxy+kivi2 \
  --json "$OUT/ag.json" > "$OUT/ag.txt"
"$BIN" eval "${common[@]}" --perplexity --methods full,snapkv,streaming,snapkv+kivi2 --keep 0.2 \
  --continuation 128 --windows 1 --decode-budget 128 --json "$OUT/ppl.json" > "$OUT/ppl.txt"
echo "eval_suite: wrote $OUT/{qa,ag,ppl}.json"
