#!/usr/bin/env bash
# Style gate of CI: every tracked C/C++ file is clang-formatted (.clang-format), and the C++ files
# changed since BASE (default: the parent commit) pass clang-tidy's bug checks (.clang-tidy),
# compiled as BUILD_DIR's compile_commands.json says.
# Usage: scripts/check_style.sh [BUILD_DIR] [BASE]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${1:-build}
BASE=${2:-HEAD~1}
mapfile -t sources < <(git ls-files '*.cpp' '*.h' '*.c' | grep -v '^docs/')
echo "check_style: clang-format on ${#sources[@]} files"
clang-format --dry-run -Werror "${sources[@]}"
if ! git rev-parse -q --verify "$BASE^{commit}" >/dev/null; then
  echo "check_style: no $BASE to diff against; clang-tidy skipped"
  exit 0
fi
mapfile -t changed < <(git diff --name-only --diff-filter=AMR "$BASE" -- '*.cpp' |
                       grep -E '^(src|cli)/' || true)
if ((${#changed[@]} == 0)); then
  echo "check_style: no changed .cpp under src/ or cli/; clang-tidy skipped"
  exit 0
fi
echo "check_style: clang-tidy on ${#changed[@]} changed files"
printf '%s\n' "${changed[@]}" |
  xargs -P "$(nproc)" -n 4 clang-tidy -p "$BUILD_DIR" --quiet --extra-arg=-Wno-unknown-warning-option
