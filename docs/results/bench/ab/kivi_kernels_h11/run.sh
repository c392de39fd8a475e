#!/bin/bash
# main = /tmp/kern_bench_base (main fcc3cfa kernels + the bench's new BM_DecodeAttendOne), branch = /tmp/kern_bench_final
out=/tmp/kern_final_out; mkdir -p $out
echo "load at start: $(cat /proc/loadavg) $(date -u +%T)" > $out/wall.txt
for i in 1 2; do for b in /tmp/kern_bench_base /tmp/kern_bench_final; do
  echo "== $(basename $b) round $i $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" >> $out/wall.txt
  $b --benchmark_filter='BM_MemcpyBandwidth|BM_DecodeAttend/codec:(0|1|2)/' --benchmark_repetitions=3 --benchmark_report_aggregates_only=true >> $out/wall.txt 2>&1
done; done
echo "load at start: $(cat /proc/loadavg) $(date -u +%T)" > $out/cpu.txt
for i in 1 2 3; do for b in /tmp/kern_bench_base /tmp/kern_bench_final; do
  echo "== $(basename $b) round $i $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" >> $out/cpu.txt
  $b --benchmark_filter='BM_DecodeAttendOne/codec:(0|1|2)/' >> $out/cpu.txt 2>&1
done; done
echo done >> $out/cpu.txt
