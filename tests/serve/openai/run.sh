#!/bin/sh
# Runs openai_client.test.mjs against a snapkv binary: run.sh SNAPKV MODEL. Exits 77 (skipped)
# when node or the installed `openai` package is missing (scripts/test_deps.sh installs both).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
if ! command -v node >/dev/null 2>&1; then
  echo "skipped: node is not installed (scripts/test_deps.sh installs it)"; exit 77
fi
if [ ! -f "$here/node_modules/openai/package.json" ]; then
  echo "skipped: the openai package is not installed (run scripts/test_deps.sh)"; exit 77
fi
SNAPKV_BIN=$1 SNAPKV_MODEL=$2 exec node --test --test-timeout=120000 "$here/openai_client.test.mjs"
