#!/bin/sh
# make test-verbs: the verbs tests (test/test_verbs.c) inside a throwaway VM with a
# Soft-RoCE device (../shared/tools/rxe/rxe-run; see its README). The build is the
# host's (the guest shares /usr and this directory). Skips, with the reason and
# exit 0, when the build has no verbs backend or the VM cannot be had; a failing
# test or a timeout fails.
# usage: test/verbs_vm.sh BUILD VERBS RXE_RUN
BUILD=${1:-build}
VERBS=${2:-1}
RXE=${3:-../shared/tools/rxe/rxe-run}
skip() { echo "test-verbs: SKIPPED: $*"; exit 0; }
[ "$VERBS" = 1 ] || skip "this build has no verbs backend (VERBS=0 or no libibverbs-dev)"
[ -x "$RXE" ] || skip "no VM runner at $RXE (shared/tools/rxe must sit beside the clone)"
# Event-driven completions: on the VM's one vCPU, busy-polling processes only take
# turns at the scheduler tick.
rc=0
"$RXE" --timeout 480 -- env DDPRT_BUILD="$BUILD" DDPRT_VERBS_SPIN_US=0 DDPRT_TEST_TIMEOUT=300 T_VERBOSE=1 \
    "./$BUILD/test-runner" verbs_ || rc=$?
case $rc in
0) echo "test-verbs: passed (inside the Soft-RoCE VM)" ;;
125) skip "rxe-run could not install, build or boot the VM (exit 125; see its messages above)" ;;
124) echo "test-verbs: FAILED: the VM run timed out"; exit 1 ;;
*) echo "test-verbs: FAILED (exit $rc)"; exit 1 ;;
esac
