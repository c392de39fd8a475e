#!/usr/bin/env bash
# Reproduces models/snapkv-tiny4.gguf from scratch: tokenizer, the four training runs (r7, then the
# --init continuations r8b, r10, r11) and the GGUF conversion. About 165 minutes on one core.
#
#   training/reproduce_tiny4.sh [OUT.gguf]     (default OUT: training/runs/snapkv-tiny4.gguf)
#
# Safe to rerun after an interruption: every train.py call resumes from its run's checkpoint and a
# finished run returns at once. Needs /usr/bin/python3 with python3-torch and python3-sentencepiece,
# the `sentencepiece` tools, and build/snapkv (cmake --build build --target snapkv_cli).
# Logs: training/runs/<run>/log.txt. The exact commands are also listed in models/README.md.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-training/runs/snapkv-tiny4.gguf}
py=/usr/bin/python3
snapkv=${SNAPKV:-build/snapkv}
if [[ ! -x "$snapkv" ]]; then
  echo "reproduce_tiny4.sh: error: $snapkv not found, expected the built CLI" \
    "(cmake --build build --target snapkv_cli) or SNAPKV=path" >&2
  exit 2
fi
export OMP_NUM_THREADS=1

[[ -f training/runs/tok/spm.model ]] || "$py" training/make_tokenizer.py --out training/runs/tok

W=niah_multikey=4+niah_multiquery=2
M=niah_multikey=2+niah_multiquery=2
"$py" training/train.py --name r7 --threads 1 --copy-random 0.5 --eval-n 24 --decay-steps 200 \
  --stages "copy32:128:800,128:32:500:$W,256:16:300:$W,256:16:500:mkq=6+$M,512:8:400:mkq=5+$M,1024:4:400:mkq=4+$M,1024/2048:2:500:mkq=3+$M"

K=mkq=8+niah_multikey=3+niah_multiquery=2
common=(--threads 1 --copy-random 0.5 --eval-n 24)
"$py" training/train.py --name r8b --init training/runs/r7/ckpt.pt "${common[@]}" \
  --lr 5e-4 --warmup 50 --decay-steps 300 --stages "1024:4:800:$K"
"$py" training/train.py --name r10 --init training/runs/r8b/ckpt.pt "${common[@]}" \
  --lr 5e-4 --warmup 20 --decay-steps 150 --stages "1024/2048:2:300:$K"
"$py" training/train.py --name r11 --init training/runs/r10/ckpt.pt "${common[@]}" \
  --lr 2.5e-4 --warmup 10 --decay-steps 100 --stages "1024:4:150:$K"

"$snapkv" convert --in training/runs/r11/export-1024 --out "$out" --type f32
echo "reproduce_tiny4.sh: wrote $out (compare: cmp $out models/snapkv-tiny4.gguf)" >&2
