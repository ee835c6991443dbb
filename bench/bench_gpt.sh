#!/usr/bin/env bash
# Issue 24's table: GPT training tokens/s and peak RSS, ddprt vs PyTorch 1.13 (Debian's
# python3-torch, bench/ref_gpt.py), 1 thread each, AdamW, random tokens of the model's
# shape, alternating runs, medians; then GPT-2's planned activations at T 1024 with the
# attention probabilities kept (the stored version) and not (online softmax), and the
# attention kernels' times (ddprt-bench-kernels --model transformer). Not part of make test.
#   bench/bench_gpt.sh [ROUNDS]      (BUILD=build by default; CASES="small" for the first row only;
#                                    AMP=bf16: ddprt --amp bf16 against PyTorch under torch.autocast bf16;
#                                    OPT=adamw8bit: ddprt's moments in 8 bits, PyTorch's AdamW as always;
#                                    MATMUL=high: ddprt --matmul-precision high, PyTorch 1.13's CPU matmuls
#                                    stay fp32 whatever its own setting;
#                                    RECOMPUTE=N: ddprt --recompute-macs N, -2 by default)
set -euo pipefail
cd "$(dirname "$0")/.."
B=${BUILD:-build}
rounds=${1:-3}
amp=${AMP:-none}
opt=${OPT:-adamw}
mm=${MATMUL:-highest}
rc=${RECOMPUTE:--2}
. bench/lib.sh
scratch tmp
# name layers dim heads vocab T batch steps(ddprt) steps(torch)
cases=("small 6 384 6 256 256 8 6 4" "gpt2 12 768 12 50257 64 4 4 3")
report_head
printf "%-6s %-26s %12s %12s %7s %10s %10s %7s %10s\n" model "layers,dim,heads,V,T,batch" "ddprt tok/s" "torch tok/s" ratio \
  "ddprt MiB" "torch MiB" "RSS x" "ddprt all"
for c in "${cases[@]}"; do
  read -r name L C H V T Bt sd sp <<<"$c"
  [[ -z "${CASES:-}" || " $CASES " == *" $name "* ]] || continue
  printf "[gpt]\nlayers=%s\ndim=%s\nheads=%s\nctx=%s\nvocab=%s\n" "$L" "$C" "$H" "$((T > 1024 ? T : (V > 256 ? 1024 : T)))" \
    "$V" >"$tmp/m.cfg"
  : >"$tmp/d"; : >"$tmp/p"; : >"$tmp/dr"; : >"$tmp/pr"; : >"$tmp/da"
  run_d() { "$B/ddprt-train" --data synthetic --model-file "$tmp/m.cfg" --seq-len "$T" --batch-size "$Bt" \
          --optimizer "$opt" --lr 3e-4 --weight-decay 0.1 --max-steps "$1" --epochs 1 --threads 1 --no-eval \
          --mem-report --log-interval 1000 --sample-len 1 --amp "$amp" --matmul-precision "$mm" --recompute-macs "$rc" 2>&1; }
  took() { sed -n 's/.*Epoch 1 of 1 took \([0-9.]*\)s.*/\1/p'; }
  for _ in $(seq "$rounds"); do
    # steady tokens/s, as PyTorch's are taken: the sd steps after 2 warm-up steps, the
    # difference of a run of sd + 2 steps and one of 2 (both with the arena's first touch)
    out=$(run_d "$((sd + 2))")
    t2=$(run_d 2 | took)
    tl=$(echo "$out" | took)
    awk -v n="$((sd * Bt * T))" -v a="$tl" -v b="$t2" 'BEGIN { print n / (a - b) }' >>"$tmp/d"
    awk -v n="$(((sd + 2) * Bt * T))" -v a="$tl" 'BEGIN { print n / a }' >>"$tmp/da"
    echo "$out" | sed -n 's/.*peak RSS \([0-9.]*\) MiB.*/\1/p' >>"$tmp/dr"
    read -r tps rss < <(AMP=$amp /usr/bin/python3 bench/ref_gpt.py "$L" "$C" "$H" "$V" "$T" "$Bt" "$sp")
    echo "$tps" >>"$tmp/p"; echo "$rss" >>"$tmp/pr"
  done
  d=$(med <"$tmp/d"); p=$(med <"$tmp/p"); dr=$(med <"$tmp/dr"); pr=$(med <"$tmp/pr"); da=$(med <"$tmp/da")
  printf "%-6s %-26s %12.1f %12.1f %7s %10.0f %10.0f %7s %10.1f\n" "$name" "$L,$C,$H,$V,$T,$Bt" "$d" "$p" "$(ratio "$d" "$p")" \
    "$dr" "$pr" "$(ratio "$dr" "$pr")" "$da"
done
echo "# tokens/s after 2 warm-up steps on both sides (ddprt: a run of $((sd + 2)) steps less one of 2); ddprt all: its"
echo "# whole epoch, warm-up and the arena's first touch included; amp $amp on both sides; ddprt --optimizer $opt"
echo "# --matmul-precision $mm --recompute-macs $rc"
# planned activations, GPT-2 at T 1024, batch 1 (the plan only: one step runs)
for a in flash stored; do
  printf "[gpt]\nlayers=12\ndim=768\nheads=12\nctx=1024\nvocab=50257\nattention=%s\n" "$a" >"$tmp/a.cfg"
  act=$("$B/ddprt-train" --data synthetic --model-file "$tmp/a.cfg" --seq-len 1024 --batch-size 1 --test-batch-size 1 \
        --epochs 1 --max-steps 1 --no-eval --mem-report --sample-len 1 --threads 1 2>&1 |
        sed -n 's/^activations: planned \([0-9.]*\) MiB.*/\1/p')
  echo "$a $act" >>"$tmp/act"
done
f=$(awk '$1 == "flash" { print $2 }' "$tmp/act"); s=$(awk '$1 == "stored" { print $2 }' "$tmp/act")
# per layer: q,k,v and y (kept by both) plus lse (12 x 1024 floats) or the probabilities (12 x 1024 x 1024)
awk -v f="$f" -v s="$s" 'BEGIN {
  kept = 12 * 4 * 768 * 1024 * 4 / 1048576; lse = 12 * 12 * 1024 * 4 / 1048576; p = 12 * 12 * 1024 * 1024 * 4 / 1048576
  printf "GPT-2 T 1024 batch 1, planned activations: online softmax %.1f MiB, stored %.1f MiB\n", f, s
  printf "  attention part (q, k, v, y and what backward keeps): %.1f MiB vs %.1f MiB = %.3f of stored\n",
         kept + lse, kept + p, (kept + lse) / (kept + p) }'
"$B/ddprt-bench-kernels" --model transformer --iters "$((rounds * 2 + 1))"
load_line after
