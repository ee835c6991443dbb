#!/usr/bin/env bash
# Issue 27's LeNet goal: one training epoch of seed 001's LeNet on Fashion-MNIST (60,000
# images, batch 64, SGD lr 0.01 momentum 0.5), 1 thread, ddprt-train against the seed's
# PyTorch script (python/examples/mnist_gloo.py as one rank), alternating rounds, medians of
# each side's "Epoch 1 of 1 took" line (the training loop only, evaluation excluded on
# both; both read $DDPRT_DATA or /usr/share/datasets/fashion-mnist). DDPRT_ISA=avx2 on a
# CPU with more pins PyTorch to AVX2 as well (as bench_models.sh does).
#   bench/lenet_epoch.sh [ROUNDS]      (BUILD=build by default)
set -euo pipefail
cd "$(dirname "$0")/.."
B=${BUILD:-build}
rounds=${1:-3}
. bench/lib.sh
bench_deps
if [[ ${DDPRT_ISA:-} == avx2 ]]; then export ATEN_CPU_CAPABILITY=avx2 OPENBLAS_CORETYPE=Haswell ONEDNN_MAX_CPU_ISA=AVX2 DNNL_MAX_CPU_ISA=AVX2; fi
export OPENBLAS_NUM_THREADS=1
scratch tmp
report_head
for r in $(seq "$rounds"); do
  "$B/ddprt-train" --epochs 1 --threads 1 --seed "$r" >"$tmp/d.log" 2>&1
  sed -n 's/.*Epoch 1 of 1 took \([0-9.]*\)s.*/\1/p' "$tmp/d.log" >>"$tmp/d"
  port=$((20000 + RANDOM % 20000))
  /usr/bin/python3 python/examples/mnist_gloo.py --tcp "tcp://127.0.0.1:$port" --rank 0 --world-size 1 --epochs 1 \
    --seed "$r" --log-interval 100000 >"$tmp/p.log" 2>&1
  sed -n 's/.*Epoch 1 of 1 took \([0-9.]*\)s.*/\1/p' "$tmp/p.log" >>"$tmp/p"
  echo "# round $r: ddprt $(tail -1 "$tmp/d") s, PyTorch $(tail -1 "$tmp/p") s (load $(load1))"
done
d=$(med <"$tmp/d"); p=$(med <"$tmp/p")
printf "%-28s %12s %14s %8s\n" "LeNet, batch 64, 1 thread" "ddprt epoch" "PyTorch epoch" speedup
printf "%-28s %11.3fs %13.3fs %7s\n" "Fashion-MNIST, 60000 images" "$d" "$p" "$(ratio "$p" "$d")"
load_line after
