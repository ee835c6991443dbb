#!/usr/bin/env bash
# ZeRO-1 on 2 ranks of one host (shared memory), GPT small (6 x 384, T 256, batch 8 a rank,
# AdamW, clipping): tokens/s, the optimizer state per rank, the gradient bytes a rank
# hands the wire and the epoch's collectives, for --zero 0 and --zero 1, alternating
# rounds, medians. OLD=DIR: also --zero 1 with DIR's ddprt-train / ddprt-launch (a build
# before the reduce-scatter: allreduce + a broadcast of every shard). Not part of make test.
#   bench/zero_gpt.sh [ROUNDS]     (BUILD=build by default)
set -euo pipefail
cd "$(dirname "$0")/.."
B=${BUILD:-build}
rounds=${1:-3}
. bench/lib.sh
scratch tmp
printf "[gpt]\nlayers=6\ndim=384\nheads=6\nctx=256\nvocab=256\n" >"$tmp/m.cfg"
report_head
variants=("zero0 $B 0" "zero1 $B 1")
[[ -n "${OLD:-}" ]] && variants+=("zero1-old $OLD 1")
for v in "${variants[@]}"; do : >"$tmp/${v%% *}"; done
for _ in $(seq "$rounds"); do
  for v in "${variants[@]}"; do
    read -r name dir z <<<"$v"
    out=$("$dir/ddprt-launch" --nproc-per-node 2 -- "$dir/ddprt-train" --data synthetic --model-file "$tmp/m.cfg" \
          --seq-len 256 --batch-size 8 --optimizer adamw --lr 3e-4 --weight-decay 0.1 --clip-grad-norm 1 \
          --max-steps 8 --epochs 1 --threads 1 --no-eval --mem-report --log-interval 1000 --sample-len 1 \
          --zero "$z" 2>&1)
    tps=$(echo "$out" | sed -n 's/.*Epoch 1 of 1 took \([0-9.]*\)s.*/\1/p' | head -1 | awk '{ print 8 * 2 * 8 * 256 / $1 }')
    st=$(echo "$out" | sed -n 's/.*optimizer state *\([0-9.]*\) MiB.*/\1/p' | head -1)
    wire=$(echo "$out" | sed -n 's/.*buckets, \([0-9]*\) bytes per rank.*/\1/p' | head -1)
    rs=$(echo "$out" | sed -n 's/.*--zero 1: \([0-9]*\) bucket reduce-scatters, \([0-9]*\) parameter.*/\1 RS, \2 AG/p' | head -1)
    [[ -n "$rs" ]] || { [[ $z == 0 ]] && rs="allreduce" || rs="allreduce + shard broadcasts"; }
    echo "$tps ${st:-?} ${wire:-?} $rs" >>"$tmp/$name"
  done
done
printf "%-10s %12s %18s %16s  %s\n" run "tokens/s" "optim state MiB" "grad bytes/rank" "collectives (8 steps)"
for v in "${variants[@]}"; do
  name=${v%% *}
  t=$(cut -d' ' -f1 "$tmp/$name" | med)
  read -r _ st wire rest < <(head -1 "$tmp/$name")
  printf "%-10s %12.1f %18s %16s  %s\n" "$name" "$t" "$st" "$wire" "$rest"
done
echo "# 2 ranks x 1 thread on one host (shared memory); tokens/s of both ranks, including 2 warm-up steps"
load_line after
