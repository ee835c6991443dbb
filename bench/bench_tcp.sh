#!/bin/bash
# ddprt's tcp backend vs Open MPI's btl tcp, 2 ranks on this machine over real TCP
# (DDPRT_TCP_LOCAL=tcp, DDPRT_SHM=0; Open MPI forced onto the loopback interface too), allreduce
# float sum. Rounds alternate ddprt, ompi, ddprt, ompi... in one window so that load
# changes hit both alike; prints every round's busbw, the medians, the ratio of the
# medians and the per-round ratios (round i: ddprt_i / ompi_i), with `uptime` beside.
#   bench/bench_tcp.sh [ROUNDS (5)] [SIZES ("4 1M 16M")]
#   BENCH_TCP_FULL=1: afterwards one full-range table (4 B .. 64 MiB) of each.
#   BENCH_TCP_ENV: extra environment for ddprt's ranks (e.g. "DDPRT_TCP_NSOCKS=1").
#   BENCH_TCP_BUILD: where ddprt-bench and ddprt-launch are (default build; e.g. an
#   older tree's build folder for a before/after table).
# Needs build/ddprt-bench, build/ddprt-launch and mpicc (builds build/ompi-bench).
set -u
cd "$(dirname "$0")/.."
B=${BENCH_TCP_BUILD:-build}
ROUNDS=${1:-5}
SIZES=${2:-"4 1M 16M"}
[ -x build/ompi-bench ] || mpicc -O2 bench/ompi_bench.c -o build/ompi-bench || exit 1
[ -x $B/ddprt-bench ] || { echo "bench_tcp: build ddprt first (make)" >&2; exit 1; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
export OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_btl=self,tcp OMPI_ALLOW_RUN_AS_ROOT=1 \
    OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
iters() { case $1 in 4) echo 2000 ;; *K) echo 200 ;; 1M) echo 100 ;; *) echo 20 ;; esac; }
bytes() { case $1 in *K) echo $((${1%K} * 1024)) ;; *M) echo $((${1%M} * 1048576)) ;; *) echo "$1" ;; esac; }
# The figure for the size: busbw (GB/s; column 8 in ddprt's table, 5 in ompi's), or
# below 1 KiB the time in us (6, 3) where busbw rounds to 0.
pick() { awk -v s="$2" -v c="$3" '$1 == s && $1 ~ /^[0-9]+$/ { print $c }' "$1" | tail -1; }
small() { [ "$1" -lt 1024 ]; }
ddprt() {
    env DDPRT_TCP_LOCAL=tcp DDPRT_SHM=0 ${BENCH_TCP_ENV:-} $B/ddprt-launch --nproc-per-node 2 --no-prefix -- \
        $B/ddprt-bench allreduce -b "$1" -e "$2" -f 2 -n "$3" -w 5 -c 0 2>&1
}
ompi() { mpirun -np 2 build/ompi-bench "$1" "$2" 2 "$3" 2>&1; }
echo "# bench_tcp: $ROUNDS rounds, 2 ranks over TCP loopback; busbw GB/s (below 1 KiB: time us)"
echo "# before: $(uptime)"
for s in $SIZES; do
    n=$(iters "$s")
    b=$(bytes "$s")
    : >"$TMP/d.$s"
    : >"$TMP/o.$s"
    for r in $(seq "$ROUNDS"); do
        ddprt "$s" "$s" "$n" >"$TMP/out"
        if small "$b"; then d=$(pick "$TMP/out" "$b" 6); else d=$(pick "$TMP/out" "$b" 8); fi
        ompi "$s" "$s" "$n" >"$TMP/out"
        if small "$b"; then o=$(pick "$TMP/out" "$b" 3); else o=$(pick "$TMP/out" "$b" 5); fi
        echo "${d:-nan}" >>"$TMP/d.$s"
        echo "${o:-nan}" >>"$TMP/o.$s"
    done
done
. bench/lib.sh
med() { med_file "$1"; }
printf '%-6s %-6s' size lib
for r in $(seq "$ROUNDS"); do printf ' %7s' "r$r"; done
printf ' %7s\n' median
for s in $SIZES; do
    for lib in d o; do
        printf '%-6s %-6s' "$s" "$([ $lib = d ] && echo ddprt || echo ompi)"
        while read -r v; do printf ' %7s' "$v"; done <"$TMP/$lib.$s"
        printf ' %7s\n' "$(med "$TMP/$lib.$s")"
    done
    # ratio > 1: ddprt faster (busbw ddprt / ompi, or time ompi / ddprt).
    inv=0
    small "$(bytes "$s")" && inv=1
    printf '%-6s %-6s' "$s" ratio
    paste "$TMP/d.$s" "$TMP/o.$s" | awk -v inv=$inv '{ printf " %7.2f", (inv ? $2 / $1 : $1 / $2) }'
    awk -v d="$(med "$TMP/d.$s")" -v o="$(med "$TMP/o.$s")" -v inv=$inv \
        'BEGIN { printf " %7.2f\n", (inv ? o / d : d / o) }'
done
echo "# ratio > 1: ddprt faster; ratio 'median' = of the medians. after: $(uptime)"
if [ "${BENCH_TCP_FULL:-0}" = 1 ]; then
    echo "# full range, ddprt:"
    ddprt 4 64M 20 | grep -E '^ *[#0-9]'
    echo "# full range, ompi:"
    ompi 4 64M 20 | grep -E '^ *[#0-9]'
fi
