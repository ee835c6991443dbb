#!/usr/bin/env bash
# Per-op cost of the stall watch + flight recorder (transport/tp_watch.c, tp_trace.c):
# ddprt-bench allreduce, 2 ranks on this host, small sizes, DDPRT_STALL_WATCH=1 (default)
# and 0 alternating round by round; prints the median time per size of each and the
# difference. Not part of make test (a measurement; noisy on a shared machine: the load
# average is printed with the table).
#   bench/bench_watch.sh [BUILD] [ROUNDS] [ITERS]
. "$(dirname "$0")/lib.sh"
set -eu
B=${1:-build}
ROUNDS=${2:-9}
ITERS=${3:-2000}
T=$(mktemp -d /tmp/ddprt-bench-watch.XXXXXX)
trap 'rm -rf "$T"' EXIT
for ((r = 0; r < ROUNDS; r++)); do
    for w in 1 0; do
        DDPRT_STALL_WATCH=$w "$B/ddprt-launch" --nproc-per-node 2 -- "$B/ddprt-bench" allreduce -b 4 -e 64K -f 4 \
            -n "$ITERS" -w 200 -c 0 2>&1 | awk -v w=$w '$1 == "[rank" && $3 ~ /^[0-9]+$/ && $2 == "0]" {print w, $3, $8}' \
            >>"$T/all"
    done
done
echo "# allreduce float sum, 2 ranks (unix sockets), $ITERS iters/size, $ROUNDS alternating rounds, medians (us)"
echo "# $(uptime | sed 's/.*load/load/')"
printf '%10s %12s %12s %10s %8s\n' size watch_on_us watch_off_us diff_us ratio
awk '{v[$1 " " $2] = v[$1 " " $2] " " $3; s[$2] = 1}
     function med(str,   a, n, i, j, t) { n = split(str, a, " ");
         for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
         return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
     END { for (z in s) { on = med(v["1 " z]); off = med(v["0 " z]);
           printf "%10d %12.2f %12.2f %10.2f %8.3f\n", z, on, off, on - off, on / off } }' "$T/all" | sort -n
