#!/usr/bin/env bash
# Installs what only the tests use (scripts/test_deps.sh: Python tools, Redis, Chromium, the
# openai npm client), sets up (scripts/setup.sh) with the Python package
# (-DSNAPKV_BUILD_PYTHON=ON), builds and runs the whole test suite with ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
# Idle OpenMP workers sleep instead of spinning: on a shared 2-core machine spinning workers
# starve each other (the model tests run 40x slower under load without this).
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
scripts/test_deps.sh
BUILD_DIR="$BUILD_DIR" scripts/setup.sh -DSNAPKV_BUILD_PYTHON=ON "$@"
ctest --test-dir "$BUILD_DIR" --output-on-failure -j"$(nproc)"
