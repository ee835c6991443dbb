# Sourced by test/cluster.sh --rounds: the same allreduce as --bench, repeated ROUNDS
# times with the variants alternating inside each round (A, B, A, B ...: on a shared
# machine the load drifts, so ratios are only fair when taken in one window), then
# the median, min and max per (grid, link, variant), with the load average of each round.
# CLUSTER_VARIANTS: "ring hier" (default); a variant "NAME=ALGO:PROGRAM" runs another
# ddprt-bench build (e.g. "old=hier:/tmp/old-bench"). CLUSTER_ROUNDS (5),
# CLUSTER_GRIDS ("2x1 2x2"), CLUSTER_RATES, CLUSTER_SIZES ("64M"), CLUSTER_ITERS (3).
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
RES=$TMP/rounds.txt
: >"$RES"
for ((round = 1; round <= ${CLUSTER_ROUNDS:-5}; round++)); do
    for rate in ${CLUSTER_RATES:-none 1gbit}; do
        if [ "$rate" = none ]; then shape ""; else shape "$rate"; fi
        for grid in ${CLUSTER_GRIDS:-2x1 2x2}; do
            for size in ${CLUSTER_SIZES:-64M}; do
                for v in ${CLUSTER_VARIANTS:-ring hier}; do
                    name=${v%%=*} spec=${v#*=} prog=$B/ddprt-bench
                    algo=${spec%%:*}
                    [ "$spec" != "$algo" ] && prog=${spec#*:}
                    load=$(cut -d' ' -f1 /proc/loadavg)
                    run_grid "rounds $grid $rate $v $size" 2 "${grid#2x}" tcp "$prog" allreduce -b "$size" -e "$size" \
                        -n "${CLUSTER_ITERS:-3}" -w 1 -c 0 --algo "$algo" ${CLUSTER_BENCH_ARGS:-} >/dev/null
                    row=$(grep -E '^ +[0-9]+ +[0-9]+ ' "$TMP/r0.out" | tail -1)
                    [ -z "$row" ] && { echo "round $round $grid $rate $name $size: failed: $(tail -1 "$TMP/r0.err")" >&2; continue; }
                    set -- $row
                    echo "$grid $rate $name $1 $6 $8 $load" >>"$RES"
                    [ -n "${CLUSTER_VERBOSE:-}" ] && echo "round $round: $grid $rate $name $1: $6 us (load $load)" >&2
                done
            done
        done
    done
done
shape ""
echo "| grid | link | variant | size | rounds | median time (ms) | min-max (ms) | median busbw (GB/s) | time / (S/R) | load (1-min) |"
echo "|---|---|---|---|---|---|---|---|---|---|"
awk '{k=$1" "$2" "$3" "$4; print k, $5, $6, $7}' "$RES" | sort -k1,4 -s | awk -v rates="$(for r in ${CLUSTER_RATES:-none 1gbit}; do echo "$r=$(rate_bps "$r")"; done | tr '\n' ' ')" '
function flush(   i, j, t, n2, med, bw, R, ratio, lo, hi) {
    if (!n) return
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (t_[j] < t_[i]) { t = t_[i]; t_[i] = t_[j]; t_[j] = t; t = b_[i]; b_[i] = b_[j]; b_[j] = t }
    med = n % 2 ? t_[(n + 1) / 2] : (t_[n / 2] + t_[n / 2 + 1]) / 2
    bw = n % 2 ? b_[(n + 1) / 2] : (b_[n / 2] + b_[n / 2 + 1]) / 2
    R = rate[lk]; ratio = R > 0 ? sprintf("%.2f", med * 1e-6 / (sz / R)) : "-"
    printf "| %s | %s | %s | %s | %d | %.1f | %.1f-%.1f | %.3f | %s | %s |\n", g, lk, v, sz, n, med / 1000, t_[1] / 1000, t_[n] / 1000, bw, ratio, loads
    n = 0; loads = ""
}
BEGIN { m = split(rates, a, " "); for (i = 1; i <= m; i++) { split(a[i], kv, "="); rate[kv[1]] = kv[2] } }
{ key = $1" "$2" "$3" "$4; if (key != last) { flush(); last = key; g = $1; lk = $2; v = $3; sz = $4 }
  n++; t_[n] = $5; b_[n] = $6; loads = loads (loads == "" ? "" : " ") $7 }
END { flush() }'
