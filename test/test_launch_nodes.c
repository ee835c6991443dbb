/* ddprt-launch --nnodes 2 --max-restarts: two launchers on one host (127.0.0.1) restart
 * their ranks together (rounds decided by node 0), agree on the count, stop the job when
 * a launcher dies, refuse differing flags, and a SIGKILLed rank of node 1 mid-training
 * ends in the same checkpoint as an uninterrupted run. */
#include "test/t.h"
#include "test/t_proc.h"
#include "test/t_data.h"
#include "ports/posix/port.h"
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static t_proc N[2];
static char port_s[16];

/* Starts node's launcher in its own session (so that killing -pid takes its ranks too,
 * like a node going away): --nnodes 2 --nproc-per-node 1 on 127.0.0.1 and args after. */
static void node(int n, const char *max_restarts, const char *const *prog)
{
    char *argv[32], nr[8], name[16];
    int k = 0;
    snprintf(nr, sizeof nr, "%d", n);
    snprintf(name, sizeof name, "node%d", n);
    static char *tmpl[] = {"/usr/bin/setsid", NULL, "--nnodes", "2", "--node-rank", NULL, "--nproc-per-node", "1",
                           "--master-addr", "127.0.0.1", "--master-port", NULL, "--max-restarts", NULL, "--"};
    for (int i = 0; i < (int)(sizeof tmpl / sizeof *tmpl); i++) argv[k++] = tmpl[i];
    argv[1] = (char *)t_prog("ddprt-launch"), argv[5] = nr, argv[11] = port_s, argv[13] = (char *)max_restarts;
    for (int i = 0; prog[i] && k < 31; i++) argv[k++] = (char *)prog[i];
    argv[k] = NULL;
    t_spawn(&N[n], name, argv, NULL);
}

static void both(const char *max_restarts, const char *const *prog)
{
    t_clean_env();
    snprintf(port_s, sizeof port_s, "%d", t_free_port());
    node(1, max_restarts, prog); /* node 1 first: it waits for node 0's control port */
    port_sleep_ns(100000000);
    node(0, max_restarts, prog);
}

static int wait_for(const char *path, const char *s, double secs)
{
    for (int i = 0; i < (int)(secs * 100); i++) {
        if (strstr(t_slurp(path), s)) return 1;
        port_sleep_ns(10000000);
    }
    return 0;
}

PTEST(launch_nodes_restart_together)
{
    /* Rank 1 (node 1) is SIGKILLed on the first start; node 0's rank is stopped by the
     * round, not by a failure of its own; both nodes start round 1. */
    const char *flaky[] = {t_prog("t-launch_child"), "flaky", "1", NULL};
    both("2", flaky);
    int s0 = t_wait(&N[0], 60), s1 = t_wait(&N[1], 60);
    const char *e0 = t_slurp(N[0].err), *e1 = t_slurp(N[1].err), *o0 = t_slurp(N[0].out), *o1 = t_slurp(N[1].out);
    CHECKF(s0 == 0 && s1 == 0, "%d %d: %s / %s", s0, s1, e0, e1);
    CHECKF(strstr(e0, "node 0: restart 1 of 2 after rank 1 failed (status 137) on node 1\n"), "%s", e0);
    CHECKF(strstr(e1, "node 1: restart 1 of 2 after rank 1 failed (status 137) on node 1\n"), "%s", e1);
    /* (rank 0 may be stopped before it prints anything: only its restart is certain) */
    CHECKF(!strstr(e0, "ddprt-launch: rank 0 (pid") && strstr(o0, "[rank 0] start 1 args:\n"), "%s / %s", o0, e0);
    CHECKF(strstr(o1, "[rank 1] start 1 args:\n") && !strstr(e0, "restart 2") && !strstr(e1, "restart 2"), "%s", o1);

    /* Always failing: both launchers count the same restarts and exit with its status. */
    const char *fail[] = {t_prog("t-launch_child"), "fail", "1", "7", NULL};
    both("1", fail);
    s0 = t_wait(&N[0], 60), s1 = t_wait(&N[1], 60);
    e0 = t_slurp(N[0].err), e1 = t_slurp(N[1].err);
    CHECKF(s0 == 7 && s1 == 7, "%d %d: %s / %s", s0, s1, e0, e1);
    CHECKF(strstr(e0, "node 0: restart 1 of 1 after rank 1 failed (status 7) on node 1") && !strstr(e0, "restart 2"),
           "%s", e0);
    CHECKF(strstr(e1, "node 1: restart 1 of 1 after rank 1 failed (status 7) on node 1") && !strstr(e1, "restart 2"),
           "%s", e1);
}

