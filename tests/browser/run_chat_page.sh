#!/usr/bin/env bash
# ctest entry of the web chat page test (label "browser"): runs chat_page.mjs under Node with
# headless Chromium. Exits 77 (ctest: skipped) only when node or chromium is not installed;
# scripts/test.sh installs both.
# Usage: run_chat_page.sh SNAPKV_BINARY MODEL.gguf OUT_DIR
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
node=$(command -v node || true)
chromium=$(command -v chromium || command -v chromium-browser || true)
if [[ -z $node ]]; then echo "skipped: node is not installed" >&2; exit 77; fi
if [[ -z $chromium ]]; then echo "skipped: chromium is not installed" >&2; exit 77; fi
exec "$node" "$here/chat_page.mjs" "$1" "$2" "$3" "$chromium"
