#!/usr/bin/env bash
# Issue #10 "Must show": ddprt --model textcnn vs a PyTorch TextCNN (bench/ref_textcnn.py) on
# the same text folder (bench/make_text_set.py: Debian package descriptions -> Section), same
# vocabulary (ddprt's saved CKPT.vocab), tokens, architecture, SGD and epochs, 1 thread each.
# Prints per framework and epoch: wall s, CPU s (user+sys of the whole ddprt process incl.
# start-up and evaluation / PyTorch's training loop only), samples/s, test accuracy.
#   bench/issue10_textcnn.sh DIR [EPOCHS] [SEQ_LEN] [LR]   (defaults 5 128 0.01; batch 64, momentum 0.9)
. "$(dirname "$0")/lib.sh"
set -euo pipefail
cd "$(dirname "$0")/.."
B=${BUILD:-build}
LOGDIR=${LOGDIR:-/tmp/measure}
D=$1; E=${2:-5}; L=${3:-128}; LR=${4:-0.01}
mkdir -p "$LOGDIR"
ck=$LOGDIR/textcnn.safetensors
l0=$(load1)
/usr/bin/time -f "cpu %U %S" -o "$LOGDIR/textcnn_ddprt.time" "$B/ddprt-train" --data "$D" --model textcnn \
  --seq-len "$L" --epochs "$E" --batch-size 64 --lr "$LR" --momentum 0.9 --seed 1 --threads 1 --workers 1 \
  --log-interval 1000 --save "$ck" >"$LOGDIR/textcnn_ddprt.log" 2>&1
l1=$(load1)
echo "ddprt (load $l0 / $l1): $(cat "$LOGDIR/textcnn_ddprt.time") for the whole process"
paste -d' ' <(sed -n 's/^Epoch \([0-9]*\) of [0-9]* took \([0-9.]*\)s/\1 \2/p' "$LOGDIR/textcnn_ddprt.log") \
            <(sed -n 's/.*epoch [0-9]*: \([0-9]*\) samples\/s.*/\1/p' "$LOGDIR/textcnn_ddprt.log") \
            <(sed -n 's/.*Accuracy: \([0-9]*\/[0-9]*\).*/\1/p' "$LOGDIR/textcnn_ddprt.log") |
  awk '{split($4, a, "/"); printf "  epoch %s: %s s wall, %s samples/s, test accuracy %s (%.2f%%)\n", $1, $2, $3, $4, 100 * a[1] / a[2]}'
l0=$(load1)
/usr/bin/python3 bench/ref_textcnn.py "$D" --vocab "$ck.vocab" --epochs "$E" --seq-len "$L" --lr "$LR" \
  --momentum 0.9 --batch 64 --seed 1 --threads 1 >"$LOGDIR/textcnn_torch.log" 2>&1
l1=$(load1)
echo "PyTorch (load $l0 / $l1):"; sed 's/^/  /' "$LOGDIR/textcnn_torch.log"
