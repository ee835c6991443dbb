#!/bin/sh
# Prints the README's sample output block: what `make run RUN_ARGS=--epochs 1` prints
# (make run's first epoch), the training-progress lines after the second and before the
# last shown as "...". test/test_readme.c runs the same command and compares the block,
# timings, speeds, thread count, kernels and transports aside. Usage (from the
# repository root, after make): tools/readme_run.sh [BUILD] > block.txt
B=${1:-build}
./$B/ddprt-launch --nproc-per-node 2 -- ./$B/ddprt-train --epochs 1 2>&1 |
  awk '/Train Epoch:/ { n++; if (n <= 2) print; else { last = $0; if (!dots) { print "..."; dots = 1 } } next }
       { if (last != "") { print last; last = "" } sub(/[ \t]+$/, ""); print }'
