#!/bin/sh
# The table of a `make fuzz` run (issue 26's closing figure): per target, the executions,
# the seconds and the crashes, from build-fuzz/log-TARGET.txt. A crash stops libFuzzer at
# once (the log then has an ERROR line and a crash-* artifact in build-fuzz/).
#   FUZZ_RUNS=1000000 make fuzz; bench/fuzz_table.sh
. "$(dirname "$0")/lib.sh"
dir=${1:-build-fuzz}
load_line "fuzz"
echo "$(cpu_line)"
printf '| %-8s | %12s | %8s | %7s |\n' target executions "time (s)" crashes
printf '| %-8s | %12s | %8s | %7s |\n' -------- ------------ -------- -------
for log in "$dir"/log-*.txt; do
    [ -e "$log" ] || { echo "no $dir/log-*.txt: run make fuzz first" >&2; exit 1; }
    t=$(basename "$log" .txt); t=${t#log-}
    done_line=$(grep '^Done [0-9]* runs in' "$log" | tail -1)
    runs=$(echo "$done_line" | awk '{ print $2 }')
    secs=$(echo "$done_line" | awk '{ print $5 }')
    crashes=$(grep -c 'ERROR: \|runtime error' "$log")
    [ -n "$runs" ] || runs=$(grep -o '^#[0-9]*' "$log" | tail -1 | tr -d '#')
    printf '| %-8s | %12s | %8s | %7s |\n' "$t" "${runs:--}" "${secs:--}" "$crashes"
done
