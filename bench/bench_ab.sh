#!/usr/bin/env bash
# Training throughput of two ddprt builds side by side (a change against the code before
# it), alternating run by run, medians of samples/s and the planned activations; no
# PyTorch. Not part of make test.
#   BEFORE=dir bench/bench_ab.sh [ROUNDS]
#     AFTER=build   the build under test       MODELS="resnet20 resnet18 textcnn lenet"
#     ISAS="avx2 best" the paths ("best": no DDPRT_ISA)
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
rounds=${1:-3}
A=${AFTER:-build}
B=${BEFORE:?BEFORE=dir: a build of the code to compare with}
MODELS=${MODELS:-"resnet20 resnet18 textcnn lenet"}
ISAS=${ISAS:-"avx2 best"}
# model batch steps
declare -A cases=([lenet]="64 300" [resnet20]="128 10" [textcnn]="64 120" [resnet18]="32 4")
report_head
run() { # build isa model -> "samples/s activations-MiB"
    local env=() b s
    [[ $2 == best ]] || env=(env DDPRT_ISA="$2")
    read -r b s <<<"${cases[$3]}"
    "${env[@]}" "$1/ddprt-train" --data synthetic --model "$3" --batch-size "$b" --max-steps $((s + 2)) --epochs 1 \
        --threads 1 --no-eval --mem-report --log-interval 1 --lr 0.01 --momentum 0.9 2>&1 |
        sed -n 's/.*epoch 1: .* compute \([0-9.]*\)s,.*/C \1/p; s/^activations: planned \([0-9.]*\) MiB.*/M \1/p' |
        awk -v n=$((b * (s + 2))) '$1 == "C" { printf "%.1f ", n / $2 } $1 == "M" { printf "M %s ", $2 }'
}
printf "%-9s %-5s %10s %10s %7s %10s %10s\n" model isa "before s/s" "after s/s" speedup "before MiB" "after MiB"
for isa in $ISAS; do
    for m in $MODELS; do
        : >/tmp/ab.b; : >/tmp/ab.a
        for _ in $(seq "$rounds"); do
            run "$B" "$isa" "$m" >>/tmp/ab.b; echo >>/tmp/ab.b
            run "$A" "$isa" "$m" >>/tmp/ab.a; echo >>/tmp/ab.a
        done
        sb=$(awk '{ for (i = 1; i <= NF; i++) if ($i != "M" && $(i - 1) != "M") print $i }' /tmp/ab.b | med)
        sa=$(awk '{ for (i = 1; i <= NF; i++) if ($i != "M" && $(i - 1) != "M") print $i }' /tmp/ab.a | med)
        mb=$(awk '{ for (i = 1; i < NF; i++) if ($i == "M") print $(i + 1) }' /tmp/ab.b | med)
        ma=$(awk '{ for (i = 1; i < NF; i++) if ($i == "M") print $(i + 1) }' /tmp/ab.a | med)
        printf "%-9s %-5s %10s %10s %7s %10s %10s\n" "$m" "$isa" "$sb" "$sa" "$(ratio "$sa" "$sb")" "$mb" "$ma"
    done
done
load_line after
