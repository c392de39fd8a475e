#!/usr/bin/env bash
# Regenerates the benchmark figures of docs/BENCHMARKS.md into one directory: run it on a QUIET
# machine (nothing else building or evaluating on the same cores; the script prints the load
# average before and after so a reader can tell). Every speed is reported next to a baseline
# measured in the same run: llama.cpp's llama-bench on the same GGUF files, OpenBLAS's sgemm of the
# same shape and the machine's memcpy bandwidth.
#
#   scripts/bench_record.sh                       # everything below, into docs/results/bench/
#   PARTS="kernels ttft" scripts/bench_record.sh  # a subset
#
# Parts (PARTS, default "engine kernels ttft serve"):
#   engine   scripts/bench_vs_llamacpp.sh on each file of $BIG_DIR/random-0.73b-{F16,Q8_0,Q4_K_M,Q6_K}
#            (F16 = the ctx20k file) at a 512-token prompt and 64 generated tokens, 2 threads, 3
#            repetitions; Q8_0 also at 1 thread (thread scaling). The files are random-weight
#            0.73B Llama GGUFs: tools/make_big_random_model.py --ctx 20480 writes the F16 one,
#            llama.cpp's llama-quantize the others (neither is committed).
#   kernels  build/bench/bench_snapkv_select (scoring + selection + compaction vs sgemm),
#            build/bench/bench_kivi_attention (decode attention per codec vs memcpy bandwidth; fp16
#            and the KIVI family) and build/bench/bench_gemv_decode (decode matvec per weight type
#            vs the read bandwidth measured in the same process), medians of 3, JSON.
#   ttft     scripts/bench_ttft.py: time to first token from a .kvc vs a fresh prefill, the shipped
#            model at 2K (3 repetitions) and the 0.73B file at 4K (TTFT_BIG_REPS, default 1).
#   serve    scripts/serve_load.py: 200 requests from 8 concurrent clients against `snapkv serve` on
#            the shipped model (failures, latency percentiles, server RSS at start and end).
#   longctx  scripts/bench_longctx.sh measure: decode after a 16K-token prompt on the 0.73B F16 file
#            (ours full and SnapKV budget 1024 from .kvc files, llama.cpp full from its prompt
#            cache), the memory-traffic bound from a read bandwidth measured in the same run, the
#            prefills' peak RSS. Not in the default PARTS: its untimed `prepare` (three 16K
#            prefills, ~25 min) runs first when $LONGCTX_WORK (default /work/longctx) lacks its files.
# Environment: OUT (default docs/results/bench), SNAPKV (default build/snapkv), LLAMA_BUILD (default
# /work/llama.cpp/build), BIG_DIR (default /work/models-big), THREADS (default 2).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
OUT=${OUT:-docs/results/bench}
SNAPKV=${SNAPKV:-build/snapkv}
LLAMA_BUILD=${LLAMA_BUILD:-/work/llama.cpp/build}
BIG_DIR=${BIG_DIR:-/work/models-big}
THREADS=${THREADS:-2}
PARTS=${PARTS:-"engine kernels ttft serve"}
TTFT_BIG_REPS=${TTFT_BIG_REPS:-1}
mkdir -p "$OUT"
[[ -x "$SNAPKV" ]] || { echo "bench_record.sh: error: no snapkv binary at '$SNAPKV'" >&2; exit 2; }
export OMP_WAIT_POLICY=passive

log() { echo "== $* (load: $(cut -d' ' -f1-3 /proc/loadavg))" | tee -a "$OUT/record.log" >&2; }
: > "$OUT/record.log"
log "start $(date -u +%FT%TZ), $("$SNAPKV" --version), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"

for part in $PARTS; do
  case "$part" in
    engine)
      for q in F16 Q8_0 Q4_K_M Q6_K; do
        f="$BIG_DIR/random-0.73b-$q.gguf"
        [[ "$q" == F16 ]] && f="$BIG_DIR/random-0.73b-ctx20k.gguf"
        [[ -f "$f" ]] || { echo "bench_record.sh: error: missing $f" >&2; exit 1; }
        t="$THREADS"
        [[ "$q" == Q8_0 ]] && t="1,$THREADS"
        log "engine $q threads $t"
        scripts/bench_vs_llamacpp.sh "$f" -p 512 -n 64 -t "$t" -r 3 --snapkv "$SNAPKV" \
          --llama-build "$LLAMA_BUILD" --out "$OUT/engine-$q" | tee "$OUT/engine-$q.txt"
      done
      ;;
    kernels)
      log "kernels: bench_snapkv_select"
      build/bench/bench_snapkv_select --benchmark_repetitions=3 \
        --benchmark_report_aggregates_only=true --benchmark_out="$OUT/select.json" \
        --benchmark_out_format=json | tee "$OUT/select.txt"
      # The filter of record: fp16 and the KIVI family (kivi42 is codec 9, kivi32 12, kivimix 13) (zipcache and gear build their caches
      # for minutes; run them alone with --benchmark_filter='BM_DecodeAttend/codec:[6-9]').
      log "kernels: bench_kivi_attention"
      build/bench/bench_kivi_attention --benchmark_repetitions=3 \
        --benchmark_report_aggregates_only=true \
        --benchmark_filter='BM_MemcpyBandwidth|BM_DecodeAttend/codec:([0-5]|9|12|13)/' \
        --benchmark_out="$OUT/kivi_attention.json" \
        --benchmark_out_format=json | tee "$OUT/kivi_attention.txt"
      log "kernels: bench_gemv_decode"
      build/bench/bench_gemv_decode --benchmark_repetitions=3 \
        --benchmark_report_aggregates_only=true --benchmark_out="$OUT/gemv_decode.json" \
        --benchmark_out_format=json | tee "$OUT/gemv_decode.txt"
      ;;
    ttft)
      rm -f "$OUT/ttft.jsonl"
      log "ttft: shipped model, 2K"
      python3 scripts/bench_ttft.py --snapkv "$SNAPKV" --threads "$THREADS" --reps 3 \
        --cases models/snapkv-tiny4.gguf:1900 --json "$OUT/ttft.jsonl" | tee "$OUT/ttft.txt"
      log "ttft: 0.73B, 4K"
      python3 scripts/bench_ttft.py --snapkv "$SNAPKV" --threads "$THREADS" \
        --reps "$TTFT_BIG_REPS" --cases "$BIG_DIR/random-0.73b-ctx20k.gguf:4096" \
        --json "$OUT/ttft.jsonl" | tee -a "$OUT/ttft.txt"
      ;;
    serve)
      log "serve: 200 requests, 8 clients"
      python3 scripts/serve_load.py --snapkv "$SNAPKV" --json "$OUT/serve_load.json" \
        | tee "$OUT/serve_load.txt"
      ;;
    longctx)
      export WORK=${LONGCTX_WORK:-/work/longctx} SNAPKV LLAMA_BUILD THREADS
      if [[ ! -f "$WORK/snapkv1024-short.json" || ! -f "$WORK/llama.session" ]]; then
        log "longctx: prepare (untimed prefills) into $WORK"
        MODEL="$BIG_DIR/random-0.73b-ctx20k.gguf" scripts/bench_longctx.sh prepare
      fi
      log "longctx: measure"
      OUT="$OUT/longctx" MODEL="$BIG_DIR/random-0.73b-ctx20k.gguf" scripts/bench_longctx.sh measure
      ;;
    *)
      echo "bench_record.sh: error: unknown part '$part', expected engine|kernels|ttft|serve|longctx" >&2
      exit 2
      ;;
  esac
done
log "end $(date -u +%FT%TZ)"
