#!/bin/bash
cd /work/wt/s14
for f in f16 Q8_0 Q4_K_M Q6_K; do
  echo "== $f $(date +%T) load $(cut -d' ' -f1 /proc/loadavg)"
  scripts/bench_vs_llamacpp.sh /work/bigm/big-$f.gguf -p 512 -n 64 -t 1,2 -r 3 \
    --snapkv /work/wt/s14/build/snapkv --llama-build /work/llama.cpp/build --out /work/vsl/$f 2>&1
done
echo "== done $(date +%T)"
