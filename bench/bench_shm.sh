#!/bin/bash
# Shared memory inside a host: ddprt (2 ranks, shm) against Open MPI's shared-memory
# path (btl self,vader), and ddprt over its unix sockets (DDPRT_SHM=0), alternating in
# one window (ddprt shm, Open MPI, ddprt sockets; ROUNDS times) so that the load of a
# shared machine falls on all alike. Prints the median of the rounds per size and the
# ratios, with the load average. Needs mpicc/mpirun (openmpi-bin, libopenmpi-dev).
#   bench/bench_shm.sh [ROUNDS (5)] [MIN (4)] [MAX (64M)] [FACTOR (4)] [ITERS (20)]
# BENCH_SOCKETS=0 leaves the socket column out. BENCH_NP=N ranks (default 2).
# BENCH_BASE=BIN: the third column runs ddprt-bench binary BIN (a build of another
# version, shared memory on) instead of the sockets: before/after in one window.
# BENCH_REG=1: the shm column uses registered buffers (ddprt-bench -R 1: the ranks read
# each other's buffers in place) and the third column the copy protocol (-R 0).
# BENCH_OMPI_MCA="--mca k v ...": more Open MPI options (e.g. btl_vader_single_copy_mechanism none).
# BENCH_BIND=core (default) or none: both sides' ranks bound to their own cores or not
# (mpirun binds to cores by default; unbound ranks that the scheduler puts on one core
# pay a context switch per wait: a 4-byte allreduce then takes 12 us instead of 0.3).
set -eu
cd "$(dirname "$0")/.."
B=${DDPRT_BUILD:-build}
ROUNDS=${1:-5} MIN=${2:-4} MAX=${3:-64M} FACTOR=${4:-4} ITERS=${5:-20} NP=${BENCH_NP:-2} BIND=${BENCH_BIND:-core}
[ -x "$B/ddprt-bench" ] || { echo "bench_shm: build first (make)" >&2; exit 2; }
command -v mpicc >/dev/null || { echo "bench_shm: no mpicc (apt-get install openmpi-bin libopenmpi-dev)" >&2; exit 2; }
[ "$B/ompi-bench" -nt bench/ompi_bench.c ] || mpicc -O2 bench/ompi_bench.c -o "$B/ompi-bench"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
export DDPRT_TRACE_DIR="$T" # stall-warning trace dumps stay out of the tree
# size time busbw from the data rows of either table
rows() { awk '$1 ~ /^[0-9]+$/ && NF >= 6 { if (NF >= 9) print $1, $6, $8; else print $1, $3, $5 }' "$1"; }
# ddprt BIN ENV...: one ddprt-bench run of binary BIN
# ddprt BIN REG ENV...: one ddprt-bench run of binary BIN (REG: -R value)
ddprt() { local bin=$1 reg=$2; shift 2; env "$@" "$B/ddprt-launch" --nproc-per-node "$NP" --bind-to "$BIND" --no-prefix -- "$bin" allreduce \
    -b "$MIN" -e "$MAX" -f "$FACTOR" -n "$ITERS" -w 5 -R "$reg"; }
# shellcheck disable=SC2086
ompi() { mpirun --allow-run-as-root -np "$NP" --bind-to "$BIND" --mca btl self,vader ${BENCH_OMPI_MCA:-} "$B/ompi-bench" \
    "$(numfmt --from=iec "$MIN")" "$(numfmt --from=iec "$MAX")" "$FACTOR" "$ITERS"; }
REG=${BENCH_REG:-0}
echo "# bench_shm: $NP ranks, shm column registered buffers: $REG, Open MPI extra: ${BENCH_OMPI_MCA:-none}, $ROUNDS rounds alternating, allreduce float sum, iters $ITERS, bind-to $BIND"
echo "# before: $(uptime)"
for r in $(seq "$ROUNDS"); do
    ddprt "$B/ddprt-bench" "$REG" DDPRT_SHM=1 > "$T/shm.$r" 2>&1 || { echo "ddprt (shm) failed:"; cat "$T/shm.$r"; exit 1; }
    ompi > "$T/ompi.$r" 2>&1 || { echo "Open MPI failed:"; cat "$T/ompi.$r"; exit 1; }
    if [ -n "${BENCH_BASE:-}" ]; then
        ddprt "$BENCH_BASE" 0 DDPRT_SHM=1 > "$T/sock.$r" 2>&1 || { echo "ddprt (base) failed:"; cat "$T/sock.$r"; exit 1; }
    elif [ "$REG" = 1 ]; then
        ddprt "$B/ddprt-bench" 0 DDPRT_SHM=1 > "$T/sock.$r" 2>&1 || { echo "ddprt (copy) failed:"; cat "$T/sock.$r"; exit 1; }
    elif [ "${BENCH_SOCKETS:-1}" = 1 ]; then
        ddprt "$B/ddprt-bench" 0 DDPRT_SHM=0 > "$T/sock.$r" 2>&1 || { echo "ddprt (sockets) failed:"; cat "$T/sock.$r"; exit 1; }
    fi
done
echo "# after:  $(uptime)"
for k in shm ompi sock; do
    for r in $(seq "$ROUNDS"); do [ -f "$T/$k.$r" ] && rows "$T/$k.$r" | sed "s/^/$r /"; done > "$T/$k.all" || true
done
# median per size of column c (2 = time, 3 = busbw) over rounds
. bench/lib.sh
col() { awk -v s="$2" -v c="$3" '$2 == s { print $(c + 1) }' "$T/$1.all" | med; }
K=${BENCH_BASE:+base}
[ "$REG" = 1 ] && [ -z "${BENCH_BASE:-}" ] && K=copy
K=${K:-sock}
printf "| %10s | %14s | %14s | %14s | %10s | %10s | %10s | %10s | %10s |\n" "size (B)" "shm time (us)" \
    "ompi time (us)" "$K time (us)" "shm busbw" "ompi busbw" "$K busbw" "shm/ompi" "shm/$K"
echo "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
for s in $(awk '{ print $2 }' "$T/shm.all" | sort -gu); do
    st=$(col shm "$s" 2) ot=$(col ompi "$s" 2) kt=$(col sock "$s" 2)
    sb=$(col shm "$s" 3) ob=$(col ompi "$s" 3) kb=$(col sock "$s" 3)
    ro=$(ratio "$ot" "$st") rk=$(ratio "$kt" "$st")
    printf "| %10s | %14s | %14s | %14s | %10s | %10s | %10s | %10s | %10s |\n" "$s" "$st" "$ot" "$kt" "$sb" "$ob" "$kb" "$ro" "$rk"
done
echo "# ratios: the other's median time / shm's median time (> 1: shm faster; = busbw ratio)"
