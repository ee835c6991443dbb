#!/usr/bin/env bash
# Decode + transform throughput per thread: ddprt-data bench vs Pillow + torchvision
# (bench/bench_data_pil.py) on the same JPEG folder, 224x224 output, train and eval
# recipes, REPS runs each (the best kept: the machine is shared).
# Usage: bench/bench_data.sh [DIR] [N] [REPS]; DIR defaults to a synthetic folder of
# 400 500x375 JPEGs made by ddprt-data synth.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
bench_deps
B=${DDPRT_BUILD:-build}
DIR=${1:-/tmp/ddprt-bench-jpeg}
N=${2:-200}
REPS=${3:-3}
[ -d "$DIR/train" ] || "$B/ddprt-data" synth --to "$DIR" --n 400 --size 500x375 --classes 4 >/dev/null
best() { sort -t'|' -k7 -g | tail -1; }
echo "| decoder | folder | files | threads | output | images/s per thread (CPU time) | CPU ms/image | images/s (wall) |"
echo "|---|---|---|---|---|---|---|---|"
for mode in train eval; do
  flag=; [ $mode = eval ] && flag=--eval
  for i in $(seq "$REPS"); do "$B/ddprt-data" bench "$DIR" --n "$N" $flag; done | best
  for i in $(seq "$REPS"); do /usr/bin/python3 bench/bench_data_pil.py "$DIR" "$N" $mode; done | best
done
