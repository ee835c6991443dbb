#!/usr/bin/env bash
# Every __global__ kernel of kernels/cuda and the device-suite tests that execute it on
# the SIMT executor (each test run alone with DDPRT_SIMT_TRACE, which records the
# kernels a process launched; JOBS tests at a time). A kernel no test runs is listed
# with "NONE" and makes the script fail.
#   test/simt/kernel_table.sh [BUILD]           the table (after make)
#   test/simt/kernel_table.sh --check [BUILD]   only the kernels no test runs: the whole
#       suite once, in one process, one trace (make test's simt_every_cuda_kernel_has_a_test)
set -euo pipefail
check=0
[ "${1:-}" = --check ] && { check=1; shift; }
build=${1:-build}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [ $check = 1 ]; then
  # The suite's files in two halves run side by side (the whole suite in one process ran
  # past make test's 300 s on a loaded 2-core machine); forked tests and the t-train-simt
  # processes they launch append to the one trace.
  files=$(ls test/gpu/test_gpu_*.c | xargs -n1 basename | sed 's/\.c$//')
  half() { printf '%s\n' $files | awk -v h="$1" 'NR % 2 == h'; }
  for h in 0 1; do
    # shellcheck disable=SC2046
    DDPRT_BUILD=$build DDPRT_SIMT_TRACE="$tmp/suite" "$build/test-gpu-simt" $(half $h) >"$tmp/log$h" 2>&1 ||
      echo "note: the device suite failed (its own tests report why): $(tail -1 "$tmp/log$h")" >&2 &
  done
  wait
else
  tests=$(grep -ho '^TEST([a-z0-9_]*' test/gpu/*.c | sed 's/TEST(//')
  # the suite also launches t-train-simt processes: their kernels count for the test too
  printf '%s\n' $tests | xargs -P "${JOBS:-$(nproc)}" -I{} sh -c \
    'DDPRT_BUILD="$1" DDPRT_SIMT_TRACE="$2/$3" "$1/test-gpu-simt" "$3" >/dev/null 2>&1 || echo "note: $3 failed" >&2' \
    sh "$build" "$tmp" {}
fi
# name(args) -> name; "void k<(anonymous namespace)::X>(..)" -> k<X>
norm() { sed -E 's/^void //; s/\(anonymous namespace\):://g; s/\(.*\)$//'; }
[ $check = 1 ] || printf '| __global__ kernel (instantiation) | file | tests that run it |\n|---|---|---|\n'
fails=0
# A kernel's name may stand on the line after "__global__ void __launch_bounds__(N)",
# whose N may be an expression ("AT_W * 32": anything but a parenthesis).
joined() { sed -z 's/\(__launch_bounds__([^()]*)\) *\n/\1 /g' "$1"; }
for k in $(for f in kernels/cuda/*.cu kernels/cuda/*.cuh; do joined "$f"; done |
           grep -o '__global__ void\( __launch_bounds__([^()]*)\)\? *[a-z_0-9]*' | awk '{print $NF}' | sort -u); do
  file=$(for f in kernels/cuda/*.cu kernels/cuda/*.cuh; do if joined "$f" | grep "__global__ void.*\b$k\b" >/dev/null; then basename "$f"; fi; done | head -1) || true
  insts=$(cat "$tmp"/* 2>/dev/null | norm | grep -E "^$k(<|$)" | sort -u || true)
  [ -z "$insts" ] && { echo "| $k | $file | NONE |"; fails=$((fails+1)); continue; }
  [ $check = 1 ] && continue
  while read -r inst; do
    # (grep without -q: an early exit would kill norm's sed, a failure under pipefail)
    who=$(for f in "$tmp"/*; do if norm <"$f" | grep -xF -- "$inst" >/dev/null; then basename "$f"; fi; done |
          paste -sd, - | sed 's/,/, /g')
    echo "| \`$inst\` | $file | $who |"
  done <<<"$insts"
done
[ $check = 1 ] && [ $fails = 0 ] && echo "every __global__ kernel ran: $(cat "$tmp"/suite | norm | sort -u | wc -l) instantiations"
exit $((fails > 0))
