#!/usr/bin/env bash
# --amp bf16 against fp32 on issue 24's small GPT (6 layers, 384 wide, T 256, batch 8,
# 8 AdamW steps, 1 thread): the epoch's wall time and the process's CPU time (user+sys,
# less sensitive to a shared machine's load), medians of alternating rounds, for fp32,
# bf16 with the linear layers' default GEMMs (DDPRT_BF16_GEMM=auto), and each form
# forced (dpbf16: vdpbf16ps; fma: bf16-rounded operands through the fp32 GEMMs); with
# BEFORE=dir also that build's bf16. Then the vdpbf16ps and FMA peaks. Not part of make test.
#   bench/bf16_gpt.sh [ROUNDS]      (BUILD=build by default)
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
B=${BUILD:-build}
rounds=${1:-3}
scratch tmp
printf "[gpt]\nlayers=6\ndim=384\nheads=6\nctx=256\nvocab=256\n" >"$tmp/small.cfg"
report_head
run() { # name build amp form
    local out
    out=$( { DDPRT_BF16_GEMM=$4 /usr/bin/time -f "CPU %U %S" "$2/ddprt-train" --data synthetic \
        --model-file "$tmp/small.cfg" --seq-len 256 --batch-size 8 --optimizer adamw --lr 3e-4 --weight-decay 0.1 \
        --max-steps 8 --epochs 1 --threads 1 --no-eval --log-interval 1000 --sample-len 1 --amp "$3"; } 2>&1)
    echo "$out" | sed -n 's/.*Epoch 1 of 1 took \([0-9.]*\)s.*/\1/p' >>"$tmp/$1.w"
    echo "$out" | awk '$1 == "CPU" { print $2 + $3 }' >>"$tmp/$1.c"
}
cases=("fp32 $B none auto" "bf16 $B bf16 auto" "bf16-dpbf16 $B bf16 dpbf16" "bf16-fma $B bf16 fma")
[[ -n "${BEFORE:-}" ]] && cases+=("before-bf16 $BEFORE bf16 auto")
for _ in $(seq "$rounds"); do
    for c in "${cases[@]}"; do run $c; done
done
fw=$(med_file "$tmp/fp32.w")
printf "%-14s %10s %10s %12s\n" run "epoch s" "CPU s" "fp32 / this"
for c in "${cases[@]}"; do
    read -r n _ <<<"$c"
    w=$(med_file "$tmp/$n.w")
    printf "%-14s %10s %10s %12s\n" "$n" "$w" "$(med_file "$tmp/$n.c")" "$(ratio "$fw" "$w")"
done
load_line after
"$B/ddprt-bench-kernels" --model linear --iters 1 | sed -n 's/^ddprt kernels: /# /p; s/.*measured \([0-9.]*\) GFLOP\/s per thread.*/# vdpbf16ps peak \1 GFLOP\/s per thread/p'
