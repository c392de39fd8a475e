#!/usr/bin/env bash
# Held-out evaluation of a model for its model card, with the C++ engine: full cache, greedy, RULER
# string_match_all x 100 on the eval split (seed 1), lengths counted with the model's tokenizer;
# each task once with its needles and once as the no-needle control (same prompts, needles left
# out: accuracy near chance means the answer really comes from the context).
#
#   training/evaluate.sh MODEL.gguf CONTEXT N "task1 task2 ..." [OUTDIR]
#
# Writes OUTDIR/full-C.json and OUTDIR/control-C.json (`snapkv eval --json`, every sample's
# prediction included) and prints both summary tables. SNAPKV selects the binary (default
# build/snapkv), THREADS the engine threads (default 0 = all cores).
set -euo pipefail
if [[ $# -lt 4 ]]; then
  echo "usage: training/evaluate.sh MODEL.gguf CONTEXT N \"task1 task2 ...\" [OUTDIR]" >&2
  exit 2
fi
model=$1; context=$2; n=$3; tasks=${4// /,}; out=${5:-training/runs/eval}
snapkv=${SNAPKV:-build/snapkv}
mkdir -p "$out"
common=(--model "$model" --tasks "$tasks" --context "$context" --n "$n" --methods full
        --seed 1 --threads "${THREADS:-0}" --quiet)
"$snapkv" eval "${common[@]}" --json "$out/full-$context.json"
"$snapkv" eval "${common[@]}" --no-needle --json "$out/control-$context.json"
