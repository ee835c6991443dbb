#!/usr/bin/env bash
# The elastic shrink/grow run, shown: 2 nodes x 2 ranks (two ddprt-launch --nnodes 1:2
# on this host, each in its own session), --invariant 4 resnet20 or lenet on a
# Fashion-MNIST subset. Node 1 goes away (its launcher and ranks SIGKILLed) in epoch 2;
# node 0 goes on with 2 ranks from the epoch-1 checkpoint; node 1's launcher is started
# again, joins at the next restart point, and the job ends on 4 ranks. Prints both
# launchers' lines (with their seconds since start), the wall time, and whether the
# final checkpoint equals an uninterrupted 4-rank run's (cmp). Across namespaced hosts
# the same run is part of make test-cluster (CLUSTER_ELASTIC_LINES=1 prints its lines).
#   bench/elastic_run.sh        (BUILD=build; MODEL=lenet; EPOCHS=6; N=6000 training samples)
set -euo pipefail
cd "$(dirname "$0")/.."
B=$(cd "${BUILD:-build}" && pwd)
model=${MODEL:-lenet}
epochs=${EPOCHS:-6}
n=${N:-6000}
src=${DDPRT_DATA:-/usr/share/datasets/fashion-mnist}
. bench/lib.sh
report_head
scratch d
be32() { printf "$(printf '\\x%02x\\x%02x\\x%02x\\x%02x' $(($1 >> 24 & 255)) $(($1 >> 16 & 255)) $(($1 >> 8 & 255)) $(($1 & 255)))"; }
idx_head() { local s=$1 out=$2 k=$3 item=$4 magic=$5; shift 5
    { be32 "$magic"; be32 "$k"; for dim in "$@"; do be32 "$dim"; done
      (set +o pipefail; zcat "$s" | tail -c +$((9 + 4 * $#)) | head -c $((k * item))); } >"$out"; } # head ends zcat early
mkdir -p "$d/data"
idx_head "$src/train-images-idx3-ubyte.gz" "$d/data/train-images-idx3-ubyte" "$n" 784 2051 28 28
idx_head "$src/train-labels-idx1-ubyte.gz" "$d/data/train-labels-idx1-ubyte" "$n" 1 2049
idx_head "$src/t10k-images-idx3-ubyte.gz" "$d/data/t10k-images-idx3-ubyte" 1000 784 2051 28 28
idx_head "$src/t10k-labels-idx1-ubyte.gz" "$d/data/t10k-labels-idx1-ubyte" 1000 1 2049
a=(--data "$d/data" --model "$model" --invariant 4 --batch-size 8 --epochs "$epochs" --threads 1 --lr 0.05
   --log-interval 100000 --test-batch-size 200)
t0=$(date +%s.%N)
"$B/ddprt-launch" --nproc-per-node 4 -- "$B/ddprt-train" "${a[@]}" --save "$d/ref.st" >"$d/ref.log" 2>&1
t1=$(date +%s.%N)
printf '%s\n' '#!/bin/sh' 'if [ "$RANK" = 2 ] && [ -z "$DDPRT_RESTART_COUNT" ]; then' \
    '  (while [ ! -e "$CK" ]; do sleep 0.02; done; sleep 1; kill -9 0) &' 'fi' \
    'exec "$TRAIN" "$@"' >"$d/wrap.sh"
chmod +x "$d/wrap.sh"
port=$((20000 + RANDOM % 20000))
L=(--nproc-per-node 2 --nnodes 1:2 --master-addr 127.0.0.1 --master-port "$port" --resume-arg "$d/el.st")
export CK="$d/el.st" TRAIN="$B/ddprt-train"
node() { sh -c 'setsid -w "$@"; exit $?' sh "$B/ddprt-launch" "${L[@]}" --node-rank "$1" -- "$d/wrap.sh" "${a[@]}" \
         --save "$d/el.st" >"$d/$2.out" 2>"$d/$2.err"; }
t2=$(date +%s.%N)
node 1 node1 & p1=$!
sleep 0.2
node 0 node0 & p0=$!
until grep -q "round 1: 1 node(s)" "$d/node0.err" 2>/dev/null; do sleep 0.1; done
node 1 node1b & p1b=$!
wait $p1 || true
wait $p0; wait $p1b
t3=$(date +%s.%N)
echo "--- node 0's launcher"
grep "ddprt-launch" "$d/node0.err"
echo "--- node 1's launcher, first start (SIGKILLed with its ranks)"
grep "ddprt-launch" "$d/node1.err" || true
echo "--- node 1's launcher, second start"
grep "ddprt-launch" "$d/node1b.err"
awk -v a="$t0" -v b="$t1" -v c="$t2" -v e="$t3" 'BEGIN { printf "uninterrupted 4 ranks: %.1f s; elastic 4 -> 2 -> 4 ranks: %.1f s\n", b - a, e - c }'
if cmp -s "$d/ref.st" "$d/el.st"; then echo "final checkpoint: byte-identical to the uninterrupted run ($(md5sum <"$d/el.st" | cut -c1-12))"
else echo "final checkpoint: DIFFERS from the uninterrupted run"; exit 1; fi
load_line after
