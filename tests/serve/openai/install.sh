#!/bin/sh
# Installs what the openai client test needs: Node.js and npm (Debian packages) and the `openai`
# package pinned by package-lock.json into tests/serve/openai/node_modules. Called by
# scripts/test.sh; does nothing when both are present. A failed install (no network) is reported
# and the test then reports itself skipped; the rest of the suite still runs.
set -u
here=$(cd "$(dirname "$0")" && pwd)
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO=sudo
  { $SUDO apt-get update -qq &&
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq nodejs npm >/dev/null; } ||
    echo "install.sh: warning: could not install nodejs and npm" >&2
fi
if [ ! -f "$here/node_modules/openai/package.json" ] && command -v npm >/dev/null 2>&1; then
  (cd "$here" && npm ci --no-audit --no-fund --loglevel=error) ||
    echo "install.sh: warning: npm ci failed; serve.openai_client will be skipped" >&2
fi
exit 0
