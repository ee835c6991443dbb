#!/usr/bin/env bash
# The memory-bound layer table of ddprt-bench-kernels (BN, ReLU, add, max pool, global
# average pool: GB/s and % of the copy bandwidth at the same size) on resnet18's and
# resnet20's shapes, per ISA path, medians over alternating rounds; optionally against
# another build's bench binary.
#   bench/layers.sh [ROUNDS]
#     AFTER=build/ddprt-bench-kernels   the binary under test
#     BEFORE=path                       a binary to compare with (optional)
#     ISAS="avx2 best"                  the paths ("best": no DDPRT_ISA)
#     MODELS="resnet18 resnet20"
# Prints "model isa layer: before% -> after%" (medians of the % column).
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
rounds=${1:-3}
A=${AFTER:-build/ddprt-bench-kernels}
B=${BEFORE:-}
OUT=$(mktemp -d /tmp/ddprt-layers.XXXXXX)
report_head

run() { # BIN ISA MODEL -> the layer rows
  local isa=$2
  if [[ $isa == best ]]; then "$1" --model "$3" --convs off
  else DDPRT_ISA=$isa "$1" --model "$3" --convs off; fi
}
cmds=()
for m in ${MODELS:-resnet18 resnet20}; do
  for isa in ${ISAS:-avx2 best}; do
    cmds+=("run $A $isa $m >>$OUT/after.$m.$isa")
    [[ -n $B ]] && cmds+=("run $B $isa $m >>$OUT/before.$m.$isa")
  done
done
alternate "$rounds" "${cmds[@]}"
load_line after
for m in ${MODELS:-resnet18 resnet20}; do
  for isa in ${ISAS:-avx2 best}; do
    for layer in "bn stats" "bn fwd" "bn bwd sums" "bn bwd dx" "relu fwd" "relu bwd" "add" \
                 "maxpool 3/2/1 fwd" "maxpool 3/2/1 bwd" "global avgpool fwd" "global avgpool bwd"; do
      pct() { { grep "^$layer  " "$1" 2>/dev/null || true; } | awk '{print $NF}' | tr -d % | med; }
      a=$(pct "$OUT/after.$m.$isa")
      [[ $a == - ]] && continue
      if [[ -n $B ]]; then printf '%-9s %-5s %-20s %4s%% -> %4s%%\n' "$m" "$isa" "$layer" "$(pct "$OUT/before.$m.$isa")" "$a"
      else printf '%-9s %-5s %-20s %4s%%\n' "$m" "$isa" "$layer" "$a"; fi
    done
  done
done
rm -rf "$OUT"
