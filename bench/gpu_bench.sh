#!/usr/bin/env bash
# Training throughput on one CUDA GPU, ddprt --device cuda (hand-written kernels, no
# cuBLAS/cuDNN) vs PyTorch (bench/ref_gpu.py: cuBLAS/cuDNN, fp32, TF32 off), synthetic data
# of the model's shape, SGD with momentum (OPT=adamw: AdamW, weight decay 0.1, on both
# sides), alternating runs, medians. Not part of make test; needs a GPU
# (bench/gpu_device.sh runs it on a lent one).
#   bench/gpu_bench.sh [ROUNDS]     (BUILD=build; MODELS="lenet gpt" for a subset, "resnet18:128" a
#                                    model at another batch, gpt2: GPT-2 124M at T 1024; PY=python3;
#                                    BEFORE=dir: a second ddprt-train's rate in a column of its own;
#                                    PREC=bf16|fp16|tf32: --amp bf16 / fp16 or --matmul-precision high
#                                    against PyTorch's autocast (channels_last) or allow_tf32)
set -uo pipefail
cd "$(dirname "$0")/.."
B=${BUILD:-build}
rounds=${1:-2}
py=${PY:-python3}
. bench/lib.sh
scratch tmp
printf "[gpt]\nlayers=6\ndim=384\nheads=6\nctx=256\nvocab=256\n" >"$tmp/gpt.cfg"
printf "[gpt]\nlayers=12\ndim=768\nheads=12\nctx=1024\nvocab=50257\n" >"$tmp/gpt2.cfg"
# model batch steps(ddprt) steps(pytorch); gpt: 6x384, T 256, gpt2: 124M, T 1024, rates in tokens/s
cases=("lenet 64 200 200" "resnet20 128 30 50" "textcnn 64 100 100" "resnet18 32 15 20" "gpt 8 20 20" "gpt2 8 8 10")
echo "# gpu: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1); precision ${PREC:-fp32}"
precf=()
case ${PREC:-fp32} in bf16|fp16) precf=(--amp "$PREC");; tf32) precf=(--matmul-precision high);; esac
export PREC=${PREC:-fp32}
printf "%-9s %6s %14s %14s %8s %10s %12s\n" model batch "ddprt /s" "torch /s" ratio "ddprt all" "before /s"
run_d() {
  local T=${TRAIN:-$B/ddprt-train}
  local m=(--model "$1")
  [[ $1 == gpt ]] && m=(--model-file "$tmp/gpt.cfg" --seq-len 256 --sample-len 1)
  [[ $1 == gpt2 ]] && m=(--model-file "$tmp/gpt2.cfg" --seq-len 1024 --sample-len 1)
  timeout 120 "$T" --device cuda --data synthetic "${m[@]}" --batch-size "$2" --max-steps "$3" \
    --epochs 1 --no-eval --log-interval 1000 "${optf[@]}" ${precf[@]+"${precf[@]}"} 2>&1
}
optf=(--lr 0.01 --momentum 0.9)
[[ ${OPT:-sgd} == adamw ]] && optf=(--optimizer adamw --lr 3e-4 --weight-decay 0.1)
export OPT=${OPT:-sgd}
took() { sed -n 's/.*Epoch 1 of 1 took \([0-9.]*\)s.*/\1/p'; }
for c in "${cases[@]}"; do
  read -r m b sd sp <<<"$c"
  if [[ " ${MODELS:-} " =~ \ $m:([0-9]+)\  ]]; then b=${BASH_REMATCH[1]}  # another batch
  else [[ -z "${MODELS:-}" || " $MODELS " == *" $m "* ]] || continue; fi
  : >"$tmp/d"; : >"$tmp/p"; : >"$tmp/da"; : >"$tmp/o"
  per=$b; [[ $m == gpt ]] && per=$((b * 256)); [[ $m == gpt2 ]] && per=$((b * 1024))
  for _ in $(seq "$rounds"); do
    # steady rate: a run of sd + 2 steps less one of 2 (start-up and first touch in both)
    out=$(run_d "$m" "$b" $((sd + 2)))
    t2=$(run_d "$m" "$b" 2 | took)
    tl=$(echo "$out" | took)
    if [[ -n $tl && -n $t2 ]]; then
      awk -v n="$((sd * per))" -v a="$tl" -v c="$t2" 'BEGIN { if (a > c) print n / (a - c) }' >>"$tmp/d"
      echo "$out" | sed -n 's/.*epoch 1: \([0-9.]*\) samples\/s.*/\1/p' >>"$tmp/da"
    else
      echo "$out" | tail -3 | sed "s/^/# $m ddprt: /"
    fi
    if [[ -n ${BEFORE:-} ]]; then
      tl=$(TRAIN=$BEFORE/ddprt-train run_d "$m" "$b" $((sd + 2)) | took)
      t2=$(TRAIN=$BEFORE/ddprt-train run_d "$m" "$b" 2 | took)
      [[ -n $tl && -n $t2 ]] && awk -v n="$((sd * per))" -v a="$tl" -v c="$t2" 'BEGIN { if (a > c) print n / (a - c) }' >>"$tmp/o"
    fi
    r=$(timeout 120 "$py" bench/ref_gpu.py "$m" "$b" "$sp" 2>"$tmp/pe") && echo "$r" | awk '{ print $2 }' >>"$tmp/p" ||
      tail -2 "$tmp/pe" | sed "s/^/# $m torch: /"
  done
  d=$(med <"$tmp/d"); p=$(med <"$tmp/p"); da=$(med <"$tmp/da"); o=$(med <"$tmp/o")
  printf "%-9s %6s %14s %14s %8s %10s %12s\n" "$m" "$b" "$d" "$p" "$(ratio "$d" "$p")" "$da" "$o"
done
echo "# rates after 2 untimed steps on both sides (ddprt: a run of steps + 2 less one of 2); gpt in tokens/s"
echo "# (6x384, 6 heads, vocab 256, T 256; gpt2: GPT-2 124M, 12x768, vocab 50257, T 1024), the rest samples/s;"
echo "# ddprt all: its epoch line, start-up included"
