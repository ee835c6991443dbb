#!/usr/bin/env bash
# Issue 27's tables: ddprt-bench-kernels' resnet20, resnet18, linear and lenet tables
# ("% of peak": of the FMA peak and copy bandwidth the program measures) on the AVX2
# path (DDPRT_ISA=avx2 on a CPU with more) and on the CPU's best path, for the build
# under test and optionally a build to compare with, alternating round by round; then
# the models against PyTorch 1.13 on the AVX2 path (bench/bench_models.sh).
#   bench/avx2.sh [ROUNDS]
#     AFTER=build          the build under test
#     BEFORE=dir           a build of the code to compare with (optional; an older
#                          ddprt-bench-kernels without "% of peak" still gives GFLOP/s)
#     ISAS="avx2 best"     the paths ("best": no DDPRT_ISA)
#     TABLES="resnet20 resnet18 linear lenet"; SKIP_MODELS=1: no PyTorch comparison
# Full tables of the last round go to $OUT (default /tmp/ddprt-avx2-bench).
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
rounds=${1:-3}
A=${AFTER:-build}
B=${BEFORE:-}
OUT=${OUT:-/tmp/ddprt-avx2-bench}
mkdir -p "$OUT"
cpu_line
lscpu | sed -n 's/^Model name:[[:space:]]*/# lscpu model: /p'
load_line before

run_table() { # BUILD ISA TABLE -> stdout
  local b=$1 isa=$2 t=$3 extra=()
  if "$b/ddprt-bench-kernels" --help | grep -q -- '--bf16'; then extra=(--bf16 off); fi
  case $t in lenet) extra+=(--batch 64 --iters 51) ;; esac
  if [[ $isa == best ]]; then "$b/ddprt-bench-kernels" --model "$t" "${extra[@]}"
  else DDPRT_ISA=$isa "$b/ddprt-bench-kernels" --model "$t" "${extra[@]}"; fi
}

# The figure each table is summarised by (median over rounds).
summary() { # TABLE FILE
  case $1 in
    resnet*) sed -n 's/^all convs x count: .*fwd+bwd \([0-9.]*\) GFLOP\/s\( = \([0-9]*\)%\)\{0,1\}.*/\1 \3/p' "$2" ;;
    lenet) sed -n 's/^LeNet step.*: \([0-9.]*\) us .*/\1/p' "$2" ;;
    linear) awk '/^square 512/ {print $7, $8}' "$2" ;;
  esac
}

builds=("$A"); [[ -n $B ]] && builds+=("$B")
# Each build's files and lines by its role: two builds are often both called "build".
tag() { if [[ $1 == "$A" ]]; then echo after; else echo before; fi; }
for isa in ${ISAS:-avx2 best}; do
  for t in ${TABLES:-resnet20 resnet18 linear lenet}; do
    for b in "${builds[@]}"; do : >"$OUT/$isa.$t.$(tag "$b").sum"; done
    for round in $(seq "$rounds"); do
      for b in "${builds[@]}"; do
        f="$OUT/$isa.$t.$(tag "$b").txt"
        # An older build may lack a table (--model linear): its line then shows "-".
        run_table "$b" "$isa" "$t" >"$f" 2>&1 || continue
        summary "$t" "$f" >>"$OUT/$isa.$t.$(tag "$b").sum"
      done
    done
    for b in "${builds[@]}"; do
      s="$OUT/$isa.$t.$(tag "$b").sum"
      case $t in
        resnet*) what="convs fwd+bwd GFLOP/s (% of peak)"; v="$(cut -d' ' -f1 "$s" | med) ($(cut -d' ' -f2 "$s" | med)%)" ;;
        lenet) what="LeNet step us (sum of kernel medians)"; v=$(med <"$s") ;;
        linear) what="square 512 fwd GFLOP/s (% of peak)"; v="$(cut -d' ' -f1 "$s" | med) ($(cut -d' ' -f2 "$s" | med)%)" ;;
      esac
      printf "%-6s %-9s %-10s %-40s %s   [median of %s rounds]\n" "$isa" "$t" "$(tag "$b")" "$what" "$v" "$rounds"
    done
  done
done
echo
echo "# last round's tables (after: $A):"
for isa in ${ISAS:-avx2 best}; do
  for t in ${TABLES:-resnet20 resnet18 linear lenet}; do
    echo "## $t, path $isa"
    cat "$OUT/$isa.$t.after.txt"
  done
done
load_line after
if [[ -z ${SKIP_MODELS:-} ]]; then
  echo
  echo "# models against PyTorch 1.13, DDPRT_ISA=avx2"
  DDPRT_ISA=avx2 BUILD=$A bench/bench_models.sh "$rounds"
fi
