# Shared helpers of the benchmark scripts (sourced: `. "$(dirname "$0")/lib.sh"`).
# Benchmarks on a shared 2-core machine are noisy: every script alternates the compared
# programs round by round, reports medians, and prints the load it ran under.

# PyTorch's references run on one thread: torch.set_num_threads does not reach Debian's
# OpenBLAS (libopenblas0-pthread), which otherwise takes every core for the linear layers.
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}

# med: the median of the numbers on stdin (one per line; "-" when there are none).
med() { sort -g | awk '{ v[NR] = $1 } END { if (!NR) print "-"; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

# med_file FILE: the median of FILE's numbers.
med_file() { med <"$1"; }

# scratch NAME: a fresh temporary folder in $NAME, removed when the script exits.
scratch() {
    local dir
    dir=$(mktemp -d)
    printf -v "$1" %s "$dir"
    trap "rm -rf '$dir'" EXIT
}

# load1: the 1-minute load average; load_line LABEL: "# LABEL: load 1.23 (uptime ...)".
load1() { cut -d' ' -f1 /proc/loadavg; }
load_line() { echo "# $1: load $(load1) ($(uptime | sed 's/.*load average: //'))"; }

# alternate ROUNDS CMD...: runs each CMD (a shell string) once per round, in turn, so
# that a slow phase of the machine hits every program alike; "$round" is set for them.
alternate() {
    local n=$1; shift
    for round in $(seq "$n"); do
        for c in "$@"; do eval "$c"; done
    done
}

# rate_bps RATE: a tc rate (none, 1gbit, 500mbit) in bytes per second (none: 0).
rate_bps() { case $1 in none) echo 0 ;; *gbit) echo $((${1%gbit} * 1000000000 / 8)) ;; *mbit) echo $((${1%mbit} * 1000000 / 8)) ;; esac; }

# ratio A B: A / B as "1.23x" ("-" when either is missing or B is 0).
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "-" || b == "-" || b == 0) print "-"; else printf "%.2fx", a / b }'; }

# cpu_line: which CPU and SIMD level the figures were taken on.
cpu_line() {
    echo "# cpu: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), $(nproc) cpus," \
         "isa: $(grep -o 'avx512[a-z_0-9]*\|avx2' /proc/cpuinfo | sort -u | tr '\n' ' ')${DDPRT_ISA:+(DDPRT_ISA=$DDPRT_ISA)}"
}

# report_head: the lines that head every report (the CPU, and the load before the runs).
report_head() { cpu_line; load_line before; }

# bench_deps: the Debian packages of the PyTorch-side references (deps/debian.txt kinds
# ci and bench), installed when missing (as root; otherwise the command to run is printed).
bench_deps() { "$(dirname "${BASH_SOURCE[0]}")/../tools/deps.sh" ci bench; }
