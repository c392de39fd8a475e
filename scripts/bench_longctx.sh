#!/usr/bin/env bash
# Long-context decode: a 16K-token prompt on the 0.73B F16 file.
# The prefill of such a prompt takes minutes, so it runs once, untimed, in `prepare`; `measure`
# times only the generated tokens, each side starting from its saved prompt state:
#
#   scripts/bench_longctx.sh prepare   # slow (two 16K prefills of ours, one of llama.cpp's and a
#                                      # 4K one), untimed, resumable; `prepare llama|ours`: one side
#   scripts/bench_longctx.sh measure   # decode only, medians of REPS; run it on a QUIET machine
#
# prepare (artifacts in $WORK, outside the repository):
#   doc.txt            a seeded filler document of about $TOKENS tokens (scripts/bench_ttft.py's)
#   full.kvc           `snapkv compress --method full`: every prompt row, fp16
#   snapkv1024.kvc     `snapkv compress --method snapkv --budget 1024 --chunk-mode every_chunk
#                      --prefill-chunk $CHUNK`: the chunked prefill that compresses after every chunk
#   llama.session      llama-cli --prompt-cache: llama.cpp's state after the same prompt
#   *.json, *.rss      each prefill's JSON and its peak RSS (/usr/bin/time's maximum resident set),
#                      also of an every_chunk prefill of a $SHORT_TOKENS-token prefix of the document
#                      (the peak of a bounded prefill must not grow with the prompt)
# measure (into $OUT, default docs/results/bench/longctx):
#   ours full, ours snapkv-1024: `snapkv ask --cache X.kvc --max-tokens $GEN --ignore-eos` with
#     $REPS identical questions, each on a fresh copy of the loaded cache (decode_tok_s per answer)
#   llama.cpp full: llama-cli --prompt-cache-ro, $REPS runs; its "eval time" line (generated tokens
#     only: the prompt state is loaded, its last token recomputed, then -n $GEN tokens)
#   the memory-traffic bound of each of our runs: (weight bytes read per token + kept KV bytes at
#     the mid-point of the generation) / read bandwidth, the bandwidth measured in the same run by
#     build/bench/bench_read_bandwidth ($THREADS threads; the higher of its 4 KiB-page and 2 MiB
#     huge-page rates: the weights stream on 2 MiB pages when the page cache holds the file in
#     2 MiB folios, or with SNAPKV_WEIGHTS=huge, this script's default for the decode runs)
#     — and the decode's fraction of that bound
#   longctx.json (everything), longctx.txt (a table)
# Environment: WORK (/work/longctx), OUT, SNAPKV (build/snapkv), SNAPKV_WEIGHTS (huge), LLAMA_BUILD (/work/llama.cpp/build),
# MODEL (/work/models-big/random-0.73b-ctx20k.gguf), THREADS (2), TOKENS (16384), SHORT_TOKENS
# (4096), CHUNK (512), GEN (64), REPS (3).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
WORK=${WORK:-/work/longctx}
OUT=${OUT:-docs/results/bench/longctx}
SNAPKV=${SNAPKV:-build/snapkv}
LLAMA_BUILD=${LLAMA_BUILD:-/work/llama.cpp/build}
MODEL=${MODEL:-/work/models-big/random-0.73b-ctx20k.gguf}
THREADS=${THREADS:-2}
TOKENS=${TOKENS:-16384}
SHORT_TOKENS=${SHORT_TOKENS:-4096}
CHUNK=${CHUNK:-512}
GEN=${GEN:-64}
REPS=${REPS:-3}
# How `measure` has snapkv hold the weights (LlamaModel::weight_storage): huge (read into 2 MiB
# pages: 1.5-3 s more at load, the decode streams on huge TLB entries) or mmap (the default of the
# library, 2 MiB entries only where the page cache holds the file in 2 MiB folios).
WEIGHTS=${SNAPKV_WEIGHTS:-huge}
QUESTION=" Question: what is the pass key? Answer: the pass key is"
LLAMA_CLI="$LLAMA_BUILD/bin/llama-cli"
export OMP_WAIT_POLICY=passive

die() { echo "bench_longctx.sh: error: $*" >&2; exit "${2:-1}"; }
log() { echo "[bench_longctx] $* (load: $(cut -d' ' -f1-3 /proc/loadavg))" >&2; }
need() { [[ -e "$1" ]] || die "missing $1${2:+ ($2)}"; }

