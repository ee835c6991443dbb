# Sourced by test/cluster.sh --bench: allreduce across the namespace hosts, 2x1 and 2x2,
# link unshaped and shaped (tbf), per algorithm. One markdown table on stdout.
# CLUSTER_ALGOS (default "ring hier"), CLUSTER_RATES (default "none 1gbit"),
# CLUSTER_SIZES (default "1M 16M 64M"), CLUSTER_ITERS (default 5).
# "vs S/R": time / (bytes / link rate), the lower bound a flat ring cannot reach
# across 2 hosts (it moves 2(W-1)/W S over each host's link; 1.5 S for 2x2).
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
echo "| grid | link | algo | size | time (us) | algbw (GB/s) | busbw (GB/s) | time / (S/R) |"
echo "|---|---|---|---|---|---|---|---|"
for rate in ${CLUSTER_RATES:-none 1gbit}; do
    if [ "$rate" = none ]; then shape ""; else shape "$rate"; fi
    R=$(rate_bps "$rate")
    for grid in 2x1 2x2; do
        per=${grid#2x}
        for algo in ${CLUSTER_ALGOS:-ring hier}; do
            for size in ${CLUSTER_SIZES:-1M 16M 64M}; do
                run_grid "bench $grid $rate $algo $size" 2 "$per" tcp "$B/ddprt-bench" allreduce -b "$size" -e "$size" \
                    -n "${CLUSTER_ITERS:-5}" -w 1 -c 0 --algo "$algo" ${CLUSTER_BENCH_ARGS:-} >/dev/null
                row=$(grep -E '^ +[0-9]+ +[0-9]+ ' "$TMP/r0.out" | tail -1)
                [ -z "$row" ] && { echo "| $grid | $rate | $algo | $size | failed: $(tail -1 "$TMP/r0.err") | | | |"; continue; }
                set -- $row
                ratio=-
                [ "$R" != 0 ] && ratio=$(awk "BEGIN{printf \"%.2f\", $6 * 1e-6 / ($1 / $R)}")
                echo "| $grid | $rate | $algo | $1 | $6 | $7 | $8 | $ratio |"
            done
        done
    done
done
shape ""
