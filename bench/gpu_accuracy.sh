#!/usr/bin/env bash
# Issue 39's accuracy row: ResNet-20 trained EPOCHS epochs on Fashion-MNIST at fp32, --amp bf16 and
# --amp fp16 on the GPU, the three at once (one small model leaves an H100 mostly idle), each run's
# final test accuracy and its distance from fp32's (the goal: within 0.5 point). Logs into $OUT.
#   BUILD=.gpu/new DATA=.gpu/data bash bench/gpu_accuracy.sh
#   (EPOCHS=10, DEVICE=cuda, ARGS="--batch-size 128 --lr 0.05 --momentum 0.9", MAX_STEPS=N for a dry run)
set -u
cd "$(dirname "$0")/.."
B=${BUILD:-build} D=${DATA:-/usr/share/datasets/fashion-mnist} E=${EPOCHS:-10} O=${OUT:-/tmp/gpu-out}
mkdir -p "$O"
args=(--model resnet20 --device "${DEVICE:-cuda}" --data "$D" --epochs "$E" --log-interval 100000)
read -r -a extra <<<"${ARGS:---batch-size 128 --lr 0.05 --momentum 0.9}"
[[ -n ${MAX_STEPS:-} ]] && extra+=(--max-steps "$MAX_STEPS")
for p in none bf16 fp16; do
  "$B/ddprt-train" "${args[@]}" "${extra[@]}" --amp "$p" >"$O/acc-$p.log" 2>&1 &
done
wait
# "Test set: Average loss: L, Accuracy: C/N (P%)": the last one of each run, in points
acc() { sed -n 's/.*Accuracy: \([0-9]*\)\/\([0-9]*\).*/\1 \2/p' "$O/acc-$1.log" | tail -n 1 | awk '{ if ($2) printf "%.2f", 100 * $1 / $2 }'; }
f=$(acc none)
echo "ResNet-20, Fashion-MNIST, $E epochs, ${DEVICE:-cuda} ($(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1))"
echo "| precision | test accuracy (%) | minus fp32 (points) | within 0.5 |"
echo "|---|---|---|---|"
rc=0
for p in none bf16 fp16; do
  a=$(acc "$p")
  if [[ -z $a || -z $f ]]; then echo "| $p | (no result: $O/acc-$p.log) | | no |"; rc=1; continue; fi
  d=$(awk -v a="$a" -v f="$f" 'BEGIN { printf "%+.2f", a - f }')
  ok=$(awk -v d="$d" 'BEGIN { print (d <= 0.5 && d >= -0.5) ? "yes" : "no" }')
  [[ $ok == yes ]] || rc=1
  echo "| ${p/none/fp32} | $a | $d | $ok |"
done
exit $rc
