#!/usr/bin/env bash
# Installs the Debian packages only the tests need (not the main build: scripts/setup.sh):
# pybind11 and the Python tools the Python package's suite runs with (python/tests).
set -euo pipefail
packages=(pybind11-dev python3-pybind11 python3-pytest python3-numpy python3-venv python3-wheel
          python3-setuptools python3-pip python3-dev)
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
