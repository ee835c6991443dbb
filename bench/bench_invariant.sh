#!/usr/bin/env bash
# What --invariant costs: samples/s of 2 ranks (ddprt-launch, one host) at the same
# global batch, default DDP vs --invariant 2 (one shard per rank, no micro-batching)
# vs --invariant 8 (4 micro-batches per rank), resnet20 and textcnn on synthetic data,
# alternating round by round; medians, and the slowdown against the default.
#   bench/bench_invariant.sh [ROUNDS]      (BUILD=build; GLOBAL=128 global batch; STEPS=30)
# Goals (issue 25): --invariant 2 at most 5 % slower, --invariant 8 at most 15 %.
set -euo pipefail
cd "$(dirname "$0")/.."
B=${BUILD:-build}
rounds=${1:-5}
G=${GLOBAL:-128}
steps=${STEPS:-30}
. bench/lib.sh
report_head
scratch tmp

# run MODEL TAG ARGS...: one 2-rank job; appends rank 0's samples/s to $tmp/MODEL.TAG
run() {
    local m=$1 tag=$2; shift 2
    "$B/ddprt-launch" --nproc-per-node 2 --bind-to core -- "$B/ddprt-train" --data synthetic --model "$m" \
        --epochs 1 --max-steps "$steps" --no-eval --threads 1 --log-interval 1000 "$@" 2>&1 |
        sed -n 's/.*epoch 1: \([0-9.]*\) samples\/s.*/\1/p' >>"$tmp/$m.$tag"
}

printf "%-9s %7s %14s %16s %8s %16s %8s\n" model global "default smp/s" "invariant 2" "cost" "invariant 8" "cost"
for m in resnet20 textcnn; do
    extra=()
    [ "$m" = textcnn ] && extra=(--seq-len 64)
    alternate "$rounds" \
        "run $m def --batch-size $((G / 2)) ${extra[*]:-}" \
        "run $m inv2 --invariant 2 --batch-size $((G / 2)) ${extra[*]:-}" \
        "run $m inv8 --invariant 8 --batch-size $((G / 8)) ${extra[*]:-}"
    d=$(med_file "$tmp/$m.def"); i2=$(med_file "$tmp/$m.inv2"); i8=$(med_file "$tmp/$m.inv8")
    c2=$(awk -v a="$d" -v b="$i2" 'BEGIN { printf "%+.1f%%", (a / b - 1) * 100 }')
    c8=$(awk -v a="$d" -v b="$i8" 'BEGIN { printf "%+.1f%%", (a / b - 1) * 100 }')
    printf "%-9s %7d %14.1f %16.1f %8s %16.1f %8s\n" "$m" "$G" "$d" "$i2" "$c2" "$i8" "$c8"
done
echo "# cost: time per sample relative to the default (+5.0% = 5 % slower); medians of $rounds rounds, $steps steps each"
load_line after
