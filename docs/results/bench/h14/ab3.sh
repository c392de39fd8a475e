#!/bin/bash
# usage: ab3.sh FILTER N bin...  -> alternated over bins, both cores, 3 reps each (median), prints medians over runs
F=$1; N=$2; shift 2
for i in $(seq $N); do
  for b in "$@"; do
    $b --benchmark_filter="$F" --benchmark_repetitions=3 --benchmark_report_aggregates_only=true 2>&1 | grep -E '^BM_.*_median' | awk -v t=$b '{print t, $1, $2}'
  done
done | python3 -c "
import sys,statistics,collections
d=collections.defaultdict(list)
for l in sys.stdin:
  t,n,v=l.split(); d[(n,t)].append(float(v))
for (n,t),v in sorted(d.items()):
  print(f'{n[:56]:56s} {t[-24:]:24s} med {statistics.median(v):.3f} min {min(v):.3f} {v}')
"
