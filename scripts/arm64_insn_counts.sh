#!/usr/bin/env bash
# Dynamic instruction counts per kernel call on arm64, under user-mode qemu (qemu-aarch64 -cpu
# max), at each arm64 ISA level (scalar, neon, neon_dot, forced with SNAPKV_ISA), and the ratio to
# the scalar level. These are instruction counts, not timings: they show how much work each level
# issues, not how fast a CPU runs it.
# How: tools/kernel_calls calls one kernel N times on fixed shapes. qemu logs each translated block's
# guest instructions (-d in_asm) and every block it executes (-d exec, with nochain so no block is
# entered unlogged); the count of a run is the sum over executed blocks of their lengths. Two runs
# that differ only in N (1 and 3 calls) give the instructions per call as their difference / 2,
# so the program's start-up and set-up cancel out.
# Needs the cross toolchain and qemu-user (scripts/test_arm64.sh installs them); builds
# kernel_calls in build-arm64/ (ARM64_BUILD_DIR).
# Usage: scripts/arm64_insn_counts.sh [kernel ...]   (default: every kernel of kernel_calls --list)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${ARM64_BUILD_DIR:-build-arm64}
for tool in qemu-aarch64 aarch64-linux-gnu-g++ python3; do
  command -v "$tool" >/dev/null || { echo "arm64_insn_counts: $tool not found (scripts/test_arm64.sh installs it)" >&2; exit 1; }
done
launcher=()
if command -v ccache >/dev/null 2>&1; then
  export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=true
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
fi
if [ ! -f "$BUILD_DIR/CMakeCache.txt" ]; then
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake \
    -DCMAKE_BUILD_TYPE=Release -DSNAPKV_WERROR=ON -DSNAPKV_BUILD_BENCH=OFF "${launcher[@]}" >/dev/null
fi
cmake --build "$BUILD_DIR" -j"${JOBS:-$(nproc)}" --target kernel_calls >/dev/null
bin="$BUILD_DIR/tests/kernel_calls"
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
qemu=(qemu-aarch64 -cpu max)
if (($#)); then kernels=("$@"); else mapfile -t kernels < <("${qemu[@]}" "$bin" --list); fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Guest instructions executed by one run: qemu's log on stdin.
count() {
  python3 -c '
import re, sys
length, last, total = {}, None, 0
insn = re.compile(r"^0x([0-9a-f]+):\s")
trace = re.compile(r"^Trace \d+: \S+ \[[0-9a-f]+/([0-9a-f]+)/")
for line in sys.stdin:
    if line.startswith("IN:"):
        last = None
        continue
    m = insn.match(line)
    if m:
        if last is None:  # first instruction of a block: its pc names the block
            last = int(m.group(1), 16)
            length[last] = 0
        length[last] += 1
        continue
    m = trace.match(line)
    if m:
        last = None
        pc = int(m.group(1), 16)
        if pc not in length:
            sys.exit(f"arm64_insn_counts: block at {pc:#x} executed before it was logged")
        total += length[pc]
print(total)'
}

run_count() {  # kernel level calls
  local log="$work/log"
  SNAPKV_ISA=$2 "${qemu[@]}" -d in_asm,exec,nochain -D "$log" "$bin" "$1" "$3" >/dev/null
  count <"$log"
  rm -f "$log"
}

printf '%-22s %14s %14s %14s %8s %8s\n' kernel scalar neon neon_dot "neon/sc" "dot/sc"
for k in "${kernels[@]}"; do
  declare -A per_call=()
  for level in scalar neon neon_dot; do
    one=$(run_count "$k" "$level" 1)
    three=$(run_count "$k" "$level" 3)
    per_call[$level]=$(((three - one) / 2))
  done
  python3 -c '
import sys
k, s, n, d = sys.argv[1], *map(int, sys.argv[2:])
print(f"{k:22s} {s:14d} {n:14d} {d:14d} {n / s:8.3f} {d / s:8.3f}")' \
    "$k" "${per_call[scalar]}" "${per_call[neon]}" "${per_call[neon_dot]}"
  unset per_call
done
