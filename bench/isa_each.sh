#!/bin/bash
# usage: bench/isa_each.sh [BEFORE_REV] [BUILD] -- the rt/isa_each.h kernels (Adam, max
# over time, the reductions) on every ISA level, this tree's build against BEFORE_REV's
# sources of the same kernels (default: the commit before they moved onto rt/isa_each.h).
set -e
cd "$(dirname "$0")/.."
. bench/lib.sh
REV=${1:-799fbe3}
B=${2:-build}
scratch T
mkdir -p "$T/old/transport"
for f in kernels/cpu/k_optim.c kernels/cpu/k_graph.c transport/tp_reduce.c transport/tp_reduce_x86.c \
         transport/tp_reduce_simd.h transport/tp_reduce.h; do
    git show "$REV:$f" >"$T/old/$(basename "$f")" 2>/dev/null || true
done
mv "$T"/old/tp_reduce*.h "$T/old/transport/"
CF="-std=c11 -O2 -D_GNU_SOURCE -pthread -I$T/old -I."
for f in "$T"/old/*.c; do
    o=$T/$(basename "${f%.c}").o
    cc $CF -c "$f" -o "$o"
    nm --defined-only -g "$o" | awk '{print $3" old_"$3}' >"$o.syms"
done
# The old objects call each other by the old names too.
for o in "$T"/*.o; do for s in "$T"/*.syms; do objcopy --redefine-syms="$s" "$o"; done; done
make -s "$B/libddprt.a"
LIBS=$(make -qp 2>/dev/null | sed -n "s/^LDLIBS *:= *//p" | tail -1)
cc $CF bench/isa_each_bench.c "$T"/*.o "$B/libddprt.a" -o "$T/bench" ${LIBS:--lz -lm}
cpu_line
load_line "before the run"
"$T/bench"
load_line "after the run"
