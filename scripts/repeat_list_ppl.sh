#!/usr/bin/env bash
# Long-answer check for the decode-time budget (--decode-budget / --decode-interval): perplexity
# of a list of numbers being repeated. Each text is "Remember this list of numbers: L." + a
# haystack of task filler + "The list of numbers, repeated exactly: L". The prefix (compressed,
# then kept under the decode budget) ends right before the repeat; the continuation scored is the
# repeat itself, teacher-forced, so it measures whether the cache still holds the rows that the
# next items must be copied from while the budget evicts during "generation". The shipped model
# never learned to answer with more than four items (niah_multivalue with 12 values answers
# four), so a generated-answer task cannot measure this on it; copying by induction it can do.
#
# Usage: scripts/repeat_list_ppl.sh OUT_DIR   (env: MODEL, SEEDS, ITEMS, HAYSTACK, BUDGETS,
#        INTERVAL, METHODS, SNAPKV)
set -euo pipefail
out=${1:?usage: scripts/repeat_list_ppl.sh OUT_DIR}
MODEL=${MODEL:-models/snapkv-tiny4.gguf}
SNAPKV=${SNAPKV:-build/snapkv}
SEEDS=${SEEDS:-"3 4 5 6"}
ITEMS=${ITEMS:-40}          # numbers in the list (7 digits each: ~9 tokens per item)
HAYSTACK=${HAYSTACK:-600}   # filler tokens between the list and its repeat
BUDGETS=${BUDGETS:-"0 256 128"}
INTERVAL=${INTERVAL:-16}
METHODS=${METHODS:-full,snapkv,streaming,keydiff}
mkdir -p "$out"
count() { "$SNAPKV" tokenize --model "$MODEL" --file "$1" | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))'; }
for seed in $SEEDS; do
  hay="$out/haystack_$seed.jsonl"
  "$SNAPKV" tasks gen --task passkey --n 1 --context "$HAYSTACK" --seed "$seed" --no-needle \
    --quiet --out "$hay"
  python3 - "$hay" "$seed" "$ITEMS" "$out/text_$seed.txt" "$out/prefix_$seed.txt" \
    "$out/repeat_$seed.txt" <<'PY'
import json, random, sys
hay_file, seed, items, text_path, prefix_path, repeat_path = sys.argv[1:]
rng = random.Random(int(seed) * 7919 + 17)
numbers = ", ".join(str(rng.randrange(1000000, 10000000)) for _ in range(int(items)))
haystack = json.loads(open(hay_file).readline())["context"].strip()
prefix = "Remember this list of numbers: " + numbers + ".\n" + haystack + \
    "\nThe list of numbers, repeated exactly:"
repeat = " " + numbers + "."
open(prefix_path, "w").write(prefix)
open(repeat_path, "w").write(repeat)
open(text_path, "w").write(prefix + repeat)
PY
  # prefix tokens with BOS (the eval's --context counts BOS); continuation = the rest of the text.
  n_prefix=$(count "$out/prefix_$seed.txt")
  n_text=$(( $(count "$out/text_$seed.txt") - 1 ))
  n_cont=$(( n_text - (n_prefix - 1) ))
  for budget in $BUDGETS; do
    "$SNAPKV" eval --model "$MODEL" --perplexity --text "$out/text_$seed.txt" \
      --context "$n_prefix" --continuation "$n_cont" --windows 1 --keep 1.0 \
      --methods "$METHODS" --decode-budget "$budget" --decode-interval "$INTERVAL" \
      --threads 1 --quiet --json "$out/ppl_seed${seed}_budget${budget}.json" \
      > "$out/ppl_seed${seed}_budget${budget}.txt"
  done
done
python3 - "$out" <<'PY'
import glob, json, math, re, sys, collections
out = sys.argv[1]
nll = collections.defaultdict(lambda: [0.0, 0])
for path in sorted(glob.glob(out + "/ppl_seed*_budget*.json")):
    budget = int(re.search(r"budget(\d+)", path).group(1))
    data = json.load(open(path))
    for cell in data["results"]:
        key = (budget, cell["method"])
        nll[key][0] += math.log(cell["perplexity"]) * cell["n_scored_tokens"]
        nll[key][1] += cell["n_scored_tokens"]
print("| decode budget | method | perplexity of the repeated list | tokens scored |")
print("|---|---|---|---|")
for (budget, method), (s, n) in sorted(nll.items()):
    print(f"| {budget if budget else 'none'} | {method} | {math.exp(s / n):.3f} | {n} |")
PY
