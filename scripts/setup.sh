#!/usr/bin/env bash
# Installs what the build needs (Debian 12 packages), configures and builds into ./build.
# Usage: scripts/setup.sh [extra cmake args...]
set -euo pipefail
cd "$(dirname "$0")/.."

# libcpp-httplib-dev: the HTTP client of the serve tests, which this build compiles (the server
# has an HTTP layer of its own).
packages=(build-essential cmake pkg-config libopenblas-dev libgtest-dev libgmock-dev
          libbenchmark-dev libcli11-dev nlohmann-json3-dev libssl-dev gnuplot-nox
          libsentencepiece-dev libpcre2-dev libcpp-httplib-dev clang libomp-dev libclang-rt-14-dev
          libhiredis-dev python3)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}" >&2
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

BUILD_DIR=${BUILD_DIR:-build}
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build "$BUILD_DIR" -j"$(nproc)"
