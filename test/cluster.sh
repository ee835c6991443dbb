#!/usr/bin/env bash
# A cluster on one machine: N "hosts" as network namespaces, each with one veth into a
# switch namespace holding a bridge, addresses from 198.18.0.0/15 (reserved for network
# benchmarks). Runs the benchmark and training across hosts via tcp://, env://, file://
# and ddprt-launch per node, an elastic restart across hosts, then failures: a rank SIGKILLed on the other host, a host
# whose link goes down mid-allreduce. No DDPRT_SOCKET_IFNAME anywhere: the ranks must
# find the right addresses themselves. Everything made here is removed on every exit.
#   test/cluster.sh [BUILD]            the tests (quiet; CLUSTER_VERBOSE=1 for details)
#   test/cluster.sh [BUILD] --bench    tables: 2x1 and 2x2, unshaped and 1 Gbit/s, per algo
#   test/cluster.sh [BUILD] --rounds   the same, repeated and alternated: medians (bench/cluster_rounds.sh)
#   test/cluster.sh [BUILD] --compress resnet20 2x1 with and without --grad-compress fp16
#   test/cluster.sh [BUILD] --calib    cost model fitted on the shaped link vs measured
#   test/cluster.sh [BUILD] --python   Python: gloo vs ddprt allreduce, ResNet-18 DDP step time (bench/cluster_python.sh)
# Needs root (skips with one line saying why otherwise). Ends with "N passed, N failed".
set -u
B=${1:-build}
MODE=${2:-test}
NH=${CLUSTER_HOSTS:-2}
MTU=${CLUSTER_MTU:-1500} # of every host's link (9000: jumbo frames)
TO=${CLUSTER_TIMEOUT:-4}    # DDPRT_TIMEOUT of the failure tests (s)
P=ddc$$
SW=${P}sw
TMP=
pass=0 fail=0

skip() { echo "cluster: skipped: $*"; echo "0 passed, 0 failed"; exit 0; }
say() { [ -n "${CLUSTER_VERBOSE:-}" ] && echo "$@"; return 0; }

cleanup() {
    for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^$P"); do
        # Only what runs in our own namespaces: the ranks this script started.
        for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$pid" 2>/dev/null; done
        ip netns del "$ns" 2>/dev/null
    done
    [ -n "$TMP" ] && [ -z "${CLUSTER_KEEP:-}" ] && rm -rf "$TMP"
}

[ "$(id -u)" = 0 ] || skip "needs root to create network namespaces"
command -v ip >/dev/null || skip "the ip command (iproute2) is missing"
[ -x "$B/ddprt-bench" ] || { echo "cluster: $B/ddprt-bench not built"; echo "0 passed, 1 failed"; exit 1; }
trap cleanup EXIT
trap 'exit 130' INT TERM HUP
ip netns add "$SW" 2>/dev/null || skip "cannot create a network namespace here (ip netns add failed)"
TMP=$(mktemp -d /tmp/ddprt-cluster.XXXXXX)

host() { echo "${P}h$1"; }
addr() { echo "198.18.0.$(($1 + 1))"; }
setup() {
    ip -n "$SW" link add br0 type bridge && ip -n "$SW" link set br0 up || return 1
    for ((h = 0; h < NH; h++)); do
        local ns; ns=$(host $h)
        ip netns add "$ns" &&
            ip link add eth0 netns "$ns" type veth peer name "p$h" netns "$SW" &&
            ip -n "$SW" link set "p$h" master br0 && ip -n "$SW" link set "p$h" up &&
            ip -n "$ns" addr add "$(addr $h)/24" dev eth0 &&
            ip -n "$ns" link set eth0 mtu "$MTU" && ip -n "$SW" link set "p$h" mtu "$MTU" &&
            ip -n "$ns" link set eth0 up && ip -n "$ns" link set lo up || return 1
    done
}
setup || skip "cannot build the namespace network (veth/bridge not available?)"

# shape RATE: a token bucket on every host's egress ("" removes it).
shape() {
    for ((h = 0; h < NH; h++)); do
        ip netns exec "$(host $h)" tc qdisc del dev eth0 root 2>/dev/null
        [ -n "$1" ] && ip netns exec "$(host $h)" tc qdisc add dev eth0 root tbf rate "$1" burst 512kb latency 100ms
    done
    return 0
}

