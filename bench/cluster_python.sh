# Sourced by test/cluster.sh --python: issue 23's figures across two namespace hosts,
# one rank each, Python with Debian's torch (PY, default /usr/bin/python3):
#   1. allreduce busbw, torch.distributed gloo vs ddprt (bench/python_allreduce.py), link
#      unshaped and at 1 Gbit/s (CLUSTER_RATES, default "none 1gbit")
#   2. ResNet-18 DDP (python/examples/resnet18_{gloo,ddprt}.py, batch 32 per rank) at
#      1 Gbit/s: median step time of gloo, the ddprt hook and the fp16 hook, alternating
#      round by round (PY_ROUNDS, default 3; PY_STEPS, default 20, 5 untimed); beside
#      each, the time its gradients take on the wire at the link rate (44.7 MB float32,
#      half of it in fp16; ring allreduce of 2 ranks: each rank sends the whole buffer once)
# gloo is told the interface (GLOO_SOCKET_IFNAME=eth0: it would take the hostname's
# address, outside the namespace); ddprt finds its addresses alone.
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
PY=${PY:-/usr/bin/python3}
"$PY" -c 'import torch, torchvision' 2>/dev/null || { echo "cluster --python: $PY lacks torch/torchvision"; exit 0; }
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PYENV=(PYTHONPATH="$ROOT/python:$ROOT/python/examples" DDPRT_BUILD="$B" GLOO_SOCKET_IFNAME=eth0 DDPRT_TIMEOUT=120)
CLUSTER_WAIT=${CLUSTER_WAIT:-900}
# pyjob NAME ARGS...: one rank per host, torchrun's variables; rank 0's stdout in $TMP/NAME.0.out.
pyjob() {
    local name=$1 r; shift
    PORT=$((PORT + 3)) # ddprt meets on PORT + 2
    fresh
    for ((r = 0; r < 2; r++)); do
        on $r "$name.$r" "${PYENV[@]}" MASTER_ADDR="$M" MASTER_PORT=$PORT RANK=$r WORLD_SIZE=2 LOCAL_RANK=0 \
            LOCAL_WORLD_SIZE=1 -- "$PY" "$@"
    done
    waitall "$CLUSTER_WAIT"
    all_zero || { echo "cluster --python: $name failed (exit codes ${RCS[*]}):" >&2; tail -5 "$TMP/$name".*.err >&2; }
}
cpu_line
for rate in ${CLUSTER_RATES:-none 1gbit}; do
    if [ "$rate" = none ]; then shape ""; else shape "$rate"; fi
    echo
    echo "## allreduce, 2 namespace hosts x 1 rank, link $rate"
    pyjob ar "$ROOT/bench/python_allreduce.py" --rounds "${PY_AR_ROUNDS:-3}" --max "${PY_AR_MAX:-64M}" \
        --budget "${PY_AR_BUDGET:-128M}"
    grep -v '^\[W' "$TMP/ar.0.out"
done

rate=${PY_RESNET_RATE:-1gbit}
if [ "$rate" = none ]; then shape ""; else shape "$rate"; fi
steps=${PY_STEPS:-20}
echo
echo "## ResNet-18 DDP, batch 32 per rank, 2 namespace hosts x 1 rank, link $rate, $steps steps (5 untimed)"
load_line before
: >"$TMP/gloo.t"; : >"$TMP/ddprt.t"; : >"$TMP/fp16.t"
rn() { # NAME SCRIPT ARGS...
    local name=$1; shift
    pyjob "rn$name" "$ROOT/python/examples/$1" --steps "$steps" --warmup 5 --test-batches 4 "${@:2}"
    sed -n 's/^step time: median \([0-9.]*\) s.*/\1/p' "$TMP/rn$name.0.out" >>"$TMP/$name.t"
    cp "$TMP/rn$name.0.out" "$TMP/$name.last"
}
alternate "${PY_ROUNDS:-3}" 'rn gloo resnet18_gloo.py' 'rn ddprt resnet18_ddprt.py --compress none' \
    'rn fp16 resnet18_ddprt.py --compress fp16'
load_line after
shape ""
bps=$(rate_bps "$rate")
g=$(med_file "$TMP/gloo.t")
echo "| script | step time (s, median) | vs gloo | gradients on the wire per step at $rate (s) | test set |"
echo "|---|---:|---:|---:|---|"
for n in gloo ddprt fp16; do
    m=$(med_file "$TMP/$n.t")
    bytes=44730000
    [ "$n" = fp16 ] && bytes=22365000
    wire=$(awk -v b="$bytes" -v r="$bps" 'BEGIN { if (r > 0) printf "%.3f", b / r; else print "-" }')
    echo "| ${n/fp16/ddprt --compress fp16} | $m | $(ratio "$m" "$g") | $wire | $(grep -h '^Test set' "$TMP/$n.last" | head -1) |"
done
