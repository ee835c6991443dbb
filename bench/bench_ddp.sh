#!/usr/bin/env bash
# Data-parallel training benchmark: one row per (world size, per-rank batch, bucket
# size): epoch time, samples/s, test accuracy, and rank 0's split of the epoch into
# compute, communication wait and data wait. One compute thread per rank.
#   bench/bench_ddp.sh [EPOCHS] [WORLDS] [BATCHES] [BUCKETS_MB]
set -euo pipefail
B=${DDPRT_BUILD:-build}
EPOCHS=${1:-1}
WORLDS=${2:-"1 2 4"}
BATCHES=${3:-"64 1024"}
BUCKETS=${4:-"25"}
printf "# ddprt-train LeNet, Fashion-MNIST, %s epoch(s), 1 thread per rank, TCP on 127.0.0.1\n" "$EPOCHS"
printf "%6s %6s %9s %7s %8s %10s %9s %9s %9s %9s %8s\n" world batch bucketMB epoch epoch_s samples/s compute_s commwait_s datawait_s accuracy peakMiB
for w in $WORLDS; do for b in $BATCHES; do for mb in $BUCKETS; do
  log=$(mktemp)
  DDPRT_LOG=info /usr/bin/time -f "peakrss %M" "$B/ddprt-launch" --nproc-per-node "$w" --no-prefix -- \
    "$B/ddprt-train" --epochs "$EPOCHS" --batch-size "$b" --threads 1 --bucket-mb "$mb" --log-interval 100000 >"$log" 2>&1
  # One row per epoch: rank 0's "epoch E: N samples/s; time split ..." line + its Test line.
  paste <(grep -o 'Epoch [0-9]* of [0-9]* took [0-9.]*' "$log" | awk '{print $2, $6}') \
        <(grep -o 'epoch [0-9]*: [0-9.]* samples/s; time split per rank: compute [0-9.]*s, communication wait [0-9.]*s, data wait [0-9.]*s' "$log" \
          | sed 's/[a-z:;,]//g; s/\///g' | awk '{print $2, $3, $4, $5}') \
        <(grep -o 'Accuracy: [0-9]*/[0-9]* ([0-9]*%)' "$log" | awk '{split($2,a,"/"); printf "%.2f%%\n", 100*a[1]/a[2]}') |
  while read -r e t sps c cw dw acc; do
    printf "%6s %6s %9s %7s %8s %10s %9s %9s %9s %9s %8s\n" "$w" "$b" "$mb" "$e" "$t" "$sps" "$c" "$cw" "$dw" "$acc" \
      "$(awk '/peakrss/ {printf "%.1f", $2/1024}' "$log")"
  done
  rm -f "$log"
done; done; done
