#!/usr/bin/env bash
# Installs what only the tests need (not the main build: scripts/setup.sh), and fails when it
# cannot: Debian's pybind11, pytest and numpy (the Python package's suite), redis-server (the
# shared cache store test), chromium (the web page test), Node.js and npm where the machine has
# none, and the official `openai` npm client pinned by tests/serve/openai/package-lock.json.
set -euo pipefail
cd "$(dirname "$0")/.."
packages=(pybind11-dev python3-pybind11 python3-pytest python3-numpy python3-venv python3-wheel
          python3-setuptools python3-pip python3-dev redis-server chromium)
command -v node >/dev/null 2>&1 || packages+=(nodejs)
command -v npm >/dev/null 2>&1 || packages+=(npm)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "test_deps: installing ${missing[*]}" >&2
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
if [ ! -f tests/serve/openai/node_modules/openai/package.json ]; then
  (cd tests/serve/openai && npm ci --no-audit --no-fund --loglevel=error)
fi
