#!/usr/bin/env bash
# Training throughput and peak RSS of the zoo models, ddprt vs PyTorch 1.13 (Debian's
# python3-torch, OpenBLAS), 1 thread each, synthetic data of the model's shape,
# alternating runs; prints a table of medians. Not part of make test.
#   bench/bench_models.sh [ROUNDS]     (BUILD=build by default; MODELS="textcnn lenet" for a subset)
set -euo pipefail
cd "$(dirname "$0")/.."
B=${BUILD:-build}
rounds=${1:-3}
# model batch steps(ddprt) steps(pytorch)
cases=("lenet 64 400 200" "resnet20 128 12 6" "textcnn 64 150 60" "resnet18 32 4 3")
. bench/lib.sh
bench_deps
# DDPRT_ISA=avx2 on a CPU with more: PyTorch on the same level (ATen's kernels and
# OpenBLAS's Haswell kernels, oneDNN's convolutions), so both sides run as on an AVX2 machine.
if [[ ${DDPRT_ISA:-} == avx2 ]]; then export ATEN_CPU_CAPABILITY=avx2 OPENBLAS_CORETYPE=Haswell ONEDNN_MAX_CPU_ISA=AVX2 DNNL_MAX_CPU_ISA=AVX2; fi
report_head
printf "%-10s %6s %14s %14s %8s %12s %12s %8s %12s\n" model batch "ddprt smp/s" "torch smp/s" ratio "ddprt MiB" "torch MiB" \
  "RSS x" "ddprt all"
run_d() { "$B/ddprt-train" --data synthetic --model "$1" --batch-size "$2" --max-steps "$3" --epochs 1 \
          --threads 1 --no-eval --mem-report --log-interval 1000 --lr 0.01 --momentum 0.9 2>&1; }
took() { sed -n 's/.*Epoch 1 of 1 took \([0-9.]*\)s.*/\1/p'; }
for c in "${cases[@]}"; do
  read -r m b sd sp <<<"$c"
  [[ -z "${MODELS:-}" || " $MODELS " == *" $m "* ]] || continue
  : >/tmp/bm.d; : >/tmp/bm.p; : >/tmp/bm.dr; : >/tmp/bm.pr; : >/tmp/bm.da
  for _ in $(seq "$rounds"); do
    # steady samples/s, as PyTorch's are taken (after 2 untimed steps): a run of sd + 2
    # steps less one of 2 (both with the start-up and the arena's first touch)
    out=$(run_d "$m" "$b" $((sd + 2)))
    t2=$(run_d "$m" "$b" 2 | took)
    tl=$(echo "$out" | took)
    awk -v n="$((sd * b))" -v a="$tl" -v c="$t2" 'BEGIN { print n / (a - c) }' >>/tmp/bm.d
    echo "$out" | sed -n 's/.*epoch 1: \([0-9.]*\) samples\/s.*/\1/p' >>/tmp/bm.da
    echo "$out" | sed -n 's/.*peak RSS \([0-9.]*\) MiB.*/\1/p' >>/tmp/bm.dr
    read -r _ sps rss < <(/usr/bin/python3 bench/ref_models.py "$m" "$b" "$sp")
    echo "$sps" >>/tmp/bm.p; echo "$rss" >>/tmp/bm.pr
  done
  d=$(med </tmp/bm.d); p=$(med </tmp/bm.p); dr=$(med </tmp/bm.dr); pr=$(med </tmp/bm.pr); da=$(med </tmp/bm.da)
  printf "%-10s %6s %14.1f %14.1f %7.2fx %12.0f %12.0f %7.2fx %12.1f\n" "$m" "$b" "$d" "$p" \
    "$(echo "$d / $p" | bc -l)" "$dr" "$pr" "$(echo "$dr / $pr" | bc -l)" "$da"
done
echo "# samples/s after 2 untimed steps on both sides (ddprt: a run of steps + 2 less one of 2); ddprt all:"
echo "# its whole epoch line (warm-up steps and the arena's first touch included)"
load_line after
