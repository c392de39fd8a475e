#!/usr/bin/env bash
# Installs the tools the server's store and page tests start (Debian packages): redis-server
# (the shared cache store test) and chromium (the web page test). The build does not need them.
set -euo pipefail
missing=()
command -v redis-server >/dev/null || missing+=(redis-server)
command -v chromium >/dev/null || missing+=(chromium)
if ((${#missing[@]})); then
  echo "tests: installing ${missing[*]}" >&2
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
