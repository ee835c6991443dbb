#!/usr/bin/env bash
# Checkpoints byte-identical across a code change: LeNet, ResNet-20, TextCNN and a small
# GPT, a few steps each on synthetic data, under every ISA level (DDPRT_ISA) and, for the
# models, --amp bf16 too (emulated where the CPU lacks AVX512-BF16); the checkpoint and its .state (the optimizer's)
# both compared. A level this CPU lacks falls back to the best it
# has (rt/isa.c warns), so its row checks that path again.
#   bench/ckpt_identity.sh save DIR     the reference checkpoints (build HEAD first)
#   bench/ckpt_identity.sh check DIR    the same runs again, cmp against DIR: a table
# (BUILD=build; STEPS=3; ISAS="generic avx2 avx512 avx512bf16"; MODELS="lenet resnet20 textcnn gpt")
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:?save|check}
ref=${2:?DIR}
B=${BUILD:-build}
steps=${STEPS:-3}
isas=${ISAS:-generic avx2 avx512 avx512bf16}
models=${MODELS:-lenet resnet20 textcnn gpt}
mkdir -p "$ref"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# the cfg's path goes into the checkpoint: one path for both runs
printf '[gpt]\nlayers=2\ndim=64\nheads=4\nctx=32\nvocab=97\n' >"$ref/gpt.cfg"

# run MODEL ISA AMP OUT: one short training run, its checkpoint at OUT
run() {
    local m=$1 isa=$2 amp=$3 out=$4
    local a=(--batch-size 8 --epochs 1 --max-steps "$steps" --threads 2 --no-eval --log-interval 1000
             --data synthetic --amp "$amp" --save "$out")
    case $m in
    textcnn) a+=(--model textcnn --seq-len 32 --embed-dim 32) ;;
    gpt) a+=(--model-file "$ref/gpt.cfg" --optimizer adamw --seq-len 32 --sample-len 1) ;;
    *) a+=(--model "$m") ;;
    esac
    DDPRT_ISA=$isa nice "$B/ddprt-train" "${a[@]}" >"$out.log" 2>&1
}

printf '%-9s %-5s' model amp
for i in $isas; do printf ' %-11s' "$i"; done
echo
bad=0
for m in $models; do
    for amp in none bf16; do
        printf '%-9s %-5s' "$m" "$amp"
        for i in $isas; do
            name="$m.$i.$amp.st"
            if [ "$mode" = save ]; then
                if run "$m" "$i" "$amp" "$ref/$name"; then r=saved; else r="fails"; rm -f "$ref/$name"; fi
            elif [ ! -e "$ref/$name" ]; then
                r="-" # the reference run failed too (e.g. no bf16 path for it)
                run "$m" "$i" "$amp" "$tmp/$name" && { r="NEW"; bad=1; }
            elif run "$m" "$i" "$amp" "$tmp/$name" && cmp -s "$ref/$name" "$tmp/$name" &&
                 { [ ! -e "$ref/$name.state" ] || cmp -s "$ref/$name.state" "$tmp/$name.state"; }; then r=yes
            else r=NO; bad=1
            fi
            printf ' %-11s' "$r"
        done
        echo
    done
done
exit $bad
