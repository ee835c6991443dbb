#!/usr/bin/env bash
# Accuracy of --invariant against the default at the same recipe: resnet20 on
# Fashion-MNIST, 3 epochs, 2 ranks, global batch 128, lr 0.05 momentum 0.9, seeds
# 1..SEEDS; default DDP (64 per rank, BN statistics per rank, broadcast from rank 0)
# vs --invariant 2 (two shards of 64, ghost BN, tree reductions) vs --invariant 8 (eight
# shards of 16: ghost BN over 16 samples). Prints each run's final test accuracy, then
# mean and spread (max - min) per mode: the invariant modes should lie within the
# default's seed-to-seed spread. Long: ~20 min per run on 2 cores.
#   bench/invariant_accuracy.sh [SEEDS]     (BUILD=build; EPOCHS=3; DATA=Fashion-MNIST dir;
#                                            FIRST_SEED=1: seeds FIRST_SEED..SEEDS)
set -euo pipefail
cd "$(dirname "$0")/.."
B=${BUILD:-build}
seeds=${1:-3}
epochs=${EPOCHS:-3}
data=${DATA:-/usr/share/datasets/fashion-mnist}
. bench/lib.sh
report_head
scratch tmp
common=(--data "$data" --model resnet20 --epochs "$epochs" --lr 0.05 --momentum 0.9 --threads 1 --log-interval 1000
        --test-batch-size 500)
run() { # TAG SEED ARGS...: the last "Accuracy: c/n" as a percentage into $tmp/TAG
    local tag=$1 seed=$2; shift 2
    "$B/ddprt-launch" --nproc-per-node 2 --bind-to core -- "$B/ddprt-train" "${common[@]}" --seed "$seed" "$@" 2>&1 |
        sed -n 's/.*Accuracy: \([0-9]*\)\/\([0-9]*\).*/\1 \2/p' | tail -1 |
        awk -v t="$tag" -v s="$seed" '{ printf "%s seed %s: %.2f %%\n", t, s, 100 * $1 / $2; print 100 * $1 / $2 > "/dev/stderr" }' \
        2>>"$tmp/$tag"
}
for s in $(seq "${FIRST_SEED:-1}" "$seeds"); do
    run default "$s" --batch-size 64
    run invariant2 "$s" --invariant 2 --batch-size 64
    run invariant8 "$s" --invariant 8 --batch-size 16
done
for tag in default invariant2 invariant8; do
    awk -v t="$tag" '{ s += $1; n++; if (n == 1 || $1 < lo) lo = $1; if (n == 1 || $1 > hi) hi = $1 }
        END { printf "%-11s mean %.2f %%  spread %.2f (min %.2f, max %.2f) over %d seeds\n", t, s / n, hi - lo, lo, hi, n }' \
        "$tmp/$tag"
done
load_line after
