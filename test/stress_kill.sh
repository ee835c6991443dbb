#!/bin/bash
# Stress (not part of make test): TRIALS trials (default 100) of a 2-4 rank job of
# build/t-stall_rank where a random rank is SIGKILLed or SIGSTOPped at a random time.
# Every other rank must exit before the deadline (DDPRT_TIMEOUT + 15 s) with an error
# naming the victim (stopped: "rank V late"; killed: its error names rank V) and no
# other rank as late. Prints one line per trial and a summary; exit 1 on any failure.
# usage: test/stress_kill.sh [TRIALS] [BUILD]
TRIALS=${1:-100}
B=${2:-build}
T=$(mktemp -d /tmp/ddprt-stress-XXXXXX)
trap 'rm -rf "$T"' EXIT
export DDPRT_STALL_WARN=2 DDPRT_TIMEOUT=4 DDPRT_TRACE_DIR=$T
hangs=0 wrong=0 ok=0
for ((t = 1; t <= TRIALS; t++)); do
  W=$((2 + RANDOM % 3)); V=$((RANDOM % W)); MODE=$([ $((RANDOM % 2)) = 0 ] && echo KILL || echo STOP)
  DELAY=$(printf '0.%03d' $((200 + RANDOM % 800)))
  PORT=$((20000 + RANDOM % 30000))
  pids=()
  for ((r = 0; r < W; r++)); do
    "$B/t-stall_rank" tcp://127.0.0.1:$PORT $r $W > "$T/$r.out" 2> "$T/$r.err" &
    pids[$r]=$!
  done
  for ((i = 0; i < 200; i++)); do
    n=0; for ((r = 0; r < W; r++)); do grep -q ready "$T/$r.out" 2>/dev/null && n=$((n + 1)); done
    [ $n = $W ] && break; sleep 0.05
  done
  sleep "$DELAY"
  start=$(date +%s.%N)
  kill -$MODE ${pids[$V]}
  verdict=ok
  for ((r = 0; r < W; r++)); do
    [ $r = $V ] && continue
    for ((i = 0; i < 190; i++)); do kill -0 ${pids[$r]} 2>/dev/null || break; sleep 0.1; done
    if kill -0 ${pids[$r]} 2>/dev/null; then verdict="HANG rank $r"; kill -9 ${pids[$r]}; continue; fi
    e=$(cat "$T/$r.err")
    if [ $MODE = STOP ]; then
      echo "$e" | grep -q "rank $V late" || verdict="WRONG rank $r: $(echo "$e" | tail -1)"
      echo "$e" | grep -o "ranks* [0-9,]* late" | grep -vq "^rank $V late$" && verdict="WRONG rank $r: $(echo "$e" | grep late | tail -1)"
    else
      echo "$e" | grep "^ERR" | grep -q "rank $V" || verdict="WRONG rank $r: $(echo "$e" | tail -1)"
    fi
  done
  end=$(date +%s.%N)
  { kill -9 ${pids[$V]}; wait; } 2>/dev/null
  case $verdict in ok) ok=$((ok + 1));; HANG*) hangs=$((hangs + 1));; *) wrong=$((wrong + 1));; esac
  printf 'trial %3d: world %d, SIG%s rank %d after %ss: all others out in %.1f s: %s\n' $t $W $MODE $V $DELAY \
    "$(echo "$end - $start" | bc)" "$verdict"
done
echo "stress: $TRIALS trials, $ok ok, $hangs hangs past the deadline, $wrong misattributions"
[ $hangs = 0 ] && [ $wrong = 0 ]
