#!/usr/bin/env bash
# Reproduces models/snapkv-small8k.gguf (21.4M parameters, 8,192-token context) on one CUDA GPU
# with python3 that holds torch >= 2.0, numpy and sentencepiece: run r1 trains from random
# weights through a context curriculum of 32 to 8,192 tokens, run r2 continues it at 2,048-8,192
# tokens with the multi-needle tasks weighted up, and the result is converted to Q8_0.
#
#   training/reproduce_small8k.sh [OUT.gguf]     (default OUT: training/runs/snapkv-small8k.gguf)
#
# --fit-seconds scales each run's steps to the GPU's measured speed (r1 about 390 s, r2 about
# 280 s of steps), so another GPU runs a different number of steps than the logs record
# (training/logs/small8k-r1-log.txt: 15,059 steps; small8k-r2-log.txt: 7,893 steps, both on one
# H100). SNAPKV selects the task generator: build/snapkv, or the static training/taskgen.cpp
# where the engine's libraries are missing. NATURAL: natural-text paragraphs written by
# `training/corpus.py --dump-natural FILE` on a machine with Debian's fortunes (default: read them
# here). The tokenizer is the shipped models' (training/runs/tok, training/make_tokenizer.py).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-training/runs/snapkv-small8k.gguf}
py=${PYTHON:-python3}
snapkv=${SNAPKV:-build/snapkv}
natural=()
[[ -n "${NATURAL:-}" ]] && natural=(--natural "$NATURAL")
common=(--tokenizer training/runs/tok --snapkv "$snapkv" "${natural[@]}" --device cuda
        --pool-workers 12 --eval-n 8 --eval-every 100000 --copy-random 0.5 --decay-steps 300)

W=niah_multikey=4+niah_multiquery=2
M=niah_multikey=2+niah_multiquery=2
"$py" training/train.py --name big8k "${common[@]}" --fit-seconds 390 --pool-max 400 \
  --ckpt-minutes 3 --n-embd 512 --n-layer 7 --n-head 8 --n-head-kv 2 --rope-base 100000 \
  --stages "copy32:128:800,128:64:500:$W,256:48:300:$W,256:48:500:mkq=6+$M,512:32:400:mkq=5+$M,1024:16:400:mkq=4+$M,1024/2048:8:500:mkq=3+$M,2048/4096:4:600:mkq=3+$M,4096/8192:2:900:mkq=3+$M"

K=mkq=4+niah_multikey=2+niah_multivalue=3+niah_multiquery=3+vt=2
"$py" training/train.py --name big8k-c --init training/runs/big8k/ckpt.pt "${common[@]}" \
  --fit-seconds 280 --pool-max 300 --ckpt-minutes 2 --lr 3e-4 --warmup 20 \
  --stages "2048:8:200:$K,4096/8192:2:1300:$K"

# The shipped file went through `training/transfer.py pack/unpack` (f16) on its way off the GPU
# machine before this conversion.
"${SNAPKV_CONVERT:-build/snapkv}" convert --in training/runs/big8k-c/export --out "$out" \
  --type q8_0
echo "reproduce_small8k.sh: wrote $out" >&2
