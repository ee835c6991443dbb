#!/usr/bin/env bash
# Issue #10 "Must show": resnet18, 1 rank, 1 compute thread + 1 loader worker, batch 32,
# 224x224: data wait as a fraction of the epoch time, from a JPEG folder (ddprt-data synth,
# 500x375) and from --data synthetic. A CPU epoch of ImageNet size is far too long, so:
#   jpeg   a folder of exactly STEPS*32 JPEGs: the whole epoch is STEPS steps (no cut)
#   jpegcut / synthetic   a larger set cut by --max-steps STEPS
# For every run two figures: the trainer's own "time split" line (covers the whole epoch
# pass, which after --max-steps still drains the loader through the rest of the epoch) and
# the --metrics row at step STEPS (time and data wait up to the last step, before the drain).
#   bench/issue10_resnet18.sh [STEPS] [CASES...]   (default 20; jpeg synthetic jpegcut)
. "$(dirname "$0")/lib.sh"
set -euo pipefail
cd "$(dirname "$0")/.."
B=${BUILD:-build}
LOGDIR=${LOGDIR:-/tmp/measure}
S=${1:-20}; shift || true
CASES=${*:-jpeg synthetic jpegcut}
N=$((S * 32)); BIG=$((N + 160))
mkdir -p "$LOGDIR"
J=$LOGDIR/jpeg$BIG; JN=$LOGDIR/jpeg$N
[ -d "$J/train" ] || "$B/ddprt-data" synth --to "$J" --n "$BIG" --classes 4 >/dev/null
if [ ! -d "$JN/train" ]; then  # the first N/4 files of each class, hard-linked
  for c in "$J"/train/*; do
    mkdir -p "$JN/train/${c##*/}"
    ls "$c" | sort | head -n $((N / 4)) | while read -r f; do ln "$c/$f" "$JN/train/${c##*/}/$f"; done
  done
fi
# The trainer wants a val/ split even with --no-eval: a few hard links per class.
for d in "$J" "$JN"; do
  [ -d "$d/val" ] || for c in "$d"/train/*; do
    mkdir -p "$d/val/${c##*/}"; ls "$c" | sort | head -n 4 | while read -r f; do ln "$c/$f" "$d/val/${c##*/}/$f"; done
  done
done
common=(--model resnet18 --batch-size 32 --image-size 224 --epochs 1 --threads 1 --workers 1 --no-eval
        --max-steps "$S" --log-interval 1 --lr 0.01 --momentum 0.9)
echo "| input | files | steps run | trainer: epoch s / data wait s / % | up to step $S: s / data wait s / % | load avg start / end |"
echo "|---|---|---|---|---|---|"
for c in $CASES; do
  case $c in
    jpeg) args=(--data "$JN"); files=$N ;;
    jpegcut) args=(--data "$J"); files=$BIG ;;
    synthetic) args=(--data synthetic); files=60000 ;;
  esac
  log=$LOGDIR/resnet18_$c.log; csv=$LOGDIR/resnet18_$c.csv
  l0=$(load1)
  "$B/ddprt-train" "${args[@]}" "${common[@]}" --metrics "$csv" >"$log" 2>&1
  l1=$(load1)
  ep=$(sed -n 's/^Epoch 1 of 1 took \([0-9.]*\)s.*/\1/p' "$log")
  dw=$(sed -n 's/.*data wait \([0-9.]*\)s.*/\1/p' "$log")
  # metrics: kind,step,epoch,loss,accuracy,samples_per_s,compute_s,comm_s,data_s
  read -r st el dd < <(awk -F, -v s="$S" '$1=="train" && $2==s {print $2, $7+$8+$9, $9}' "$csv")
  printf "| %s | %s | %s | %.1f / %.2f / %.1f %% | %.1f / %.2f / %.2f %% | %s / %s |\n" "$c" "$files" "$st" \
    "$ep" "$dw" "$(echo "100 * $dw / $ep" | bc -l)" "$el" "$dd" "$(echo "100 * $dd / $el" | bc -l)" "$l0" "$l1"
done
