#!/usr/bin/env bash
# Defaults sweep: runs `snapkv eval` on the dev seed for every pooling kernel,
# observation window and pool, both protocols, one JSON per setting, then prints the table and the
# best setting per method and keep (scripts/tune_table.py). Resumable: settings whose JSON exists
# are skipped.
#
#   scripts/tune_defaults.sh [OUT_DIR]     (env: SNAPKV, MODEL, N, SEED, CONTEXT, THREADS, KEEPS,
#                                           KERNELS, WINDOWS, POOLS)
#
# SEED defaults to 2, the project's dev seed: figures reported in docs/RESULTS.md never use it (the
# model card uses seed 1, reported results use other seeds), so tuning on it does not leak into them.
set -euo pipefail
OUT=${1:-tune-out}
SNAPKV=${SNAPKV:-build/snapkv}
MODEL=${MODEL:-models/snapkv-tiny4.gguf}
N=${N:-20}
SEED=${SEED:-2}
CONTEXT=${CONTEXT:-1024}
THREADS=${THREADS:-1}
KEEPS=${KEEPS:-0.1,0.2,0.5}
KERNELS=${KERNELS:-7 15 31 63}
WINDOWS=${WINDOWS:-32 8 16 64}
POOLS=${POOLS:-max avg}
TASKS=niah_single,niah_multikey,passkey,niah_multivalue,niah_multiquery,vt
mkdir -p "$OUT"
for window in $WINDOWS; do
  for pool in $POOLS; do
    for kernel in $KERNELS; do
      for protocol in query_aware question_agnostic; do
        name="$OUT/${protocol}_w${window}_${pool}_k${kernel}.json"
        [[ -s "$name" ]] && continue
        if [[ $protocol == query_aware ]]; then
          extra=(--methods full,snapkv,snapkv-proxy,chunkkv)
        else
          extra=(--methods full,snapkv,chunkkv --question-agnostic)
        fi
        "$SNAPKV" eval --model "$MODEL" --tasks "$TASKS" --context "$CONTEXT" --n "$N" \
          --seed "$SEED" --keep "$KEEPS" --window "$window" --pool "$pool" --kernel "$kernel" \
          --threads "$THREADS" --quiet --json "$name.tmp" "${extra[@]}" >/dev/null
        mv "$name.tmp" "$name"
        echo "done $name" >&2
      done
    done
  done
done
python3 "$(dirname "$0")/tune_table.py" "$OUT"
