#!/usr/bin/env bash
# Issue #10 "Must show": resnet20 on Fashion-MNIST, 1 epoch, from IDX vs from the PNG folder
# made by `ddprt-data convert` (same seed, same pixels; only the sample order can differ).
# Prints one table row per source with accuracy, epoch time and the load average.
#   [SEED=1] bench/issue10_resnet20.sh [THREADS] [SOURCES...]   (SOURCES: idx png; default both)
# Logs stay in $LOGDIR (default /tmp/measure).
. "$(dirname "$0")/lib.sh"
set -euo pipefail
cd "$(dirname "$0")/.."
B=${BUILD:-build}
IDX=${IDX:-/usr/share/datasets/fashion-mnist}
LOGDIR=${LOGDIR:-/tmp/measure}
PNG=${PNG:-$LOGDIR/fmnist-png}
T=${1:-1}; shift || true
SRC=${*:-idx png}
mkdir -p "$LOGDIR"
[ -d "$PNG/train" ] || "$B/ddprt-data" convert --from "$IDX" --to "$PNG" --format png >/dev/null
common=(--model resnet20 --epochs 1 --batch-size 128 --lr 0.1 --momentum 0.9 --weight-decay 5e-4
        --seed "${SEED:-1}" --threads "$T" --workers 1 --log-interval 50)
echo "| source | threads | test accuracy | epoch wall time (s) | load avg at start / end |"
echo "|---|---|---|---|---|"
for s in $SRC; do
  case $s in
    idx) args=(--data "$IDX") ;;
    png) args=(--data "$PNG" --image-size 28 --augment none) ;;
  esac
  l0=$(load1); t0=$(date +%s.%N)
  "$B/ddprt-train" "${args[@]}" "${common[@]}" >"$LOGDIR/resnet20_${s}_seed${SEED:-1}.log" 2>&1
  t1=$(date +%s.%N); l1=$(load1)
  acc=$(grep "Test set" "$LOGDIR/resnet20_${s}_seed${SEED:-1}.log" | tail -1 | sed 's/.*Accuracy: \([0-9]*\/[0-9]*\) (\([0-9.]*%\)).*/\1 (\2)/')
  printf "| %s | %s | %s | %.0f | %s / %s |\n" "$s" "$T" "$acc" "$(echo "$t1 - $t0" | bc -l)" "$l0" "$l1"
done