# on HOST NAME ENV... -- CMD...: starts CMD in host HOST's namespace in the background,
# output in $TMP/NAME.{out,err}; its pid is appended to PIDS.
PIDS=()
GENV=(DDPRT_LOG=warn DDPRT_TRACE_DIR="$TMP" ${CLUSTER_ENV:-})  # extra environment of every rank (traces: not in the cwd; CLUSTER_ENV: more)
on() {
    local h=$1 name=$2; shift 2
    local envs=("${GENV[@]}")
    while [ "$1" != "--" ]; do envs+=("$1"); shift; done
    shift
    ip netns exec "$(host "$h")" env "${envs[@]}" "$@" >"$TMP/$name.out" 2>"$TMP/$name.err" &
    PIDS+=($!)
}
# waitall SECS: waits for every pid in PIDS (killing them at the deadline); sets RCS.
waitall() {
    local end=$((SECONDS + $1)) rc
    RCS=()
    for pid in "${PIDS[@]}"; do
        while kill -0 "$pid" 2>/dev/null && [ $SECONDS -lt $end ]; do sleep 0.1; done
        kill -0 "$pid" 2>/dev/null && kill -9 "$pid" 2>/dev/null
        wait "$pid" 2>/dev/null; rc=$?
        RCS+=("$rc")
    done
    PIDS=()
}
ok() { pass=$((pass + 1)); say "ok   $1"; }
bad() {
    fail=$((fail + 1)); echo "FAIL $1"
    for f in "$TMP"/*.err; do [ -s "$f" ] && sed "s|^|  $(basename "$f" .err): |" "$f" | tail -5; done
}
fresh() { rm -f "$TMP"/*.out "$TMP"/*.err; }
all_zero() { for rc in "${RCS[@]}"; do [ "$rc" = 0 ] || return 1; done; }

M=$(addr 0)
PORT=29600
BENCH=("$B/ddprt-bench" allreduce -b 4 -e 1M -n 5 -w 1)

# run_grid NAME HOSTS PER METHOD [ARGS...]: one job, PER ranks on each of HOSTS hosts.
run_grid() {
    local name=$1 nh=$2 per=$3 how=$4; shift 4
    local W=$((nh * per)) r
    fresh
    PORT=$((PORT + 1))
    for ((r = 0; r < W; r++)); do
        local h=$((r / per)) lr=$((r % per))
        case $how in
        tcp) on $h "r$r" DDPRT_TIMEOUT=30 -- "$@" --init-method "tcp://$M:$PORT" --rank $r --world-size $W ;;
        env) on $h "r$r" DDPRT_TIMEOUT=30 RANK=$r WORLD_SIZE=$W LOCAL_RANK=$lr MASTER_ADDR=$M MASTER_PORT=$PORT \
                 -- "$@" --init-method env:// ;;
        file) on $h "r$r" DDPRT_TIMEOUT=30 -- "$@" --init-method "file://$TMP/rdzv.$PORT" --rank $r --world-size $W ;;
        esac
    done
    waitall "${CLUSTER_WAIT:-60}"
    if all_zero; then ok "$name"; else bad "$name (exit codes ${RCS[*]})"; fi
}

run_launch() {
    local name=$1 per=$2; shift 2
    fresh
    PORT=$((PORT + 1))
    for ((h = 0; h < NH; h++)); do
        on $h "node$h" DDPRT_TIMEOUT=30 -- "$B/ddprt-launch" --nproc-per-node "$per" --nnodes "$NH" --node-rank $h \
            --master-addr "$M" --master-port $PORT -- "$@"
    done
    waitall "${CLUSTER_WAIT:-60}"
    if all_zero; then ok "$name"; else bad "$name (exit codes ${RCS[*]})"; fi
}

# A long allreduce job (2 hosts x PER), then FAULT; every rank must fail within
# DEADLINE s naming a peer rank. Prints the seconds from the fault to each exit.
fault() {
    local name=$1 per=$2 what=$3 deadline=$4
    local W=$((2 * per)) r
    fresh
    PORT=$((PORT + 1))
    for ((r = 0; r < W; r++)); do
        on $((r / per)) "r$r" DDPRT_TIMEOUT=$TO -- "$B/ddprt-bench" allreduce -b 16M -e 16M -n 100000 -w 1 -c 0 \
            --byte-budget 1000G --init-method "tcp://$M:$PORT" --rank $r --world-size $W
    done
    # Running when every rank is past the rendezvous and the first sizes (header printed).
    local end=$((SECONDS + 30))
    until grep -q "Avg\|#  *size\|^ *[0-9]" "$TMP/r0.out" 2>/dev/null || [ $SECONDS -ge $end ]; do sleep 0.1; done
    sleep 1
    local victim=$((W - 1)) t0
    t0=$(date +%s.%N)
    case $what in
    kill) kill -9 "${PIDS[$victim]}"; wait "${PIDS[$victim]}" 2>/dev/null ;;
    linkdown) ip -n "$(host 1)" link set eth0 down ;;
    esac
    local times=() okk=1 rc
    for ((r = 0; r < W; r++)); do
        local pid=${PIDS[$r]} lim
        lim=$(awk "BEGIN{printf \"%.3f\", $t0 + $deadline}")
        while kill -0 "$pid" 2>/dev/null && awk "BEGIN{exit !($(date +%s.%N) < $lim)}"; do sleep 0.05; done
        local t1; t1=$(date +%s.%N)
        if kill -0 "$pid" 2>/dev/null; then kill -9 "$pid"; times+=("r$r:hung"); okk=0; wait "$pid" 2>/dev/null; continue; fi
        wait "$pid" 2>/dev/null; rc=$?
        times+=("r$r:$(awk "BEGIN{printf \"%.1f\", $t1 - $t0}")s")
        [ "$what" = kill ] && [ $r = $victim ] && continue
        if [ "$rc" = 0 ]; then okk=0; times+=("(r$r exit 0)"); continue; fi
        grep -q "rank [0-9]" "$TMP/r$r.err" || { okk=0; times+=("(r$r: no peer named)"); }
    done
    PIDS=()
    [ "$what" = linkdown ] && ip -n "$(host 1)" link set eth0 up
    if [ $okk = 1 ]; then ok "$name: ${times[*]}"; else bad "$name: ${times[*]}"; fi
    if [ -n "${CLUSTER_VERBOSE:-}" ]; then
        for ((r = 0; r < W; r++)); do [ -s "$TMP/r$r.err" ] && echo "  r$r: $(tail -1 "$TMP/r$r.err")"; done
    fi
}

# Elastic restart across hosts: one launcher per host with --max-restarts 1 (node 0's
# launcher runs the control channel on master port + 1); rank 1 (host 1) is SIGKILLed
# after the first checkpoint; both launchers restart their ranks from it and the final
# checkpoint equals an uninterrupted run's byte for byte. Data: the first 12000 / 1000
# Fashion-MNIST samples as plain IDX files.
be32() { printf "$(printf '\\x%02x\\x%02x\\x%02x\\x%02x' $(($1 >> 24 & 255)) $(($1 >> 16 & 255)) $(($1 >> 8 & 255)) $(($1 & 255)))"; }
idx_head() { # SRC_GZ OUT N ITEM_BYTES MAGIC [DIMS...]
    local src=$1 out=$2 n=$3 item=$4 magic=$5; shift 5
    { be32 "$magic"; be32 "$n"; for dim in "$@"; do be32 "$dim"; done
      zcat "$src" | tail -c +$((9 + 4 * $#)) | head -c $((n * item)); } >"$out"
}
elastic() {
    local src=${DDPRT_DATA:-/usr/share/datasets/fashion-mnist} d="$TMP/el" h run
    mkdir -p "$d/data"
    idx_head "$src/train-images-idx3-ubyte.gz" "$d/data/train-images-idx3-ubyte" 12000 784 2051 28 28 &&
        idx_head "$src/train-labels-idx1-ubyte.gz" "$d/data/train-labels-idx1-ubyte" 12000 1 2049 &&
        idx_head "$src/t10k-images-idx3-ubyte.gz" "$d/data/t10k-images-idx3-ubyte" 1000 784 2051 28 28 &&
        idx_head "$src/t10k-labels-idx1-ubyte.gz" "$d/data/t10k-labels-idx1-ubyte" 1000 1 2049 ||
        { bad "elastic restart: cannot cut the data set"; return; }
    printf '%s\n' '#!/bin/sh' 'if [ "$RANK" = 1 ] && [ -z "$DDPRT_RESTART_COUNT" ]; then' \
        '  (while [ ! -e "$CK" ]; do sleep 0.02; done; sleep 0.1; kill -9 $$) &' 'fi' 'exec "$TRAIN" "$@"' >"$d/wrap.sh"
    chmod +x "$d/wrap.sh"
    for run in ref el; do
        fresh
        PORT=$((PORT + 2))
        local prog=("$B/ddprt-train")
        [ $run = el ] && prog=("$d/wrap.sh")
        for ((h = 0; h < 2; h++)); do
            on $h "node$h" DDPRT_TIMEOUT=30 CK="$d/el.st" TRAIN="$B/ddprt-train" -- "$B/ddprt-launch" --nproc-per-node 1 \
                --nnodes 2 --node-rank $h --master-addr "$M" --master-port $PORT --max-restarts 1 --resume-arg "$d/$run.st" \
                -- "${prog[@]}" --data "$d/data" --epochs 3 --threads 1 --backend tcp --save "$d/$run.st"
        done
        waitall 120
        all_zero || { bad "elastic restart ($run run: exit codes ${RCS[*]})"; return; }
    done
    if grep -q "node 0: restart 1 of 1 after rank .*; resuming from $d/el.st" "$TMP/node0.err" &&
        grep -q "node 1: restart 1 of 1 after rank .*; resuming from $d/el.st" "$TMP/node1.err" &&
        cmp -s "$d/ref.st" "$d/el.st"; then
        ok "elastic restart across hosts: rank 1 SIGKILLed on host 1, both launchers restart, same final checkpoint"
    else
        bad "elastic restart across hosts (restart lines or checkpoints differ)"
    fi
}

if [ "$MODE" = --bench ]; then
    . "$(dirname "$0")/../bench/cluster_bench.sh"
    exit 0
fi
if [ "$MODE" = --calib ]; then
    . "$(dirname "$0")/../bench/cluster_calib.sh"
    exit 0
fi
if [ "$MODE" = --compress ]; then
    . "$(dirname "$0")/../bench/cluster_compress.sh"
    exit 0
fi
if [ "$MODE" = --python ]; then
    . "$(dirname "$0")/../bench/cluster_python.sh"
    exit 0
fi
if [ "$MODE" = --rounds ]; then
    . "$(dirname "$0")/../bench/cluster_rounds.sh"
    exit 0
fi

TRAIN=("$B/ddprt-train" --epochs 1 --max-steps 10 --threads 1 --test-batch-size 1000 --log-interval 100)
run_grid "bench 2x1 tcp://" 2 1 tcp "${BENCH[@]}"
GENV=(DDPRT_LOG=debug DDPRT_TRACE_DIR="$TMP")
run_grid "bench 2x2 tcp://" 2 2 tcp "${BENCH[@]}"
GENV=(DDPRT_LOG=warn DDPRT_TRACE_DIR="$TMP")
# Same host and namespace: unix socket; the other host: TCP from its 198.18 address.
if grep -q "rank 0 connected from a local process" "$TMP/r1.err" &&
    grep -q "rank 0 connected from $M:" "$TMP/r2.err" && grep -q "rank 1 connected from $M:" "$TMP/r3.err" &&
    grep -q "rank 2 connected from a local process" "$TMP/r3.err"; then
    ok "2x2: unix sockets inside a host, TCP to the other host's address"
else
    bad "2x2: unix sockets inside a host, TCP to the other host's address"
fi
run_grid "bench 2x2 env://" 2 2 env "${BENCH[@]}"
run_grid "bench 2x1 file://" 2 1 file "${BENCH[@]}"
run_launch "bench 2x2 ddprt-launch --nnodes 2" 2 "${BENCH[@]}" --init-method env://
if [ -e /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] || [ -n "${DDPRT_DATA:-}" ]; then
    run_grid "train 2x1 tcp://" 2 1 tcp "${TRAIN[@]}" --backend tcp
    run_launch "train 2x2 ddprt-launch --nnodes 2" 2 "${TRAIN[@]}" --backend tcp
    elastic
else
    say "train: skipped (no Fashion-MNIST: apt-get install dataset-fashion-mnist)"
fi
shape 1gbit
run_grid "bench 2x2 tcp:// at 1 Gbit/s" 2 2 tcp "${BENCH[@]}"
shape ""
fault "SIGKILL of a rank on the other host (2x2)" 2 kill $((TO + 6))
fault "link down mid-allreduce (2x1)" 1 linkdown $((TO + 6))
fault "link down mid-allreduce (2x2)" 2 linkdown $((TO + 6))
echo "$pass passed, $fail failed"
[ $fail = 0 ]
