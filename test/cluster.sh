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

# --invariant across hosts: 2 hosts x 2 ranks (a launcher per host, TCP between the
# hosts, unix sockets and shared memory inside) give the checkpoint of one process,
# byte for byte: lenet and resnet20 on 3000 Fashion-MNIST samples, textcnn on the
# synthetic token set.
inv_data() { # DIR: the first 3000 / 200 Fashion-MNIST samples as IDX files
    local src=${DDPRT_DATA:-/usr/share/datasets/fashion-mnist}
    mkdir -p "$1"
    idx_head "$src/train-images-idx3-ubyte.gz" "$1/train-images-idx3-ubyte" 3000 784 2051 28 28 &&
        idx_head "$src/train-labels-idx1-ubyte.gz" "$1/train-labels-idx1-ubyte" 3000 1 2049 &&
        idx_head "$src/t10k-images-idx3-ubyte.gz" "$1/t10k-images-idx3-ubyte" 200 784 2051 28 28 &&
        idx_head "$src/t10k-labels-idx1-ubyte.gz" "$1/t10k-labels-idx1-ubyte" 200 1 2049
}
invariant_hosts() {
    local d="$TMP/inv" m h ok=1 list=""
    inv_data "$d/data" || { bad "invariant across hosts: cannot cut the data set"; return; }
    for m in lenet resnet20 textcnn; do
        local a=(--invariant 4 --model "$m" --batch-size 8 --epochs 1 --max-steps 12 --threads 1 --test-batch-size 100
                 --log-interval 1000 --backend tcp)
        case $m in textcnn) a+=(--data synthetic --no-eval --seq-len 32 --embed-dim 32) ;; *) a+=(--data "$d/data") ;; esac
        fresh
        on 0 "one" -- "$B/ddprt-train" "${a[@]}" --save "$d/$m.w1.st"
        waitall 300
        all_zero || { ok=0; list+=" $m(W=1 failed)"; continue; }
        fresh
        PORT=$((PORT + 2))
        for ((h = 0; h < 2; h++)); do
            on $h "node$h" DDPRT_TIMEOUT=60 -- "$B/ddprt-launch" --nproc-per-node 2 --nnodes 2 --node-rank $h \
                --master-addr "$M" --master-port $PORT -- "$B/ddprt-train" "${a[@]}" --save "$d/$m.w4.st"
        done
        waitall 300
        if all_zero && cmp -s "$d/$m.w1.st" "$d/$m.w4.st"; then list+=" $m"; else ok=0; list+=" $m(differs)"; fi
    done
    if [ $ok = 1 ]; then ok "--invariant 4 across 2 hosts x 2 ranks = 1 process, cmp-equal checkpoints:$list"
    else bad "--invariant 4 across hosts:$list"; fi
}

# Elastic membership across hosts (ddprt-launch --nnodes 1:2, 2 ranks per host,
# --invariant 4, a checkpoint every 20 steps): host 1 goes down (its launcher and ranks
# SIGKILLed) after the first checkpoint; host 0 goes on with 2 ranks from the newest
# one (mid-epoch); host 1's launcher comes back, joins at the next restart point (the
# ranks stop after their next checkpoint) and the job finishes on 4 ranks. The final checkpoint equals an uninterrupted 4-rank run's.
elastic_grow() {
    local d="$TMP/eg" h run t0
    inv_data "$d/data" || { bad "elastic grow: cannot cut the data set"; return; }
    # Rank 2 (host 1) kills its session (kill 0: its process group, no ps needed) in
    # round 0; round 1's ranks (2, host 0 alone) start once host 1 has joined again (their
    # launcher's DDPRT_ELASTIC file exists), so they cannot finish the job first.
    printf '%s\n' '#!/bin/sh' 'if [ "$RANK" = 2 ] && [ -z "$DDPRT_RESTART_COUNT" ]; then' \
        '  (while [ ! -e "$CK" ]; do sleep 0.02; done; sleep 0.3; kill -9 0) &' \
        'elif [ "$WORLD_SIZE" = 2 ]; then' \
        '  i=0; while [ ! -e "$DDPRT_ELASTIC" ] && [ $i -lt 3000 ]; do sleep 0.1; i=$((i+1)); done' 'fi' \
        'exec "$TRAIN" "$@"' >"$d/wrap.sh"
    chmod +x "$d/wrap.sh"
    local a=(--data "$d/data" --invariant 4 --batch-size 8 --epochs 12 --threads 1 --lr 0.05 --log-interval 1000 --backend tcp
             --save-every 20)
    fresh
    PORT=$((PORT + 2))
    for ((h = 0; h < 2; h++)); do
        on $h "ref$h" DDPRT_TIMEOUT=60 -- "$B/ddprt-launch" --nproc-per-node 2 --nnodes 2 --node-rank $h \
            --master-addr "$M" --master-port $PORT -- "$B/ddprt-train" "${a[@]}" --save "$d/ref.st"
    done
    waitall 300
    all_zero || { bad "elastic grow (uninterrupted run: exit codes ${RCS[*]})"; return; }
    fresh
    PORT=$((PORT + 2))
    t0=$SECONDS
    local L=(--nproc-per-node 2 --nnodes 1:2 --master-addr "$M" --master-port $PORT --resume-arg "$d/el.st")
    # Each launcher in its own session (a rank kills the session: the node is gone); sh
    # stays outside it and reports the status, so bash has no killed job to announce.
    local SESSION='setsid -w "$@"; exit $?'
    for h in 1 0; do
        on $h "node$h" DDPRT_TIMEOUT=60 CK="$d/el.st" TRAIN="$B/ddprt-train" -- sh -c "$SESSION" sh "$B/ddprt-launch" "${L[@]}" \
            --node-rank $h -- "$d/wrap.sh" "${a[@]}" --save "$d/el.st"
        sleep 0.2
    done
    local end=$((SECONDS + 120))
    until grep -q "round 1: 1 node(s)" "$TMP/node0.err" 2>/dev/null || [ $SECONDS -ge $end ]; do sleep 0.1; done
    on 1 "node1b" DDPRT_TIMEOUT=60 CK="$d/el.st" TRAIN="$B/ddprt-train" -- sh -c "$SESSION" sh "$B/ddprt-launch" "${L[@]}" \
        --node-rank 1 -- "$d/wrap.sh" "${a[@]}" --save "$d/el.st"
    waitall 300
    local secs=$((SECONDS - t0))
    # node1 (the lost one) was SIGKILLed: 137; the others must succeed
    if [ "${RCS[0]}" = 137 ] && [ "${RCS[1]}" = 0 ] && [ "${RCS[2]}" = 0 ] &&
        grep -q "node 0: node 1 (.*) is lost" "$TMP/node0.err" && grep -q "node 0: node 1 (.*) joined" "$TMP/node0.err" &&
        grep -q "round 2: 2 node(s), ranks 0..1 of 4, resuming from" "$TMP/node0.err" && cmp -s "$d/ref.st" "$d/el.st"; then
        ok "elastic --nnodes 1:2 across hosts: 4 ranks, host 1 lost mid-epoch 2, on 2 ranks, host 1 back, 4 ranks: same final checkpoint (${secs} s)"
    else
        bad "elastic grow across hosts (exit codes ${RCS[*]}; lines or checkpoints differ)"
    fi
    if [ -n "${CLUSTER_VERBOSE:-}" ] || [ -n "${CLUSTER_ELASTIC_LINES:-}" ]; then
        echo "--- node 0's launcher:"; grep "ddprt-launch" "$TMP/node0.err"
        echo "--- node 1's launcher (after it came back):"; grep "ddprt-launch" "$TMP/node1b.err"
    fi
}