stage=${1:-}
[[ "$stage" == prepare || "$stage" == measure ]] ||
  die "usage: scripts/bench_longctx.sh prepare [all|llama|ours] | measure, got '${stage}'" 2
[[ -x "$SNAPKV" ]] || die "no snapkv binary at '$SNAPKV'" 2
need "$MODEL" "tools/make_big_random_model.py --ctx 20480 writes it"
need "$LLAMA_CLI" "llama.cpp built beside the project"
# The context llama.cpp needs: the prompt, the recomputed last token and the generated ones.
LLAMA_CTX=$((TOKENS + 1024))

# Peak RSS (bytes) of a command, written to $1; the command's stdout goes to $2.
with_peak_rss() {
  local rss_file=$1 out_file=$2
  shift 2
  /usr/bin/time -f '%M' -o "$rss_file.kib" "$@" > "$out_file"
  echo $(($(tail -n1 "$rss_file.kib") * 1024)) > "$rss_file"
  rm -f "$rss_file.kib"
}

# The llama.cpp side: its state after the prompt, and the peak RSS of that prefill.
prepare_llama() {
  if [[ ! -f "$WORK/llama.session" ]]; then
    log "llama.cpp: prompt state (llama-cli --prompt-cache)"
    /usr/bin/time -f '%M' -o "$WORK/llama-prefill.rss.kib" \
      "$LLAMA_CLI" -m "$MODEL" -f "$WORK/doc.txt" -c "$LLAMA_CTX" -n 1 -t "$THREADS" --temp 0 \
      --ignore-eos -no-cnv --prompt-cache "$WORK/llama.session.tmp" < /dev/null \
      > "$WORK/llama-prefill.out" 2> "$WORK/llama-prefill.err"
    need "$WORK/llama.session.tmp" "llama-cli wrote no prompt cache: see $WORK/llama-prefill.err"
    mv "$WORK/llama.session.tmp" "$WORK/llama.session"
  fi
  if [[ ! -f "$WORK/llama-prefill.rss" && -f "$WORK/llama-prefill.rss.kib" ]]; then
    echo $(($(tail -n1 "$WORK/llama-prefill.rss.kib") * 1024)) > "$WORK/llama-prefill.rss"
  fi
}

# Our side: one `snapkv compress` per artifact, skipped when its JSON exists (written last).
prepare_ours() {
  local common=(--model "$MODEL" --threads "$THREADS" --json)
  if [[ ! -f "$WORK/full.json" ]]; then
    log "ours: full cache (end_of_prompt)"
    with_peak_rss "$WORK/full.rss" "$WORK/full.json.tmp" "$SNAPKV" compress "${common[@]}" \
      --prompt-file "$WORK/doc.txt" --method full --out "$WORK/full.kvc"
    mv "$WORK/full.json.tmp" "$WORK/full.json"
  fi
  if [[ ! -f "$WORK/snapkv1024.json" ]]; then
    log "ours: snapkv budget 1024, every_chunk, prefill chunk $CHUNK"
    with_peak_rss "$WORK/snapkv1024.rss" "$WORK/snapkv1024.json.tmp" "$SNAPKV" compress \
      "${common[@]}" --prompt-file "$WORK/doc.txt" --method snapkv --budget 1024 \
      --chunk-mode every_chunk --prefill-chunk "$CHUNK" --out "$WORK/snapkv1024.kvc"
    mv "$WORK/snapkv1024.json.tmp" "$WORK/snapkv1024.json"
  fi
  if [[ ! -f "$WORK/snapkv1024-short.json" ]]; then
    log "ours: the same every_chunk prefill of the $SHORT_TOKENS-token prefix (peak RSS only)"
    with_peak_rss "$WORK/snapkv1024-short.rss" "$WORK/snapkv1024-short.json.tmp" "$SNAPKV" \
      compress "${common[@]}" --prompt-file "$WORK/doc-short.txt" --method snapkv --budget 1024 \
      --chunk-mode every_chunk --prefill-chunk "$CHUNK" --out "$WORK/snapkv1024-short.kvc"
    rm -f "$WORK/snapkv1024-short.kvc"
    mv "$WORK/snapkv1024-short.json.tmp" "$WORK/snapkv1024-short.json"
  fi
}

