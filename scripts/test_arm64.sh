#!/usr/bin/env bash
# Cross-builds snapkv.cpp for arm64 Linux on an x86-64 Debian 12 machine and tests it under
# user-mode qemu (qemu-aarch64 -cpu max: every ISA level, neon and neon_dot, is run).
#   1. installs what it needs from Debian: g++-aarch64-linux-gnu, qemu-user and the arm64 builds of
#      the libraries (dpkg --add-architecture arm64; libopenblas-dev:arm64 etc.);
#   2. configures build-arm64/ with cmake/aarch64-linux-gnu.cmake and builds the library, the CLI
#      and the test binaries of util, kernels, ops, kv, gguf and model;
#   3. runs those suites with ctest (ctest runs each test under qemu), the kernel suites once more
#      at every arm64 level (ctest -L isa);
#   4. checks that `snapkv --version` names the arm64 level and that the shipped model's greedy
#      tokens equal the x86-64 build's (build/, built here when missing) for several cache methods.
# Usage: scripts/test_arm64.sh [--kernels]   (--kernels: only the kernel suites, label isa, and
# only what they need built: the CI stage)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${ARM64_BUILD_DIR:-build-arm64}
X86_BUILD_DIR=${X86_BUILD_DIR:-build}
kernels_only=0
[ "${1:-}" = "--kernels" ] && kernels_only=1
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
t0=$SECONDS
step() { echo "== test_arm64: $* ($((SECONDS - t0)) s) =="; }

step "packages"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo
if ! dpkg --print-foreign-architectures | grep -qx arm64; then
  $SUDO dpkg --add-architecture arm64
  need_update=1
fi
packages=(g++-aarch64-linux-gnu qemu-user cmake ninja-build pkg-config nlohmann-json3-dev
          libcli11-dev libopenblas-dev:arm64 libgtest-dev:arm64 libgmock-dev:arm64
          libssl-dev:arm64 libpcre2-dev:arm64 libcpp-httplib-dev:arm64 libgomp1:arm64
          libstdc++6:arm64)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "test_arm64: installing ${missing[*]}" >&2
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
elif [ "${need_update:-0}" = 1 ]; then
  $SUDO apt-get update -qq
fi

step "configure and build for aarch64 ($BUILD_DIR)"
launcher=()
if command -v ccache >/dev/null 2>&1; then
  export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=true
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
fi
jobs=${JOBS:-$(nproc)}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake \
  -DCMAKE_BUILD_TYPE=Release -DSNAPKV_WERROR=ON -DSNAPKV_BUILD_BENCH=OFF "${launcher[@]}" >/dev/null
if ((kernels_only)); then
  cmake --build "$BUILD_DIR" -j"$jobs" --target test_util test_kernels test_ops test_kv
else
  cmake --build "$BUILD_DIR" -j"$jobs" --target snapkv_cli test_util test_kernels test_ops test_kv test_gguf \
    test_model
fi

# gtest's death tests re-execute the test binary, which the kernel cannot start without a
# binfmt_misc registration of qemu: those two run only in the native suites.
no_reexec='MappedFileTest\.(TruncatedWhileMappedExitsOneWithNamedError|BusErrorOutsideAnyMapStillKillsBySignal)'
if ((kernels_only)); then
  # (isa.objects reads every layer's objects, which this mode does not build: the full run has it)
  step "kernel suites at every arm64 level under qemu (ctest -L isa)"
  ctest --test-dir "$BUILD_DIR" --output-on-failure -j"$jobs" -L isa -E '^isa\.objects$'
  step "done"
  exit 0
fi

step "util, ops, kv, gguf and model suites under qemu, then the kernel suites per level"
ctest --test-dir "$BUILD_DIR" --output-on-failure -j"$jobs" -L '^(util|kernels|ops|kv|gguf|model|isa)$' \
  -E "$no_reexec"

step "snapkv --version under qemu names the arm64 level"
qemu=(env OPENBLAS_NUM_THREADS=1 qemu-aarch64 -cpu max)
version=$("${qemu[@]}" "$BUILD_DIR/snapkv" --version)
echo "$version"
case "$version" in
  *"SIMD kernels: neon_dot, best on this CPU: neon_dot"*) ;;
  *) echo "test_arm64: --version does not name neon_dot" >&2; exit 1 ;;
esac
forced=$(SNAPKV_ISA=neon "${qemu[@]}" "$BUILD_DIR/snapkv" --version)
case "$forced" in
  *"SIMD kernels: neon,"*) ;;
  *) echo "test_arm64: SNAPKV_ISA=neon not in effect: $forced" >&2; exit 1 ;;
esac
if SNAPKV_ISA=avx2 "${qemu[@]}" "$BUILD_DIR/snapkv" --version >/dev/null 2>&1; then
  echo "test_arm64: SNAPKV_ISA=avx2 was accepted on arm64" >&2
  exit 1
fi

step "greedy tokens of the shipped model: arm64 (qemu) against x86-64 ($X86_BUILD_DIR)"
if [ ! -x "$X86_BUILD_DIR/snapkv" ]; then
  cmake -S . -B "$X86_BUILD_DIR" -DCMAKE_BUILD_TYPE=Release "${launcher[@]}" >/dev/null
  cmake --build "$X86_BUILD_DIR" -j"$jobs" --target snapkv_cli
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
model=models/snapkv-tiny4.gguf
# a passkey prompt the model answers (1K tokens): context, question and answer prefix
"$X86_BUILD_DIR/snapkv" tasks gen --task passkey --n 1 --context 1024 --seed 1 --tokenizer "$model" \
  --out "$work/passkey.jsonl" >/dev/null
python3 - "$work/passkey.jsonl" "$work/prompt.txt" <<'EOF'
import json, sys
d = json.loads(open(sys.argv[1]).readline())
open(sys.argv[2], "w").write(d["context"] + d["question"] + d["answer_prefix"])
EOF
for method in full snapkv kivi2 snapkv+kivi2 kvzip; do
  args=(run --model "$model" --prompt-file "$work/prompt.txt" --method "$method" --keep 0.2
        --max-tokens 16 --temperature 0 --threads 2 --json --quiet)
  "$X86_BUILD_DIR/snapkv" "${args[@]}" >"$work/x86.json"
  "${qemu[@]}" "$BUILD_DIR/snapkv" "${args[@]}" >"$work/arm64.json"
  python3 - "$method" "$work/x86.json" "$work/arm64.json" <<'EOF'
import json, sys
method, x86, arm = sys.argv[1], json.load(open(sys.argv[2])), json.load(open(sys.argv[3]))
print(f"{method:14s} x86-64 {x86['tokens']}\n{'':14s} arm64  {arm['tokens']}")
if x86["tokens"] != arm["tokens"]:
    sys.exit(f"test_arm64: greedy tokens differ for --method {method}")
EOF
done
step "done"