case "$MODE" in
--bench | --calib | --compress | --python | --rounds)
    . "$(dirname "$0")/../bench/cluster_${MODE#--}.sh"
    exit 0 ;;
esac

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
# Transports per peer pair (rank 0's info lines, transport/tp_transport.h): across
# hosts tcp; inside a host of a 2-host comm shm's point-to-point rings (rank 0 would
# say "shm pairs send through tcp" had a rank failed to map them; the bench checked
# every sum); one host: shm.
pairs_ok=1
for want in "rank 0 <-> 1: shm (same host, point-to-point)" "rank 0 <-> 2: tcp (different hosts)" \
    "rank 1 <-> 3: tcp (different hosts)" "rank 2 <-> 3: shm (same host, point-to-point)"; do
    grep -qF "$want" "$TMP/r0.err" || { pairs_ok=0; say "missing: $want"; }
done
! grep -qF "shm pairs send through" "$TMP/r0.err" || { pairs_ok=0; say "the shm pairs fell back to tcp"; }
GENV=(DDPRT_LOG=info DDPRT_TRACE_DIR="$TMP")
run_grid "bench 1x2 tcp:// (one host)" 1 2 tcp "${BENCH[@]}"
GENV=(DDPRT_LOG=warn DDPRT_TRACE_DIR="$TMP")
grep -qF "rank 0 <-> 1: shm (same host)" "$TMP/r0.err" || { pairs_ok=0; say "missing: shm on one host"; }
if [ $pairs_ok = 1 ]; then ok "transports per pair: shm on one host; shm rings inside a host of two, tcp across"
else bad "transports per pair (rank 0's log lines)"; fi
run_grid "bench 2x2 env://" 2 2 env "${BENCH[@]}"
run_grid "bench 2x1 file://" 2 1 file "${BENCH[@]}"
run_launch "bench 2x2 ddprt-launch --nnodes 2" 2 "${BENCH[@]}" --init-method env://
if [ -e /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] || [ -n "${DDPRT_DATA:-}" ]; then
    run_grid "train 2x1 tcp://" 2 1 tcp "${TRAIN[@]}" --backend tcp
    run_launch "train 2x2 ddprt-launch --nnodes 2" 2 "${TRAIN[@]}" --backend tcp
    # ZeRO-1 across hosts: bucket reduce-scatters and parameter allgathers on the TCP ring
    run_launch "train 2x2 --zero 1 (reduce-scatter over TCP, --check-sync)" 2 "${TRAIN[@]}" --backend tcp \
        --optimizer adamw --clip-grad-norm 1 --zero 1 --check-sync 1
    elastic
    invariant_hosts
    elastic_grow
else
    echo "cluster: the training cases skipped (no Fashion-MNIST: apt-get install dataset-fashion-mnist)"
fi
shape 1gbit
run_grid "bench 2x2 tcp:// at 1 Gbit/s" 2 2 tcp "${BENCH[@]}"
shape ""
fault "SIGKILL of a rank on the other host (2x2)" 2 kill $((TO + 6))
fault "link down mid-allreduce (2x1)" 1 linkdown $((TO + 6))
fault "link down mid-allreduce (2x2)" 2 linkdown $((TO + 6))
echo "$pass passed, $fail failed"
[ $fail = 0 ]
