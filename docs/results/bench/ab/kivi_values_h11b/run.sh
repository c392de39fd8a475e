#!/bin/bash
# base = /tmp/kern_base_bench (h11-kern at b0cd0b2), final = /tmp/kern_final_bench (h11-kern at b735cf2),
# both build/bench/bench_kivi_attention of a Release build; alternated, one thread, CPU time
out=${1:-.}
echo "load at start: $(cat /proc/loadavg) $(date -u +%T)" > $out/decode_attend_one_cpu.txt
for i in 1 2 3; do for b in /tmp/kern_base_bench /tmp/kern_final_bench; do
  echo "== $(basename $b) round $i $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" >> $out/decode_attend_one_cpu.txt
  $b --benchmark_filter='BM_DecodeAttendOne/codec:(0|1|2)/rows:(16384|65536)/' >> $out/decode_attend_one_cpu.txt 2>&1
done; done
echo done >> $out/decode_attend_one_cpu.txt
