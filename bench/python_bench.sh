#!/bin/bash
# Issue 23's figures on one host, 2 ranks (ddprt-launch --bind-to core), Python 3 with
# Debian's torch (PY, default /usr/bin/python3):
#   allreduce  bench/python_allreduce.py: torch.distributed gloo vs ddprt, 4 KiB-64 MiB
#   resnet     python/examples/resnet18_{gloo,ddprt}.py (ddprt: --compress none and fp16):
#              median step time per run, alternating the three round by round (ROUNDS,
#              default 3; STEPS steps, default 30, the first 5 untimed); medians over the
#              rounds; the test accuracy line of each (bitwise equal models: same line)
#   horovod    python/examples/mnist_{ddprt,horovod}.py, 2 epochs of 16 batches of 64: the
#              loss curves side by side and whether they are equal
# usage: bench/python_bench.sh [all|allreduce|resnet|horovod]   (default all)
set -u
cd "$(dirname "$0")/.."
. bench/lib.sh
B=${DDPRT_BUILD:-build}
PY=${PY:-/usr/bin/python3}
WHAT=${1:-all}
ROUNDS=${ROUNDS:-3} STEPS=${STEPS:-30}
[ -x "$B/ddprt-launch" ] && [ -e "$B/libddprt.so" ] || { echo "python_bench: build first (make)" >&2; exit 2; }
"$PY" -c 'import torch, torchvision' 2>/dev/null || { echo "python_bench: $PY lacks torch/torchvision" >&2; exit 2; }
scratch T
export PYTHONPATH=$PWD/python:$PWD/python/examples DDPRT_TRACE_DIR=$T
launch() { "$B/ddprt-launch" --nproc-per-node 2 --bind-to core --no-prefix -- "$PY" "$@"; }
cpu_line

if [ "$WHAT" = all ] || [ "$WHAT" = allreduce ]; then
    echo
    echo "## allreduce, 2 ranks, one host"
    launch bench/python_allreduce.py --rounds "${ROUNDS_AR:-5}" 2>&1 | grep -v '^\[W' || echo "allreduce run failed"
fi

if [ "$WHAT" = all ] || [ "$WHAT" = resnet ]; then
    echo
    echo "## ResNet-18 DDP, batch 32 per rank, 2 ranks, one host, $STEPS steps (5 untimed), $ROUNDS rounds"
    load_line before
    run() { # NAME SCRIPT ARGS...
        local name=$1; shift
        launch "$@" --steps "$STEPS" --warmup 5 >"$T/$name.$round" 2>&1 || { echo "$name failed:"; tail -5 "$T/$name.$round"; }
        sed -n 's/^step time: median \([0-9.]*\) s.*/\1/p' "$T/$name.$round" >>"$T/$name.times"
    }
    alternate "$ROUNDS" 'run gloo python/examples/resnet18_gloo.py' \
        'run ddprt python/examples/resnet18_ddprt.py --compress none' \
        'run fp16 python/examples/resnet18_ddprt.py --compress fp16'
    load_line after
    g=$(med_file "$T/gloo.times")
    echo "| script | step time (s, median of $ROUNDS) | vs gloo | test set (last round) |"
    echo "|---|---:|---:|---|"
    for n in gloo ddprt fp16; do
        m=$(med_file "$T/$n.times")
        echo "| ${n/fp16/ddprt --compress fp16} | $m | $(ratio "$m" "$g") | $(grep -h '^Test set' "$T/$n.$ROUNDS" | head -1) |"
    done
fi

if [ "$WHAT" = all ] || [ "$WHAT" = horovod ]; then
    echo
    echo "## Horovod API vs the DDP hook: mnist_horovod.py vs mnist_ddprt.py, 2 ranks, rank 0's loss lines"
    args=(--epochs 2 --max-steps 16 --log-interval 2)
    rank0() { "$B/ddprt-launch" --nproc-per-node 2 --bind-to core -- "$PY" "$@" 2>&1 |
        sed -n 's/^\[rank 0\] \(Train\|Test\)/\1/p' | tr '\t' ' '; }
    rank0 python/examples/mnist_ddprt.py "${args[@]}" >"$T/hook.txt"
    rank0 python/examples/mnist_horovod.py "${args[@]}" >"$T/hvd.txt"
    echo "| DDP + ddprt hook | Horovod API (ddprt.torch) |"
    echo "|---|---|"
    paste -d'\t' "$T/hook.txt" "$T/hvd.txt" | awk -F'\t' '{ print "| " $1 " | " $2 " |" }'
    if cmp -s "$T/hook.txt" "$T/hvd.txt" && [ -s "$T/hook.txt" ]; then echo "equal: yes ($(wc -l <"$T/hook.txt") lines)"
    else echo "equal: NO"; fi
fi