PTEST(launch_nodes_lost_launcher_stops_the_job)
{
    const char *wait[] = {t_prog("t-launch_child"), "wait", NULL};
    for (int dead = 1; dead >= 0; dead--) {
        both("1", wait);
        CHECK(wait_for(N[0].out, "ready", 20) && wait_for(N[1].out, "ready", 20));
        kill(-N[dead].pid, SIGKILL); /* the launcher and its rank: the node is gone */
        int64_t t0 = port_now_ns();
        int s = t_wait(&N[1 - dead], 30);
        double secs = (double)(port_now_ns() - t0) / 1e9;
        t_wait(&N[dead], 5);
        const char *e = t_slurp(N[1 - dead].err), *o = t_slurp(N[1 - dead].out);
        CHECKF(s == 1, "%d: %s", s, e);
        CHECKF(secs < 20, "%.1f s", secs); /* the grace is 10 s; EOF is seen at once */
        if (dead == 1)
            CHECKF(strstr(e, "ddprt-launch: node 0: the launcher of node 1 (") &&
                   strstr(e, ") is gone (control connection closed); stopping the job"), "%s", e);
        else
            CHECKF(strstr(e, "ddprt-launch: node 1: lost the node-0 launcher at 127.0.0.1:") &&
                   strstr(e, "(control connection closed); stopping the local ranks"), "%s", e);
        CHECKF(strstr(o, "got SIGTERM"), "%s", o); /* its own rank was stopped */
    }
}

PTEST(launch_nodes_refuse_differing_flags)
{
    t_clean_env();
    const char *wait[] = {t_prog("t-launch_child"), "wait", NULL};
    snprintf(port_s, sizeof port_s, "%d", t_free_port());
    node(1, "2", wait);
    node(0, "1", wait);
    int s0 = t_wait(&N[0], 30), s1 = t_wait(&N[1], 30);
    const char *e0 = t_slurp(N[0].err), *e1 = t_slurp(N[1].err);
    CHECKF(s0 == 1 && s1 == 1, "%d %d", s0, s1);
    CHECKF(strstr(e0, "node 0: launcher at ") && strstr(e0, "refused: flags differ: node 1 has --nnodes 2 "
           "--nproc-per-node 1 --max-restarts 2, node 0 --nnodes 2 --nproc-per-node 1 --max-restarts 1"), "%s", e0);
    CHECKF(strstr(e1, "node 1: node 0 refused this launcher: flags differ"), "%s", e1);
    CHECK(!strstr(t_slurp(N[0].out), "ready") && !strstr(t_slurp(N[1].out), "ready")); /* no rank started */
}

/* Elastic restart across nodes of a real training job: rank 1 (node 1) is SIGKILLed
 * after the first checkpoint; both launchers restart their ranks with --resume, and the
 * final checkpoint equals an uninterrupted one-node run's byte for byte. */
