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
cpu_line
load_line before
printf "%-10s %6s %14s %14s %8s %12s %12s %8s\n" model batch "ddprt smp/s" "torch smp/s" ratio "ddprt MiB" "torch MiB" "RSS x"
for c in "${cases[@]}"; do
  read -r m b sd sp <<<"$c"
  [[ -z "${MODELS:-}" || " $MODELS " == *" $m "* ]] || continue
  : >/tmp/bm.d; : >/tmp/bm.p; : >/tmp/bm.dr; : >/tmp/bm.pr
  for _ in $(seq "$rounds"); do
    out=$("$B/ddprt-train" --data synthetic --model "$m" --batch-size "$b" --max-steps $((sd + 2)) --epochs 1 \
          --threads 1 --no-eval --mem-report --log-interval 1 --lr 0.01 --momentum 0.9 2>&1)
    echo "$out" | sed -n 's/.*epoch 1: \([0-9.]*\) samples\/s.*/\1/p' >>/tmp/bm.d
    echo "$out" | sed -n 's/.*peak RSS \([0-9.]*\) MiB.*/\1/p' >>/tmp/bm.dr
    read -r _ sps rss < <(/usr/bin/python3 bench/ref_models.py "$m" "$b" "$sp")
    echo "$sps" >>/tmp/bm.p; echo "$rss" >>/tmp/bm.pr
  done
  d=$(med </tmp/bm.d); p=$(med </tmp/bm.p); dr=$(med </tmp/bm.dr); pr=$(med </tmp/bm.pr)
  printf "%-10s %6s %14.1f %14.1f %7.2fx %12.0f %12.0f %7.2fx\n" "$m" "$b" "$d" "$p" \
    "$(echo "$d / $p" | bc -l)" "$dr" "$pr" "$(echo "$dr / $pr" | bc -l)"
done
load_line after