# Resumable: every step is skipped when its output exists. `prepare llama` / `prepare ours` run
# one side only (the two may run at once, e.g. in two shells).
prepare() {
  local side=${1:-all}
  [[ "$side" == all || "$side" == llama || "$side" == ours ]] ||
    die "usage: scripts/bench_longctx.sh prepare [all|llama|ours], got '$side'" 2
  mkdir -p "$WORK"
  if [[ ! -f "$WORK/doc.txt" ]]; then
    log "document of about $TOKENS tokens"
    python3 - "$SNAPKV" "$MODEL" "$TOKENS" "$WORK/doc.txt" <<'PY'
import sys
sys.path.insert(0, "scripts")
import bench_ttft
snapkv, model, tokens, path = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
n = bench_ttft.make_document(snapkv, model, tokens, path + ".tmp", 3)
print("[bench_longctx] doc.txt: %d tokens" % n, file=sys.stderr)
PY
    mv "$WORK/doc.txt.tmp" "$WORK/doc.txt"
  fi
  if [[ ! -f "$WORK/doc-short.txt" ]]; then
    python3 - "$SNAPKV" "$MODEL" "$SHORT_TOKENS" "$WORK/doc.txt" "$WORK/doc-short.txt" <<'PY'
import sys
sys.path.insert(0, "scripts")
import bench_ttft
snapkv, model, tokens, src, dst = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
words = open(src).read().split(" ")
tmp = dst + ".tmp"
lo, hi = 1, len(words)
while lo < hi:  # the longest prefix of whole words within `tokens` tokens
    mid = (lo + hi + 1) // 2
    open(tmp, "w").write(" ".join(words[:mid]))
    if bench_ttft.count_tokens(snapkv, model, tmp) <= tokens:
        lo = mid
    else:
        hi = mid - 1
open(tmp, "w").write(" ".join(words[:lo]))
print("[bench_longctx] doc-short.txt: %d tokens" % bench_ttft.count_tokens(snapkv, model, tmp),
      file=sys.stderr)
PY
    mv "$WORK/doc-short.txt.tmp" "$WORK/doc-short.txt"
  fi
  [[ "$side" == ours ]] || prepare_llama
  [[ "$side" == llama ]] || prepare_ours
  log "prepare ($side) done: $(ls "$WORK" | tr '\n' ' ')"
}

measure() {
  mkdir -p "$OUT"
  for f in doc.txt full.kvc snapkv1024.kvc llama.session full.json snapkv1024.json; do
    need "$WORK/$f" "run 'scripts/bench_longctx.sh prepare' first"
  done
  local bw_bench=build/bench/bench_read_bandwidth
  [[ -x "$bw_bench" ]] || die "no $bw_bench (cmake --build build --target bench_read_bandwidth)" 2
  log "start $(date -u +%FT%TZ)"
  log "read bandwidth ($THREADS threads)"
  "$bw_bench" --benchmark_filter="BM_ReadBandwidth(HugePages)?/$THREADS/" --benchmark_repetitions=3 \
    --benchmark_report_aggregates_only=true --benchmark_out="$OUT/read_bandwidth.json" \
    --benchmark_out_format=json > /dev/null
  local questions="$WORK/questions.txt"
  : > "$questions"
  for ((i = 0; i < REPS; ++i)); do echo "$QUESTION" >> "$questions"; done
  for name in full snapkv1024; do
    log "ours: decode $GEN tokens from $name.kvc, $REPS repetitions, SNAPKV_WEIGHTS=$WEIGHTS"
    SNAPKV_WEIGHTS="$WEIGHTS" "$SNAPKV" ask --model "$MODEL" --cache "$WORK/$name.kvc" --questions "$questions" \
      --max-tokens "$GEN" --ignore-eos --threads "$THREADS" \
      --json "$OUT/ours-$name.json" > /dev/null
  done
  for ((i = 0; i < REPS; ++i)); do
    log "llama.cpp: decode $GEN tokens from the prompt state, repetition $((i + 1))/$REPS"
    "$LLAMA_CLI" -m "$MODEL" -f "$WORK/doc.txt" -c "$LLAMA_CTX" -n "$GEN" -t "$THREADS" --temp 0 \
      --ignore-eos -no-cnv --prompt-cache "$WORK/llama.session" --prompt-cache-ro < /dev/null \
      > /dev/null 2> "$OUT/llama-$i.err"
  done
  log "end $(date -u +%FT%TZ)"
  python3 scripts/longctx_report.py --work "$WORK" --out "$OUT" --model "$MODEL" --reps "$REPS" \
    --gen "$GEN" --threads "$THREADS" | tee "$OUT/longctx.txt"
}

"$stage" "${@:2}"
