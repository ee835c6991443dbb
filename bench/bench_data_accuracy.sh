#!/usr/bin/env bash
# LeNet on Fashion-MNIST from IDX vs from the PNG folder made by ddprt-data convert
# (same pixels, sorted into class folders, so only the sample order differs): final
# test accuracy per seed. Usage: bench/bench_data_accuracy.sh [EPOCHS] [SEEDS...]
set -euo pipefail
B=${DDPRT_BUILD:-build}
IDX=${IDX:-/usr/share/datasets/fashion-mnist}
PNG=${PNG:-/tmp/ddprt-fmnist-png}
E=${1:-1}; shift || true
SEEDS=${*:-1 2 3}
[ -d "$PNG/train" ] || "$B/ddprt-data" convert --from "$IDX" --to "$PNG" --format png >/dev/null
acc() { "$B/ddprt-train" "$@" --epochs "$E" --threads 1 2>&1 | grep "Test set" | tail -1 | sed 's/.*Accuracy: \([0-9]*\)\/.*/\1/'; }
echo "| seed | epochs | IDX correct/10000 | PNG folder correct/10000 | difference (points) |"
echo "|---|---|---|---|---|"
for s in $SEEDS; do
  a=$(acc --data "$IDX" --seed "$s")
  b=$(acc --data "$PNG" --image-size 28 --augment none --workers 2 --seed "$s")
  echo "| $s | $E | $a | $b | $(awk -v a="$a" -v b="$b" 'BEGIN{printf "%+.2f", (b-a)/100}') |"
done
