#!/usr/bin/env bash
# The --invariant byte-identity table: model x world size x transport, each cell the
# md5 of the final checkpoint (first 8 hex digits) and "=" when it equals W=1's.
# Transports on this host: shm (shared memory and registered buffers, the default),
# tcp (DDPRT_SHM=0, DDPRT_TCP_LOCAL=tcp: TCP loopback sockets only), hier (the other
# collectives hierarchical, DDPRT_ALGO=hier), verbs (when an RDMA device is up). Each
# world size runs with another --threads and --bucket-mb. Across hosts: make test-cluster.
#   bench/invariant_identity.sh        (BUILD=build; K=8; STEPS=20; MODELS="lenet resnet20 textcnn")
set -euo pipefail
cd "$(dirname "$0")/.."
B=${BUILD:-build}
K=${K:-8}
steps=${STEPS:-20}
models=${MODELS:-lenet resnet20 textcnn}
. bench/lib.sh
report_head
scratch tmp
src=${DDPRT_DATA:-/usr/share/datasets/fashion-mnist}
be32() { printf "$(printf '\\x%02x\\x%02x\\x%02x\\x%02x' $(($1 >> 24 & 255)) $(($1 >> 16 & 255)) $(($1 >> 8 & 255)) $(($1 & 255)))"; }
idx_head() { # SRC_GZ OUT N ITEM_BYTES MAGIC [DIMS...]
    local s=$1 out=$2 n=$3 item=$4 magic=$5; shift 5
    { be32 "$magic"; be32 "$n"; for dim in "$@"; do be32 "$dim"; done
      (set +o pipefail; zcat "$s" | tail -c +$((9 + 4 * $#)) | head -c $((n * item))); } >"$out" # head ends zcat early
}
mkdir -p "$tmp/data"
idx_head "$src/train-images-idx3-ubyte.gz" "$tmp/data/train-images-idx3-ubyte" 3000 784 2051 28 28
idx_head "$src/train-labels-idx1-ubyte.gz" "$tmp/data/train-labels-idx1-ubyte" 3000 1 2049
idx_head "$src/t10k-images-idx3-ubyte.gz" "$tmp/data/t10k-images-idx3-ubyte" 500 784 2051 28 28
idx_head "$src/t10k-labels-idx1-ubyte.gz" "$tmp/data/t10k-labels-idx1-ubyte" 500 1 2049

transports=(shm tcp hier)
ibv_devices 2>/dev/null | grep -q "^ *[a-z]" && transports+=(verbs)
worlds=()
for w in 1 2 4 8; do [ $((K % w)) = 0 ] && [ "$w" -le "$K" ] && worlds+=("$w"); done

# cell MODEL W TRANSPORT: runs one job, prints the checkpoint's md5 prefix
cell() {
    local m=$1 w=$2 t=$3 env=() be=() ck="$tmp/$1.$2.$3.st" threads=$((1 + $2 % 3)) bucket
    bucket=$(awk -v w="$w" 'BEGIN { printf "%g", 0.01 * w }')
    case $t in
    tcp) env=(DDPRT_SHM=0 DDPRT_TCP_LOCAL=tcp) ;;
    hier) env=(DDPRT_ALGO=hier) ;;
    verbs) be=(--backend verbs) ;;
    esac
    local a=(--invariant "$K" --model "$m" --batch-size 8 --epochs 1 --max-steps "$steps" --threads "$threads"
             --bucket-mb "$bucket" --test-batch-size 100 --log-interval 1000 "${be[@]}")
    case $m in textcnn) a+=(--data synthetic --no-eval --seq-len 32 --embed-dim 32) ;; *) a+=(--data "$tmp/data") ;; esac
    if [ "$w" = 1 ]; then env "${env[@]}" "$B/ddprt-train" "${a[@]}" --save "$ck" >"$ck.log" 2>&1
    else env "${env[@]}" "$B/ddprt-launch" --nproc-per-node "$w" -- "$B/ddprt-train" "${a[@]}" --save "$ck" >"$ck.log" 2>&1
    fi || { echo "failed"; return; }
    md5sum "$ck" | cut -c1-8
}

printf "%-9s" model
for w in "${worlds[@]}"; do
    if [ "$w" = 1 ]; then printf " %12s" "W=1"; else for t in "${transports[@]}"; do printf " %12s" "W=$w $t"; done; fi
done
echo
for m in $models; do
    ref=$(cell "$m" 1 shm)
    printf "%-9s %12s" "$m" "$ref"
    for w in "${worlds[@]}"; do
        [ "$w" = 1 ] && continue
        for t in "${transports[@]}"; do
            h=$(cell "$m" "$w" "$t")
            [ "$h" = "$ref" ] && h="= $h"
            printf " %12s" "$h"
        done
    done
    echo
done
echo "# --invariant $K, $steps steps of --batch-size 8 per shard; threads 1 + W mod 3, --bucket-mb 0.01 W"
load_line after
