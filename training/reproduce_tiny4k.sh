#!/usr/bin/env bash
# Reproduces models/snapkv-tiny4k.gguf (4,096-token context) from the shipped 2,048-token model:
# imports models/snapkv-tiny4.gguf into a torch checkpoint (training/import_gguf.py), continues it
# at 1024/2048/4096 tokens with linear RoPE position interpolation, factor 2 (run r13), continues
# that at a lower rate with key matching weighted up (run r14, 272 steps), and converts the result.
#
#   training/reproduce_tiny4k.sh [OUT.gguf]     (default OUT: training/runs/snapkv-tiny4k.gguf)
#
# Safe to rerun after an interruption: train.py resumes from training/runs/rNN/ckpt.pt and a
# finished run returns at once. Needs /usr/bin/python3 with python3-torch and python3-sentencepiece,
# the `sentencepiece` tools, and build/snapkv (cmake --build build --target snapkv_cli).
# Logs: training/runs/r13/log.txt, training/runs/r14/log.txt. The command is also listed in models/README.md.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-training/runs/snapkv-tiny4k.gguf}
py=/usr/bin/python3
snapkv=${SNAPKV:-build/snapkv}
if [[ ! -x "$snapkv" ]]; then
  echo "reproduce_tiny4k.sh: error: $snapkv not found, expected the built CLI" \
    "(cmake --build build --target snapkv_cli) or SNAPKV=path" >&2
  exit 2
fi
export OMP_NUM_THREADS=1

[[ -f training/runs/tok/spm.model ]] || "$py" training/make_tokenizer.py --out training/runs/tok
[[ -f training/runs/tiny4-import/ckpt.pt ]] ||
  "$py" training/import_gguf.py --gguf models/snapkv-tiny4.gguf \
    --out training/runs/tiny4-import/ckpt.pt

K1=mkq=5+niah_multikey=3+passkey=3+niah_single=3+niah_multiquery=2
K2=mkq=8+niah_multikey=4+passkey=2+niah_single=2+niah_multiquery=2
"$py" training/train.py --name r13 --init training/runs/tiny4-import/ckpt.pt --threads 1 \
  --rope-scale 2 --pool-max 150 --copy-random 0.5 --eval-n 4 --ckpt-minutes 5 --lr 5e-4 \
  --warmup 30 --decay-steps 160 --stop-step 420 \
  --stages "1024/2048/4096/4096/4096:1:195:$K1,1024/2048/4096/4096:1:225:$K2"

# r14: r13 continued at a lower rate with key matching weighted up, stopped at step 272
"$py" training/train.py --name r14 --init training/runs/r13/ckpt.pt --threads 1 --pool-max 150 \
  --copy-random 0.5 --eval-n 4 --ckpt-minutes 5 --lr 2.5e-4 --warmup 10 --decay-steps 150 \
  --stop-step 272 \
  --stages "1024/2048/4096/4096:1:400:mkq=8+niah_multikey=4+passkey=3+niah_single=2+niah_multiquery=2"

"$snapkv" convert --in training/runs/r14/export --out "$out" --type f32
echo "reproduce_tiny4k.sh: wrote $out (compare: cmp $out models/snapkv-tiny4k.gguf)" >&2
