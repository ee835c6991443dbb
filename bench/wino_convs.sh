#!/usr/bin/env bash
# The ResNet 3x3 conv rows of ddprt-bench-kernels, two builds side by side (alternating
# rounds, medians of each row's fwd_us / bwd_us): e.g. a build of main before the
# Winograd convs against one after. Not part of make test.
#   BEFORE=/tmp/old/ddprt-bench-kernels AFTER=build/ddprt-bench-kernels \
#     bench/wino_convs.sh [ROUNDS] [MODEL] [ISA]      (defaults: 3 resnet20, the best ISA)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3} model=${2:-resnet20} isa=${3:-}
A=${BEFORE:?BEFORE=path of the old ddprt-bench-kernels} B=${AFTER:-build/ddprt-bench-kernels}
out=$(mktemp -d)
args=(--model "$model" --bf16 off --iters 3 --conv 3x3)
[[ -n $isa ]] && args+=(--isa "$isa")
echo "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-) | load before: $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq "$rounds"); do
  "$A" "${args[@]}" >"$out/a$r" 2>&1
  "$B" "${args[@]}" >"$out/b$r" 2>&1
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$out" "$rounds" <<'EOF'
import sys, statistics, glob
d, n = sys.argv[1], int(sys.argv[2])
def rows(f):
    r = {}
    for line in open(f):
        if "3x3" not in line[:22] or "s1 p1" not in line and "s2 p1" not in line: continue
        name, rest = line[:22].strip(), line[47:].split()
        alg = rest[1] if not rest[1].replace('.', '').isdigit() else ''
        nums = [x for x in rest[1:] if x.replace('.', '').isdigit()]
        r[name] = (int(rest[0]), alg, float(nums[0]), float(nums[3]))
    return r
A = [rows(f"{d}/a{i}") for i in range(1, n + 1)]
B = [rows(f"{d}/b{i}") for i in range(1, n + 1)]
isa = [l for l in open(f"{d}/b1") if l.startswith("all convs")]
print(f"{'conv':22} {'x':>3} {'alg':>3} {'fwd_us old':>11} {'new':>8} {'speedup':>7} {'bwd_us old':>11} {'new':>8} {'speedup':>7}")
tot = [0, 0, 0, 0]
for name in A[0]:
    m = lambda L, k: statistics.median(x[name][k] for x in L)
    c, alg = A[0][name][0], B[0][name][1]
    fa, fb, ba, bb = m(A, 2), m(B, 2), m(A, 3), m(B, 3)
    tot = [tot[0] + c * fa, tot[1] + c * fb, tot[2] + c * ba, tot[3] + c * bb]
    print(f"{name:22} {c:3} {alg:>3} {fa:11.0f} {fb:8.0f} {fa / fb:6.2f}x {ba:11.0f} {bb:8.0f} {ba / bb:6.2f}x")
print(f"{'3x3 convs x count':26} {tot[0] / 1e3:11.1f}ms {tot[1] / 1e3:6.1f}ms {tot[0] / tot[1]:6.2f}x "
      f"{tot[2] / 1e3:9.1f}ms {tot[3] / 1e3:6.1f}ms {tot[2] / tot[3]:6.2f}x   (fwd+bwd {(tot[0] + tot[2]) / (tot[1] + tot[3]):.2f}x)")
if isa: print("new:", isa[0].strip())
EOF
rm -rf "$out"
