#!/usr/bin/env bash
# Sets up (scripts/setup.sh), builds and runs the whole test suite with ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
BUILD_DIR="$BUILD_DIR" scripts/setup.sh "$@"
ctest --test-dir "$BUILD_DIR" --output-on-failure -j"$(nproc)"
