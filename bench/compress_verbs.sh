#!/bin/sh
# #11's compressed-gradient table over the verbs backend: 2 ranks in the Soft-RoCE VM
# (../shared/tools/rxe/rxe-run, as make test-verbs), with and without --grad-compress
# fp16, alternating, COMPRESS_ROUNDS rounds; medians. The guest runs under TCG on one
# vCPU unless KVM works, so the absolute figures are the emulator's; what the table
# shows is the bytes per step and the communication wait with and without compression.
#   bench/compress_verbs.sh [BUILD]     (COMPRESS_MODEL resnet20, COMPRESS_STEPS 5,
#                                       COMPRESS_BATCH 32, COMPRESS_ROUNDS 3)
BUILD=${1:-build}
RXE=${RXE_RUN:-../shared/tools/rxe/rxe-run}
if [ "${2:-}" = --inside ]; then
    # In the guest: the runs, one result line each on stdout.
    steps=${COMPRESS_STEPS:-5}
    r=1
    while [ $r -le "${COMPRESS_ROUNDS:-3}" ]; do
        for mode in ${COMPRESS_MODES:-none fp16}; do
            out=$(DDPRT_LOG=info DDPRT_VERBS_SPIN_US=0 "./$BUILD/ddprt-launch" --nproc-per-node 2 -- \
                "./$BUILD/ddprt-train" --model "${COMPRESS_MODEL:-resnet20}" --dataset synthetic --epochs 1 \
                --max-steps "$steps" --batch-size "${COMPRESS_BATCH:-32}" --threads 1 --no-eval --log-interval 1000 \
                --backend verbs --grad-compress "$mode" 2>&1)
            ep=$(echo "$out" | sed -n 's/.*Epoch 1 of 1 took \([0-9.]*\)s.*/\1/p' | head -1)
            sc=$(echo "$out" | sed -n 's/.*epoch 1: \([0-9.]*\) samples\/s.*communication wait \([0-9.]*\)s.*/\1 \2/p' | head -1)
            by=$(echo "$out" | sed -n 's/.*buckets, \([0-9]*\) bytes per rank.*/\1/p' | head -1)
            be=$(echo "$out" | grep -o "using verbs[^;]*\|backend verbs[^;]*\|rxe0[^;]*" | head -1)
            if [ -z "$ep" ] || [ -z "$sc" ] || [ -z "$by" ]; then
                echo "FAILED $mode: $(echo "$out" | tail -3 | tr '\n' ' ')" >&2
            else
                echo "RES $mode $ep $sc $by $(cut -d' ' -f1 /proc/loadavg)"
                [ -n "$be" ] && echo "# $be" >&2
            fi
        done
        r=$((r + 1))
    done
    exit 0
fi
[ -x "$RXE" ] || { echo "compress_verbs: no VM runner at $RXE"; exit 1; }
steps=${COMPRESS_STEPS:-5}
echo "host load before: $(uptime)"
res=$("$RXE" --timeout "${COMPRESS_VM_TIMEOUT:-1500}" -- env COMPRESS_STEPS="$steps" \
    COMPRESS_ROUNDS="${COMPRESS_ROUNDS:-3}" COMPRESS_MODEL="${COMPRESS_MODEL:-resnet20}" \
    COMPRESS_BATCH="${COMPRESS_BATCH:-32}" COMPRESS_MODES="${COMPRESS_MODES:-none fp16}" \
    sh bench/compress_verbs.sh "$BUILD" --inside)
rc=$?
echo "host load after: $(uptime)"
echo "$res" | grep -v '^RES' >&2
echo "| backend | --grad-compress | runs | time for $steps steps (s) | samples/s (2 ranks) | comm wait / step (ms) | bytes / step / rank | guest load |"
echo "|---|---|---|---|---|---|---|---|"
# samples/s from the run's own time: the trainer's log gives only 3 significant digits.
echo "$res" | grep '^RES' | sort -k2,2 -s | awk -v steps="$steps" -v batch="${COMPRESS_BATCH:-32}" '
function med(a, n,   i, j, t) {
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
function flush() {
    if (!n) return
    printf "| verbs (Soft-RoCE VM) | %s | %d | %.2f | %.3f | %.1f | %d | %s |\n", m, n, med(E, n), 2 * batch * steps / med(E, n), 1000 * med(C, n) / steps, by / steps, loads
    n = 0; loads = ""
}
{ if ($2 != last) { flush(); last = $2; m = $2 }
  n++; E[n] = $3; S[n] = $4; C[n] = $5; by = $6; loads = loads (loads == "" ? "" : " ") $7 }
END { flush() }'
exit $rc
