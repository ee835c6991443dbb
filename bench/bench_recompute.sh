#!/usr/bin/env bash
# Peak RSS and throughput with recomputation, alternating runs: BASE's ddprt-train (a
# build without it, optional), this build's, and PyTorch (bench/ref_models.py). On a
# loaded machine wall time is noise: samples per CPU second are printed too (ddprt:
# the whole process incl. start-up and warm-up; PyTorch: its timed loop, process time).
#   bench/bench_recompute.sh MODEL BATCH DDPRT_STEPS TORCH_STEPS ROUNDS   (BASE=dir/build)
. "$(dirname "$0")/lib.sh"
bench_deps
set -uo pipefail
cd "$(dirname "$0")/.."
m=$1; b=$2; sd=$3; sp=$4; rounds=$5
for r in $(seq "$rounds"); do
  for v in ${BASE:+base} new; do
    bin=build/ddprt-train; [ "$v" = base ] && bin=$BASE/ddprt-train
    out=$( { /usr/bin/time -f "TIME %U %S %M" "$bin" --data synthetic --model "$m" --batch-size "$b" \
             --max-steps $((sd + 2)) --epochs 1 --threads 1 --no-eval --mem-report --log-interval 100 --lr 0.01 \
             --momentum 0.9; } 2>&1)
    w=$(echo "$out" | sed -n 's/.*epoch 1: \([0-9.]*\) samples\/s.*/\1/p')
    read -r _ u s rss < <(echo "$out" | grep "^TIME")
    printf "%s %s round %d: wall %s smp/s, %.1f smp per CPU s, RSS %.1f MiB, load %s\n" "$m" "$v" "$r" "$w" \
      "$(echo "($sd + 2) * $b / ($u + $s)" | bc -l)" "$(echo "$rss / 1024" | bc -l)" "$(load1)"
  done
  out=$( { /usr/bin/time -f "TIME %U %S %M" /usr/bin/python3 -c "import sys, time
time.perf_counter = time.process_time
sys.argv = ['ref_models.py', '$m', '$b', '$sp']
__file__ = 'bench/ref_models.py'
exec(open('bench/ref_models.py').read())"; } 2>&1)
  read -r _ sps rssp < <(echo "$out" | grep "^$m ")
  printf "%s torch round %d: %s smp per CPU s, RSS %s MiB, load %s\n" "$m" "$r" "$sps" "$rssp" "$(load1)"
done
