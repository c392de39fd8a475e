#!/usr/bin/env bash
# Sets up (scripts/setup.sh), builds and runs the whole test suite with ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
# Idle OpenMP workers sleep instead of spinning: on a shared 2-core machine spinning workers
# starve each other (the model tests run 40x slower under load without this).
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
BUILD_DIR="$BUILD_DIR" scripts/setup.sh "$@"
# Tools only the tests use (the build does not need them).
tests/serve/openai/install.sh
tests/install_serve_tools.sh  # redis-server, chromium
ctest --test-dir "$BUILD_DIR" --output-on-failure -j"$(nproc)"
