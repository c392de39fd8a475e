#!/usr/bin/env bash
# Installs the tools the server's store and page tests start (Debian packages): redis-server
# (the shared cache store test), chromium and nodejs (the web page test). The build does not need
# them. Never fatal: on a machine that cannot install them those tests report themselves skipped
# and the rest of the suite still runs.
set -u
missing=()
command -v redis-server >/dev/null || missing+=(redis-server)
command -v chromium >/dev/null || missing+=(chromium)
command -v node >/dev/null || missing+=(nodejs)
if ((${#missing[@]})); then
  echo "tests: installing ${missing[*]}" >&2
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO=sudo
  { $SUDO apt-get update -qq &&
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null; } ||
    echo "install_serve_tools.sh: warning: could not install ${missing[*]}" >&2
fi
exit 0
