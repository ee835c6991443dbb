# Sourced by test/cluster.sh --calib: calibrates ddprt-bench's cost model on the
# namespace cluster. With every host's link shaped to CALIB_RATE (1gbit):
#   1x2 ring (one host, unix sockets)  -> fit of the in-host link (a_i, b_i)
#   2x1 ring (TCP across the link)     -> fit of the host link (a_e, b_e)
#   2x2 ring and 2x2 hier              -> predicted (from those two fits) vs measured
# CALIB_RUNS runs per grid (median per size), sizes 4K..64M x4, 200 iterations per size
# capped at 256 MiB per size: tbf lets a burst (512 KB) through at the veth's speed, so
# a size must be repeated well past the burst to see the shaped rate.
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
R=${CALIB_RATE:-1gbit}
CLUSTER_WAIT=${CLUSTER_WAIT:-300}
shape "$R"
OUTD=${CALIB_OUT:-$TMP}
mkdir -p "$OUTD"
ARGS=(allreduce -b 4K -e 64M -f 4 -n "${CALIB_ITERS:-200}" -w 3 -c 0 --byte-budget 256M)
for ((run = 1; run <= ${CALIB_RUNS:-3}; run++)); do
    for spec in "1x2 ring" "2x1 ring" "2x2 ring" "2x2 hier"; do
        set -- $spec
        grid=$1 algo=$2 nh=${1%x*} per=${1#*x}
        [ $run = 1 ] && : >"$OUTD/$grid-$algo.txt"
        echo "# run $run, load $(load1)" >>"$OUTD/$grid-$algo.txt"
        run_grid "calib $grid $algo" "$nh" "$per" tcp "$B/ddprt-bench" "${ARGS[@]}" --algo "$algo" >/dev/null
        cat "$TMP/r0.out" >>"$OUTD/$grid-$algo.txt"
    done
done
shape ""
fit() { "$B/ddprt-bench" --fit "$1" --world-size 2 --algo ring -b "${CALIB_FIT_MIN:-64K}"; }
echo "## link $R: in-host fit (1x2 ring, sizes >= ${CALIB_FIT_MIN:-64K})"
fit "$OUTD/1x2-ring.txt"
echo "## host-link fit (2x1 ring)"
fit "$OUTD/2x1-ring.txt"
ab() { fit "$1" | sed -n 's/.*alpha \([0-9.]*\) us, beta \([0-9.]*\) GB\/s/\1 \2/p'; }
set -- $(ab "$OUTD/1x2-ring.txt") $(ab "$OUTD/2x1-ring.txt")
LINKS=(--intra-alpha-us "$1" --intra-gbs "$2" --alpha-us "$3" --beta-gbs "$4")
for algo in ring hier; do
    echo "## 2x2 $algo: predicted from the two fits vs measured"
    "$B/ddprt-bench" --predict --world-size 4 --per-node 2 --algo $algo "${LINKS[@]}" --measured "$OUTD/2x2-$algo.txt" -b "${CALIB_FIT_MIN:-64K}"
done
