# Sourced by test/cluster.sh --compress: #11's compressed-gradient table across two
# namespace hosts (2 hosts x 1 rank over TCP), link unshaped and shaped, with and
# without --grad-compress fp16, alternating inside each round; medians over the rounds.
# Per run: resnet20 (COMPRESS_MODEL) for COMPRESS_STEPS steps of COMPRESS_BATCH per rank,
# 1 compute thread per rank, no evaluation. From rank 0's log: the epoch time (of those
# steps), samples/s, the gradient bytes per step per rank, and the communication wait
# (the part of the allreduces not hidden behind backward) per step.
# COMPRESS_MODES ("none fp16"), COMPRESS_ROUNDS (3), CLUSTER_RATES ("none 1gbit"),
# COMPRESS_DATA (Fashion-MNIST if installed, else synthetic).
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
GENV=(DDPRT_LOG=info)
CLUSTER_WAIT=${CLUSTER_WAIT:-600}
RES=$TMP/compress.txt
: >"$RES"
steps=${COMPRESS_STEPS:-20}
data=()
[ -e /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] || data=(--dataset synthetic)
[ -n "${COMPRESS_DATA:-}" ] && data=(--data "$COMPRESS_DATA")
for ((round = 1; round <= ${COMPRESS_ROUNDS:-3}; round++)); do
    for rate in ${CLUSTER_RATES:-none 1gbit}; do
        if [ "$rate" = none ]; then shape ""; else shape "$rate"; fi
        for mode in ${COMPRESS_MODES:-none fp16}; do
            load=$(load1)
            run_grid "compress $rate $mode" 2 1 tcp "$B/ddprt-train" --model "${COMPRESS_MODEL:-resnet20}" "${data[@]}" \
                --epochs 1 --max-steps "$steps" --batch-size "${COMPRESS_BATCH:-128}" --threads 1 --no-eval \
                --log-interval 1000 --backend tcp --grad-compress "$mode" >/dev/null
            ep=$(sed -n 's/^Epoch 1 of 1 took \([0-9.]*\)s/\1/p' "$TMP/r0.out")
            sps=$(sed -n 's/.*epoch 1: \([0-9.]*\) samples\/s.*communication wait \([0-9.]*\)s.*/\1 \2/p' "$TMP/r0.err")
            bytes=$(sed -n 's/.*buckets, \([0-9]*\) bytes per rank.*/\1/p' "$TMP/r0.err")
            if [ -z "$ep" ] || [ -z "$sps" ] || [ -z "$bytes" ]; then
                echo "round $round $rate $mode: failed: $(tail -2 "$TMP/r0.err" | tr '\n' ' ')" >&2
                continue
            fi
            set -- $sps
            echo "$rate $mode $ep $1 $2 $bytes $load" >>"$RES"
            [ -n "${CLUSTER_VERBOSE:-}" ] && echo "round $round: $rate $mode: $ep s, $1 samples/s, comm wait $2 s, $bytes B (load $load)" >&2
        done
    done
done
shape ""
echo "| link | --grad-compress | runs | time for $steps steps (s) | samples/s (2 ranks) | comm wait / step (ms) | bytes / step / rank | load (1-min) |"
echo "|---|---|---|---|---|---|---|---|"
sort -k1,2 -s "$RES" | awk -v steps="$steps" '
function med(a, n,   i, j, t) {
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
function flush() {
    if (!n) return
    printf "| %s | %s | %d | %.2f | %.1f | %.2f | %d | %s |\n", r, m, n, med(E, n), med(S, n), 1000 * med(C, n) / steps, by / steps, loads
    n = 0; loads = ""
}
{ k = $1" "$2; if (k != last) { flush(); last = k; r = $1; m = $2 }
  n++; E[n] = $3; S[n] = $4; C[n] = $5; by = $6; loads = loads (loads == "" ? "" : " ") $7 }
END { flush() }'
