#!/usr/bin/env bash
# Regenerates docs/results/: JSON + PNG plots of `snapkv eval` for the shipped model at 1K and 2K
# context (2047 tokens: the shipped model's context_length is 2048, BOS included): tasks with the
# question in the compressed prompt (query-aware, the paper's setting), tasks with the context
# compressed alone (question-agnostic), and perplexity after a compressed prefix. Run from
# anywhere; everything is written relative to the repository root.
#
#   scripts/make_results.sh                      # defaults below
#   N=5 CONTEXTS="1024" scripts/make_results.sh  # a quicker, smaller run
#
# Cost: every sample is prefilled once per codec (fp16, kivi2) and the 23 method x keep cells fork
# their caches from it (`snapkv eval`'s shared prefill). Measured on the project machine with the
# shipped 1.25M-parameter model and one thread: 6 tasks x N=50 take 2.6 (query-aware) and 3.1
# (question-agnostic) minutes at 1K; 3.9 and 4.4 at 2K with N=30. Shrink with N, TASKS, CONTEXTS
# or METHODS.
#
# Environment: SNAPKV (binary, default build/snapkv), MODEL (default: first models/*.gguf),
# N (samples per task), CONTEXTS, PPL_CONTEXTS (perplexity prefixes), TASKS, METHODS, KEEPS,
# WINDOWS (perplexity windows), THREADS, OUT (output directory), SEED, TEXT (perplexity text
# file; default the coreutils manual, below), EXTRA_ARGS (more `snapkv eval` cache options for
# every run, split on spaces, e.g. EXTRA_ARGS=--no-keep-window; recorded in each JSON's command).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
SNAPKV=${SNAPKV:-build/snapkv}
if [[ -z "${MODEL:-}" ]]; then
  MODEL=$(ls models/*.gguf 2>/dev/null | head -n 1 || true)
fi
if [[ -z "${MODEL}" || ! -f "${MODEL}" ]]; then
  echo "make_results.sh: error: no model, got '${MODEL}', expected models/*.gguf or MODEL=path" >&2
  exit 2
fi
if [[ ! -x "${SNAPKV}" ]]; then
  echo "make_results.sh: error: no snapkv binary, got '${SNAPKV}', expected a build" \
       "(cmake --build build --target snapkv_cli) or SNAPKV=path" >&2
  exit 2
fi
N=${N:-20}
CONTEXTS=${CONTEXTS-"1024 2047"}  # empty: no task runs
# Perplexity prefixes: prefix + 256 scored tokens must fit the model's context (2048 here).
PPL_CONTEXTS=${PPL_CONTEXTS-"1024 1792"}  # empty: no perplexity runs
TASKS=${TASKS:-niah_single,niah_multikey,niah_multivalue,niah_multiquery,vt,passkey}
METHODS=${METHODS:-full,snapkv,snapkv-proxy,streaming,chunkkv,keydiff,expected_attention,kvzip,ada-snapkv,pyramid-snapkv,kivi2,snapkv+kivi2,kvzip+kivi2}
KEEPS=${KEEPS:-0.1,0.2,0.5}
WINDOWS=${WINDOWS:-8}
THREADS=${THREADS:-2}
SEED=${SEED:-3}  # 1 is the model card's seed, 2 the dev seed of the sweep (docs/TUNING.md)
OUT=${OUT:-docs/results}
mkdir -p "$OUT"

# Held-out natural text for perplexity: the GNU coreutils manual that every Debian system carries
# (package coreutils, /usr/share/info). The models never saw it: they train on fortunes and
# /usr/share/common-licenses (training/corpus.py). Kept: chapter 1 up to the GFDL appendix (the
# license is in the training data), without info node headers and separators.
# TEXT=path overrides; TEXT=filler uses the generator's seeded filler sentences instead.
INFO=/usr/share/info/coreutils.info.gz
if [[ -z "${TEXT:-}" ]]; then
  if [[ -f "$INFO" ]]; then
    # extracted into the build tree (a stable path: the report headers print it)
    mkdir -p build
    TEXT=build/coreutils-manual.txt
    zcat "$INFO" | tr -d '\037\000' | grep -a -v '^File: coreutils.info' \
      | sed -n '/^1 Introduction$/,/^Appendix A GNU Free Documentation License$/p' > "$TEXT.$$"
    mv "$TEXT.$$" "$TEXT"  # atomic: two runs side by side never read a half-written file
  else
    echo "make_results.sh: warning: $INFO not found, perplexity uses filler text" >&2
    TEXT=filler
  fi
fi
if [[ "$TEXT" == filler ]]; then TEXT=""; fi

common=(--model "$MODEL" --methods "$METHODS" --keep "$KEEPS" --seed "$SEED" --threads "$THREADS")
if [[ -n "${EXTRA_ARGS:-}" ]]; then
  read -r -a extra <<<"$EXTRA_ARGS"
  common+=("${extra[@]}")
fi
for ctx in $CONTEXTS; do
  echo "== tasks, query-aware, context $ctx" >&2
  "$SNAPKV" eval "${common[@]}" --tasks "$TASKS" --context "$ctx" --n "$N" \
    --json "$OUT/tasks_${ctx}.json" --plot "$OUT/tasks_${ctx}.png" | tee "$OUT/tasks_${ctx}.txt"
  echo "== tasks, question-agnostic, context $ctx" >&2
  "$SNAPKV" eval "${common[@]}" --tasks "$TASKS" --context "$ctx" --n "$N" --question-agnostic \
    --json "$OUT/tasks_${ctx}_agnostic.json" --plot "$OUT/tasks_${ctx}_agnostic.png" \
    | tee "$OUT/tasks_${ctx}_agnostic.txt"
done
for ctx in $PPL_CONTEXTS; do
  echo "== perplexity, prefix $ctx" >&2
  text_args=()
  if [[ -n "${TEXT}" ]]; then text_args=(--text "$TEXT"); fi
  "$SNAPKV" eval "${common[@]}" --perplexity "${text_args[@]}" --context "$ctx" \
    --windows "$WINDOWS" --json "$OUT/ppl_${ctx}.json" --plot "$OUT/ppl_${ctx}.png" \
    | tee "$OUT/ppl_${ctx}.txt"
done
echo "make_results.sh: wrote $OUT" >&2