PTEST(launch_nodes_restart_resumes_training_to_the_same_checkpoint)
{
    t_clean_env();
    char cmd[12000];
    t_restart f;
    t_restart_files(&f, 12000, 1);
    const char *d = f.dir, *data = f.data, *full = f.full, *el = f.el;
    snprintf(cmd, sizeof cmd, "%s --nproc-per-node 2 -- %s --data %s --epochs 3 --threads 1 --save %s > %s/full.log 2>&1",
             t_prog("ddprt-launch"), t_prog("ddprt-train"), data, full, d);
    CHECK(system(cmd) == 0);
    int port = t_free_port();
    char launch[1400];
    snprintf(launch, sizeof launch, "%s --nnodes 2 --nproc-per-node 1 --master-addr 127.0.0.1 --master-port %d "
             "--max-restarts 1 --resume-arg %s", t_prog("ddprt-launch"), port, el);
    snprintf(cmd, sizeof cmd,
             "cat > %s/wrap.sh <<'EOF'\n#!/bin/sh\n"
             "if [ \"$RANK\" = 1 ] && [ -z \"$DDPRT_RESTART_COUNT\" ]; then\n"
             "  (while [ ! -e \"$CK\" ]; do sleep 0.02; done; sleep 0.1; kill -9 $$) &\nfi\n"
             "exec \"$TRAIN\" \"$@\"\nEOF\nchmod +x %s/wrap.sh\nexport CK=%s TRAIN=%s\n"
             "(%s --node-rank 1 -- %s/wrap.sh --data %s --epochs 3 --threads 1 --save %s > %s/n1.log 2>&1; "
             "echo $? > %s/n1.rc) & "
             "%s --node-rank 0 -- %s/wrap.sh --data %s --epochs 3 --threads 1 --save %s > %s/n0.log 2>&1; "
             "echo $? > %s/n0.rc; wait",
             d, d, el, t_prog("ddprt-train"), launch, d, data, el, d, d, launch, d, data, el, d, d);
    CHECK(system(cmd) == 0);
    char p0[460], p1[460], r0[460], r1[460];
    snprintf(p0, sizeof p0, "%s/n0.log", d), snprintf(p1, sizeof p1, "%s/n1.log", d);
    snprintf(r0, sizeof r0, "%s/n0.rc", d), snprintf(r1, sizeof r1, "%s/n1.rc", d);
    const char *l0 = t_slurp(p0), *l1 = t_slurp(p1);
    CHECKF(!strcmp(t_slurp(r0), "0\n") && !strcmp(t_slurp(r1), "0\n"), "%s / %s", l0, l1);
    /* Rank 0 may fail on the closed connection in the same instant: either is named. */
    CHECKF(strstr(l0, "node 0: restart 1 of 1 after rank ") && strstr(l0, "; resuming from "), "%s", l0);
    CHECKF(strstr(l1, "node 1: restart 1 of 1 after rank ") && strstr(l1, "; resuming from "), "%s", l1);
    snprintf(cmd, sizeof cmd, "cmp -s %s %s && cmp -s %s.state %s.state", full, el, full, el);
    CHECK(system(cmd) == 0);
}

/* Two plain launchers (no --max-restarts: no control channel) that disagree on
 * --nproc-per-node: both derive the same job token from the rendezvous address, port and
 * node count, so rank 0 names the other node's rank with its world size at once instead
 * of waiting for the deadline (DDPRT_TIMEOUT=120 here; the test takes seconds). */
PTEST(launch_nodes_differing_nproc_named_at_once)
{
    t_clean_env();
    setenv("DDPRT_TIMEOUT", "120", 1);
    snprintf(port_s, sizeof port_s, "%d", t_free_port());
    for (int n = 1; n >= 0; n--) {
        char nr[8], name[16], np[8];
        snprintf(nr, sizeof nr, "%d", n), snprintf(name, sizeof name, "node%d", n), snprintf(np, sizeof np, "%d", n + 1);
        char *argv[] = {"/usr/bin/setsid", (char *)t_prog("ddprt-launch"), "--nnodes", "2", "--node-rank", nr,
                        "--nproc-per-node", np, "--master-addr", "127.0.0.1", "--master-port", port_s, "--",
                        (char *)t_prog("ddprt-train"), "--data", "synthetic", "--model", "lenet", "--epochs", "1",
                        "--max-steps", "1", "--threads", "1", "--no-eval", NULL};
        t_spawn(&N[n], name, argv, NULL);
    }
    int64_t t0 = port_now_ns();
    int s0 = t_wait(&N[0], 100);
    double secs = (double)(port_now_ns() - t0) / 1e9;
    kill(-N[1].pid, SIGKILL);
    t_wait(&N[1], 10);
    unsetenv("DDPRT_TIMEOUT");
    const char *e0 = t_slurp(N[0].err), *o0 = t_slurp(N[0].out);
    CHECKF(s0 != 0 && (strstr(e0, "does not match rank 0's world size 2") || strstr(o0, "does not match rank 0's world size 2")),
           "exit %d after %.1f s:\n%s\n%s", s0, secs, e0, o0);
    CHECKF(secs < 90, "%.1f s: rank 0 waited for the deadline", secs);
}
