#!/usr/bin/env bash
# Per-kernel GPU times of one training step (Nsight Compute's ncu, one pass per kernel:
# gpu__time_duration), for finding where a model's step goes on the device. Needs a GPU
# and ncu (bench/gpu_device.sh's lent machine has both). Prints ncu's per-kernel summary
# sorted by total time.
#   bench/gpu_profile.sh MODEL [BATCH]     (MODEL: a zoo model or gpt; BUILD=build; PROF_CSV=file: keep ncu's CSV)
set -uo pipefail
cd "$(dirname "$0")/.."
B=${BUILD:-build}
m=$1 b=${2:-32}
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
args=(--model "$m")
if [[ $m == gpt ]]; then
  printf "[gpt]\nlayers=6\ndim=384\nheads=6\nctx=256\nvocab=256\n" >"$tmp/gpt.cfg"
  args=(--model-file "$tmp/gpt.cfg" --seq-len 256 --sample-len 1)
fi
"$ncu" --clock-control none --metrics gpu__time_duration.sum --csv --print-summary per-kernel \
  "$B/ddprt-train" --device cuda --data synthetic "${args[@]}" --batch-size "$b" --max-steps 1 --epochs 1 \
  --no-eval --log-interval 1000 >"$tmp/csv" 2>"$tmp/err"
rc=$?
[[ -n ${PROF_CSV:-} ]] && cp "$tmp/csv" "$PROF_CSV"
# the summary's CSV: one row per kernel name and metric; total = invocations x average
python3 - "$tmp/csv" <<'PY' || { tail -20 "$tmp/csv"; tail -5 "$tmp/err"; }
import csv, sys, re
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 5]
h = rows[0]; rows = rows[1:]
ix = {k: i for i, k in enumerate(h)}
name = next(k for k in h if "Kernel Name" in k or k == "Function Name")
inv = next(k for k in h if "Invocations" in k)
avg = next(k for k in h if k in ("Average", "Metric Value", "Avg"))
unit = next((k for k in h if "Unit" in k), None)
tot = []
for r in rows:
    try:
        v = float(r[ix[avg]].replace(",", ""))
    except ValueError:
        continue
    u = r[ix[unit]] if unit else "ns"
    f = {"ns": 1e-3, "nsecond": 1e-3, "usecond": 1, "us": 1, "msecond": 1e3, "ms": 1e3}.get(u, 1e-3)
    n = int(float(r[ix[inv]]))
    tot.append((n * v * f, n, v * f, re.sub(r"\(.*", "", r[ix[name]])[:90], r[ix[name]][:160]))
tot.sort(reverse=True)
s = sum(t[0] for t in tot)
print("# %s: %d kernels, %.1f us of GPU time in total" % (sys.argv[1], sum(t[1] for t in tot), s))
print("%10s %6s %10s %6s  %s" % ("total us", "calls", "avg us", "share", "kernel"))
for t in tot[:40]:
    print("%10.1f %6d %10.1f %5.1f%%  %s" % (t[0], t[1], t[2], 100 * t[0] / s, t[4]))
PY
exit $rc
