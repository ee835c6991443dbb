#!/usr/bin/env bash
# Everything a lent GPU machine should run, in one call (device time is short): the
# device suite (make test-gpu's runner), the kernel table against cuBLAS/cuDNN, the
# device allreduce's busbw (cuda_ipc vs staged vs the D2D copy, ipc-busbw.log), the
# training table (bench/gpu_bench.sh), per-kernel profiles of one step
# (bench/gpu_profile.sh), the bf16 and TF32 training rows, then compute-sanitizer memcheck over the kernel tests
# (racecheck with CAP_RACE). The caps add up to 8 minutes (the issue's bound). Built here and carried: the binaries link this machine's
# libjpeg/libpng/libibverbs, so .gpu/lib holds copies of those (docs/build.md, "On a
# lent GPU"). Each step has its own time cap and writes its log into $OUT at once.
#   bash bench/gpu_device.sh   (OUT=folder for the logs; BUILD=build; BEFORE=dir of an older
#                               ddprt-train for the table; OPT=adamw: the table with AdamW;
#                               PROFILE="gpt:8 resnet18:32"; CAP_*)
set -u
cd "$(dirname "$0")/.."
O=${OUT:-/tmp/gpu-out}
mkdir -p "$O"
# a start-up probe that disagrees says where in its warning line and leaves both results here
mkdir -p "$O/probes"
export DDPRT_PROBE_DUMP=$O/probes
export DDPRT_BUILD=${BUILD:-build} LD_LIBRARY_PATH=$PWD/.gpu/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
B=$DDPRT_BUILD
step() { local cap=$1 log=$2; shift 2; local t=$SECONDS
  timeout "$cap" "$@" >"$O/$log" 2>&1; echo "# rc $? after $((SECONDS - t)) s (cap $cap)" >>"$O/$log"; }
{ nvidia-smi; nproc; uname -r; ldd "$B/ddprt-train" | grep 'not found'; } >"$O/machine.txt" 2>&1
step "${CAP_TEST:-100}" test-gpu.log "$B/test-gpu-runner" ${TESTS:-}
# cuBLAS / cuDNN for the kernel table's reference columns (PyTorch's wheels hold them)
refs=$(find /opt /usr/local /usr/lib -xdev \( -name 'libcublas.so*' -o -name 'libcudnn.so*' \) 2>/dev/null |
       xargs -r -n1 dirname | sort -u | tr '\n' ':')
LD_LIBRARY_PATH=$refs$LD_LIBRARY_PATH step "${CAP_KERNELS:-60}" kernels.log stdbuf -oL "$B/ddprt-bench-kernels" --device cuda
# device allreduce busbw, cuda_ipc vs the pinned staging vs the D2D copy (issue 42's goal: 64 MiB fp32, 2 ranks on
# one GPU: IPC >= 10x staged, >= 70 % of the copy); 2 then 4 processes sharing GPU 0 (or one GPU each where there are more)
step "${CAP_IPC:-50}" ipc-busbw.log bash -c 'for n in 2 4; do
  "$0/ddprt-launch" --nproc-per-node $n -- "$0/ddprt-bench" allreduce --device cuda -b 1K -e "$1" -f 4 -n "$2" -w 2 \
    --byte-budget 1G; done' "$B" "${IPC_MAX:-256M}" "${IPC_ITERS:-10}"
BUILD=$B MODELS="${FP32_MODELS:-resnet20 resnet18 gpt}" step "${CAP_TRAIN:-80}" train.log bash bench/gpu_bench.sh "${ROUNDS:-1}"
# the tensor cores: --amp bf16 against autocast bf16, TF32 against allow_tf32 (issue 39's goal table)
# (the goal table's rows: ResNet-18 at batch 128, GPT-2 124M at T 1024, batch 8)
BUILD=$B PREC=bf16 MODELS="${TC_MODELS:-resnet20 textcnn lenet resnet18:128 gpt2}" step "${CAP_BF16:-120}" \
  train-bf16.log bash bench/gpu_bench.sh 1
BUILD=$B PREC=tf32 MODELS=resnet18:128 step "${CAP_TF32:-30}" train-tf32.log bash bench/gpu_bench.sh 1
for p in ${PROFILE:-}; do
  BUILD=$B step "${CAP_PROF:-60}" "prof-${p%%:*}.txt" bash bench/gpu_profile.sh "${p%%:*}" "${p##*:}"
done
[[ ${CAP_MEMCHECK:-40} -gt 0 ]] &&
  step "${CAP_MEMCHECK:-40}" memcheck.log compute-sanitizer --tool memcheck "$B/test-gpu-runner" gpu_kernels gpu_tfm
# racecheck is slow (two tests did not finish in 30-40 s on the H200): opt in with a cap of 90 s or more
[[ ${CAP_RACE:-0} -gt 0 ]] &&
  step "$CAP_RACE" racecheck.log compute-sanitizer --tool racecheck "$B/test-gpu-runner" ${RACE_TESTS:-gpu_tfm_attention}
tail -n 3 "$O"/*.log "$O"/*.txt
