#!/usr/bin/env bash
# Every __global__ kernel of kernels/cuda and the device-suite tests that execute it on
# the SIMT executor (each test run alone with DDPRT_SIMT_TRACE, which records the
# kernels a process launched). A kernel no test runs is listed with "NONE" and makes the
# script fail. Usage: test/simt/kernel_table.sh [BUILD]   (after make)
set -euo pipefail
build=${1:-build}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
tests=$(grep -ho '^TEST([a-z0-9_]*' test/gpu/*.c | sed 's/TEST(//')
for t in $tests; do
  DDPRT_BUILD=$build DDPRT_SIMT_TRACE="$tmp/$t" "$build/test-gpu-simt" "$t" >/dev/null 2>&1 || echo "note: $t failed" >&2
  # the suite also launches t-train-simt processes: their kernels count for the test too
done
# name(args) -> name; "void k<(anonymous namespace)::X>(..)" -> k<X>
norm() { sed -E 's/^void //; s/\(anonymous namespace\):://g; s/\(.*\)$//'; }
printf '| __global__ kernel (instantiation) | file | tests that run it |\n|---|---|---|\n'
fails=0
# A kernel's name may stand on the line after "__global__ void __launch_bounds__(N)".
joined() { sed -z 's/\(__launch_bounds__([A-Z_0-9]*)\) *\n/\1 /g' "$1"; }
for k in $(for f in kernels/cuda/*.cu kernels/cuda/*.cuh; do joined "$f"; done |
           grep -o '__global__ void\( __launch_bounds__([A-Z_0-9]*)\)\? *[a-z_0-9]*' | awk '{print $NF}' | sort -u); do
  file=$(for f in kernels/cuda/*.cu kernels/cuda/*.cuh; do if joined "$f" | grep "__global__ void.*\b$k\b" >/dev/null; then basename "$f"; fi; done | head -1) || true
  insts=$(cat "$tmp"/* 2>/dev/null | norm | grep -E "^$k(<|$)" | sort -u || true)
  [ -z "$insts" ] && { echo "| $k | $file | NONE |"; fails=$((fails+1)); continue; }
  while read -r inst; do
    # (grep without -q: an early exit would kill norm's sed, a failure under pipefail)
    who=$(for f in "$tmp"/*; do if norm <"$f" | grep -xF -- "$inst" >/dev/null; then basename "$f"; fi; done |
          paste -sd, - | sed 's/,/, /g')
    echo "| \`$inst\` | $file | $who |"
  done <<<"$insts"
done
exit $((fails > 0))
