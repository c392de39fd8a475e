#!/bin/bash
# rounds of 30-trial runs alternated over the given variants; min and median of the per-run minima
R=$1; shift
for i in $(seq 1 $R); do for v in "$@"; do echo "$v $(/tmp/kvb/vb_$v 30 | awk '{print $12}')"; done; done | python3 -c '
import sys,collections,statistics
d=collections.defaultdict(list)
for ln in sys.stdin:
    l,v=ln.split(); d[l].append(float(v))
for l,x in d.items(): print(l,"n=%d min=%.4f med=%.4f"%(len(x),min(x),statistics.median(x)))'
