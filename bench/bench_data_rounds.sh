#!/usr/bin/env bash
# Decode + transform throughput per thread (CPU time), ddprt vs Pillow + torchvision,
# measured alternately in one window: ROUNDS rounds of {noisy, smooth} x {train, eval} x
# {ddprt, ddprt with libjpeg's entropy decoder, Pillow}; prints the medians as a table
# with the load average at start and end (the machine may be shared).
# Usage: bench/bench_data_rounds.sh [ROUNDS] [N]; folders of 400 500x375 JPEGs are made
# by ddprt-data synth: noisy (--noise 24, ~80 KB) and smooth (--noise 4, ~30 KB).
. "$(dirname "$0")/lib.sh"
bench_deps
set -euo pipefail
B=${DDPRT_BUILD:-build}
R=${1:-5}
N=${2:-400}
NOISY=${NOISY:-/tmp/ddprt-bench-noisy}
SMOOTH=${SMOOTH:-/tmp/ddprt-bench-smooth}
[ -d "$NOISY/train" ] || "$B/ddprt-data" synth --to "$NOISY" --n 400 --noise 24 >/dev/null
[ -d "$SMOOTH/train" ] || "$B/ddprt-data" synth --to "$SMOOTH" --n 400 --noise 4 >/dev/null
raw=$(mktemp)
up0=$(uptime | sed 's/.*load average: //')
for r in $(seq "$R"); do
  for set in noisy smooth; do
    dir=$NOISY; [ $set = smooth ] && dir=$SMOOTH
    for mode in train eval; do
      flag=; [ $mode = eval ] && flag=--eval
      v=$("$B/ddprt-data" bench "$dir" --n "$N" $flag | cut -d'|' -f7); echo "$set $mode ddprt $v" >>"$raw"
      v=$("$B/ddprt-data" bench "$dir" --n "$N" $flag --libjpeg-huffman | cut -d'|' -f7); echo "$set $mode libjpeg-huffman $v" >>"$raw"
      v=$(/usr/bin/python3 bench/bench_data_pil.py "$dir" "$N" $mode | cut -d'|' -f7); echo "$set $mode pillow $v" >>"$raw"
    done
  done
done
up1=$(uptime | sed 's/.*load average: //')
echo "load average (1, 5, 15 min) at start: $up0; at end: $up1; $R rounds, $N images each, 224x224 output"
echo
echo "| JPEGs (400, 500x375) | recipe | ddprt img/s | ddprt, libjpeg's entropy decoder | Pillow+torchvision | ratio ddprt / Pillow | all $R ratios |"
echo "|---|---|---|---|---|---|---|"
/usr/bin/python3 - "$raw" <<'PY'
import sys, statistics as st, collections
d = collections.defaultdict(list)
for l in open(sys.argv[1]):
    s, m, k, v = l.split(); d[(s, m, k)].append(float(v))
for s in ("noisy", "smooth"):
    for m in ("train", "eval"):
        a, h, p = (st.median(d[(s, m, k)]) for k in ("ddprt", "libjpeg-huffman", "pillow"))
        rs = " ".join("%.2f" % (x / y) for x, y in zip(d[(s, m, "ddprt")], d[(s, m, "pillow")]))
        print("| %s | %s | %.1f | %.1f | %.1f | **%.2fx** | %s |" % (s, "RandomResizedCrop+flip+Normalize" if m == "train" else "Resize 256+CenterCrop 224+Normalize", a, h, p, a / p, rs))
PY
rm -f "$raw"
