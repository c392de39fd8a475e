#!/usr/bin/env bash
# Held-out evaluation of a shipped model with the C++ engine (full cache, greedy), as in
# models/README.md. Usage: training/evaluate.sh MODEL.gguf CONTEXT N "task1 task2 ..." [OUTDIR]
# Writes OUTDIR/<task>-<C>.jsonl and <task>-<C>-control.jsonl (needles removed) and prints one JSON
# line per file (string_match_all x 100). SNAPKV selects the binary (default: build/snapkv).
set -euo pipefail
model=$1; context=$2; n=$3; tasks=$4; out=${5:-training/runs/eval}
snapkv=${SNAPKV:-build/snapkv}
mkdir -p "$out"
files=()
for task in $tasks; do
  "$snapkv" tasks gen --task "$task" --n "$n" --context "$context" --seed 1 --split eval \
      --tokenizer "$model" --quiet --out "$out/$task-$context.jsonl"
  "$snapkv" tasks gen --task "$task" --n "$n" --context "$context" --seed 1 --split eval \
      --tokenizer "$model" --quiet --no-needle --out "$out/$task-$context-control.jsonl"
  files+=("$out/$task-$context.jsonl" "$out/$task-$context-control.jsonl")
done
/usr/bin/python3 "$(dirname "$0")/eval_engine.py" --snapkv "$snapkv" --model "$model" \
    --jsonl "${files[@]}"
