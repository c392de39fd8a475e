#!/bin/sh
# Checks the built objects against the ISA levels of include/snapkv/util/cpu.h (ctest isa.objects):
#   --baseline OBJ...     objects compiled for the baseline x86-64: no VEX / EVEX instruction (no
#                         mnemonic starting with v, no ymm / zmm register), so none can fault on a
#                         CPU without AVX; arm64: no dot-product (sdot / udot) or SVE instruction;
#   --level L OBJ...      objects of the per-ISA kernel files at level L: scalar as the baseline;
#                         avx2 without AVX-512 registers (zmm, k masks, xmm/ymm 16-31); avx512
#                         anything; neon as the arm64 baseline; neon_dot without SVE. And at every
#                         level no weak (COMDAT) function outside the level's namespace
#                         snapkv::isa_L: the linker keeps one copy of such a function for the whole
#                         program, which could be another level's (src/kernels/isa.h).
# Arguments may also arrive as one ;-separated list (CMake's $<TARGET_OBJECTS:...>). OBJDUMP and
# NM name the tools (a cross build's aarch64-linux-gnu-objdump); ARCH is x86_64 (default) or
# aarch64.
set -u
OBJDUMP=${OBJDUMP:-objdump}
NM=${NM:-nm}
ARCH=${ARCH:-x86_64}
status=0
mode=""
level=""
fail() {
  echo "FAIL: $*"
  status=1
}
insns() {  # the instruction lines of an object, without addresses and bytes
"$OBJDUMP" -d --no-show-raw-insn "$1" | sed -n 's/^ *[0-9a-f]*:[[:space:]]*//p'
}
check() {
  obj=$1
  [ -f "$obj" ] || { fail "$obj: no such object"; return; }
  case "$ARCH:$mode:$level" in
    aarch64:baseline: | aarch64:level:scalar | aarch64:level:neon)
      n=$(insns "$obj" | grep -cE '^(sdot|udot|usdot|sudot)[[:space:]]|[[:space:],]z[0-9]+\.|[[:space:],]p[0-9]+/')
      [ "$n" -eq 0 ] || fail "$obj ($mode $level): $n dot-product or SVE instructions, e.g. $(insns "$obj" | grep -m1 -E '^(sdot|udot|usdot|sudot)[[:space:]]|[[:space:],]z[0-9]+\.|[[:space:],]p[0-9]+/')"
      ;;
    aarch64:level:neon_dot)
      n=$(insns "$obj" | grep -cE '[[:space:],]z[0-9]+\.|[[:space:],]p[0-9]+/')
      [ "$n" -eq 0 ] || fail "$obj (neon_dot): $n SVE instructions"
      ;;
    aarch64:*) ;;
    *:baseline: | *:level:scalar)
      n=$(insns "$obj" | grep -cE '^v[a-z]|%[yz]mm')
      [ "$n" -eq 0 ] || fail "$obj ($mode $level): $n AVX instructions, e.g. $(insns "$obj" | grep -m1 -E '^v[a-z]|%[yz]mm')"
      ;;
    *:level:avx2)
      n=$(insns "$obj" | grep -cE '%zmm|%k[0-7]|%[xy]mm(1[6-9]|2[0-9]|3[01])')
      [ "$n" -eq 0 ] || fail "$obj (avx2): $n AVX-512 instructions"
      ;;
  esac
  if [ "$mode" = level ]; then
    leaked=$("$NM" -C --defined-only "$obj" | awk '$2 == "W"' | grep -v " snapkv::isa_$level::" || true)
    [ -z "$leaked" ] || fail "$obj ($level): weak functions outside snapkv::isa_$level: $leaked"
  fi
  count=$((count + 1))
}
count=0
for arg in "$@"; do
  old_ifs=$IFS
  IFS=';'
  for a in $arg; do
    IFS=$old_ifs
    case "$a" in
      --baseline) mode=baseline; level="" ;;
      --level) mode=level_name ;;
      *)
        if [ "$mode" = level_name ]; then
          mode=level
          level=$a
        else
          check "$a"
        fi
        ;;
    esac
  done
  IFS=$old_ifs
done
echo "checked $count objects"
[ "$count" -gt 0 ] || fail "no objects given"
exit $status
