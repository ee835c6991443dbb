/* Elastic jobs (ddprt-launch --nnodes MIN:MAX) on one host: launchers as nodes in
 * their own sessions (killing the session is a node going away). A 4-rank --invariant
 * run with --save-every checkpoints loses a node (2 ranks) mid-epoch, goes on with 2
 * ranks from the newest checkpoint, takes the node back at its next restart point
 * (mid-epoch) and ends in the checkpoint of an uninterrupted 4-rank run, byte for byte;
 * a node missing at the start is named and the job starts without it; too few nodes
 * left stops the job naming them. */
#include "test/t.h"
#include "test/t_data.h"
#include "test/t_proc.h"
#include "ports/posix/port.h"
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

static int wait_for(const char *path, const char *s, double secs)
{
    for (int i = 0; i < (int)(secs * 100); i++) {
        if (strstr(t_slurp(path), s)) return 1;
        port_sleep_ns(10000000);
    }
    return 0;
}

/* Node n's launcher in its own session: --nnodes nodes --nproc-per-node per on
 * 127.0.0.1:port, then prog (NULL-terminated). */
static void node(t_proc *p, int n, const char *nodes, const char *per, int port, const char *resume,
                 const char *const *prog, char **env)
{
    static char nr[8][8], ps[8][16];
    char name[16];
    snprintf(nr[n], sizeof nr[n], "%d", n);
    snprintf(ps[n], sizeof ps[n], "%d", port);
    snprintf(name, sizeof name, "node%d", n);
    const char *argv[48] = {"/usr/bin/setsid", t_prog("ddprt-launch"), "--nnodes", nodes, "--node-rank", nr[n],
                            "--nproc-per-node", per, "--master-addr", "127.0.0.1", "--master-port", ps[n]};
    int k = 12;
    if (resume) argv[k++] = "--resume-arg", argv[k++] = resume;
    argv[k++] = "--";
    for (int i = 0; prog[i] && k < 47; i++) argv[k++] = prog[i];
    argv[k] = NULL;
    t_spawn(p, name, (char *const *)argv, env);
}

/* t_wait for a node: its status, or -1 past the deadline, when its whole session (the
 * launcher and the ranks it started) is killed, before the launcher is reaped so that
 * its id, the session's, cannot have been reused. */
static int node_wait(t_proc *p, double secs)
{
    int64_t deadline = port_now_ns() + (int64_t)(secs * 1e9);
    int st;
    for (;;) {
        pid_t r = waitpid(p->pid, &st, WNOHANG);
        if (r == p->pid) return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        if (r < 0) return -1;
        if (port_now_ns() > deadline) break;
        port_sleep_ns(5000000);
    }
    kill(-p->pid, SIGKILL);
    waitpid(p->pid, &st, 0);
    return -1;
}

/* Seconds left before end (never below 1). */
static double left_s(int64_t end)
{
    double s = (double)(end - port_now_ns()) / 1e9;
    return s > 1 ? s : 1;
}

PTEST(elastic_lose_a_node_mid_epoch_grow_back_same_checkpoint)
{
    t_clean_env();
    /* Every wait below ends before the runner's limit for a test (DDPRT_TEST_TIMEOUT, at
     * least 300 s), so that a failure shows what the launchers said and kills them. */
    const char *tl = getenv("DDPRT_TEST_TIMEOUT");
    int64_t end = port_now_ns() + (int64_t)(((tl && atoi(tl) > 60 ? atoi(tl) : 300) - 30) * 1e9);
    static t_restart f;
    static char wrap[450], cmd[4000], ck_env[480], train_env[480];
    t_restart_files(&f, 3000, 0);
    const char *d = f.dir, *data = f.data, *full = f.full, *el = f.el;
    /* 94 steps an epoch; a checkpoint (and a restart point) every 20 steps inside it. */
    const char *train[] = {"--data", data, "--invariant", "4", "--batch-size", "8", "--epochs", "12", "--threads",
                           "1", "--log-interval", "1000", "--lr", "0.05", "--save-every", "20"};
    enum { NTRAIN = sizeof train / sizeof *train };
    /* The uninterrupted run: 4 ranks under one launcher. */
    size_t o = (size_t)snprintf(cmd, sizeof cmd, "%s --nproc-per-node 4 -- %s", t_prog("ddprt-launch"),
                                t_prog("ddprt-train"));
    for (int i = 0; i < NTRAIN; i++) o += (size_t)snprintf(cmd + o, sizeof cmd - o, " %s", train[i]);
    snprintf(cmd + o, sizeof cmd - o, " --save %s > %s/full.log 2>&1", full, d);
    CHECKF(system(cmd) == 0, "the uninterrupted run failed: %s", cmd);

    /* Nothing below needs a step to be quick, whatever the machine's load. Round 0 (4 ranks): node 1's first rank takes its
     * whole node (its process group) down once the first checkpoint exists (step 20 of
     * 1128), on the first start only. Round 1 (2 ranks, node 0 alone): its ranks start
     * only once node 1 has joined again, i.e. once their launcher has made the file that
     * asks them to stop at their next restart point; so round 1 trains the 20 steps to
     * that point on 2 ranks (not the rest of the job), and round 2 (4 ranks) ends
     * the job. */
    snprintf(wrap, sizeof wrap, "%s/wrap.sh", d);
    snprintf(cmd, sizeof cmd,
             "cat > %s <<'EOF'\n#!/bin/sh\n"
             "if [ \"$RANK\" = 2 ] && [ -z \"$DDPRT_RESTART_COUNT\" ]; then\n"
             "  (while [ ! -e \"$CK\" ]; do sleep 0.02; done; sleep 0.3; kill -9 0) &\n"
             "elif [ \"$WORLD_SIZE\" = 2 ]; then\n"
             "  i=0; while [ ! -e \"$DDPRT_ELASTIC\" ] && [ $i -lt 6000 ]; do sleep 0.05; i=$((i+1)); done\n"
             "fi\nexec \"$TRAIN\" \"$@\"\nEOF\nchmod +x %s", wrap, wrap);
    CHECK(system(cmd) == 0);
    snprintf(ck_env, sizeof ck_env, "CK=%s", el);
    snprintf(train_env, sizeof train_env, "TRAIN=%s", t_prog("ddprt-train"));
    /* Node 0 waits for node 1 at the start however slow its launcher is to come up. */
    char *env[] = {ck_env, train_env, "DDPRT_TIMEOUT=120", "DDPRT_ELASTIC_WAIT=120", NULL};
    const char *prog[32] = {wrap};
    int k = 1;
    for (int i = 0; i < NTRAIN; i++) prog[k++] = train[i];
    prog[k++] = "--save", prog[k++] = el, prog[k] = NULL;
    int port = t_free_port();
    t_proc n0, n1, n1b;
    node(&n1, 1, "1:2", "2", port, el, prog, env);
    port_sleep_ns(100000000);
    node(&n0, 0, "1:2", "2", port, el, prog, env);
    /* Node 1 is lost; node 0 goes on alone (round 1), then node 1 comes back. */
    int alone = wait_for(n0.err, "round 1: 1 node(s)", left_s(end));
    int s1a = node_wait(&n1, alone ? left_s(end) : 0), s0 = -1, s1 = -1;
    CHECKF(alone, "node 0 did not go on alone:\n%s\n--- node 1 (%d):\n%s", t_slurp(n0.err), s1a, t_slurp(n1.err));
    CHECKF(!alone || s1a == 128 + SIGKILL, "node 1 was not killed (%d): %s", s1a, t_slurp(n1.err));
    if (alone) {
        node(&n1b, 1, "1:2", "2", port, el, prog, env);
        s0 = node_wait(&n0, left_s(end)), s1 = node_wait(&n1b, left_s(end) + 10);
    } else {
        node_wait(&n0, 0);
    }
    const char *e0 = t_slurp(n0.err), *e1 = alone ? t_slurp(n1b.err) : "";
    /* Node 0's launcher lines: shown when the test fails (or with T_VERBOSE=1). */
    fprintf(stderr, "elastic: node 0's launcher lines:\n%s", e0);
    if (!alone) return;
    CHECKF(s0 == 0 && s1 == 0, "exit %d / %d:\n%s\n---\n%s", s0, s1, e0, e1);
    CHECKF(strstr(e0, "node 0: node 1 (") && strstr(e0, "is lost (control connection closed)"), "%s", e0);
    CHECKF(strstr(e0, "node 0: node 1 (") && strstr(e0, "joined; the job grows at its next restart point"), "%s", e0);
    CHECKF(strstr(e0, "round 2: 2 node(s), ranks 0..1 of 4, resuming from "), "%s", e0);
    CHECKF(strstr(e1, "node 1: round 2: 2 node(s), ranks 2..3 of 4, resuming from "), "%s", e1);
    CHECKF(strstr(t_slurp(n0.out), "stopping at this restart point") || strstr(e0, "stopped at a restart point"),
           "%s", e0);
    snprintf(cmd, sizeof cmd, "cmp -s %s %s", full, el);
    CHECKF(system(cmd) == 0, "the elastic run's checkpoint differs from the uninterrupted one's");
}

/* t-launch_child wait on 3 nodes of --nnodes 2:3: losing one leaves 2 (the job goes
 * on), losing another leaves 1 < 2 (stopped, saying so). A node missing at the start
 * of a 1:2 job is named after DDPRT_ELASTIC_WAIT and the job runs without it. */
PTEST(elastic_names_missing_and_lost_nodes_and_keeps_min)
{
    t_clean_env();
    const char *wait[] = {t_prog("t-launch_child"), "wait", NULL};
    char *env[] = {"DDPRT_ELASTIC_WAIT=1", "DDPRT_LAUNCH_GRACE=2", NULL};
    t_proc p[3];
    int port = t_free_port();
    for (int n = 2; n >= 0; n--) node(&p[n], n, "2:3", "1", port, NULL, wait, env);
    for (int n = 0; n < 3; n++) CHECKF(wait_for(p[n].out, "ready", 60), "node %d: %s", n, t_slurp(p[n].err));
    kill(-p[2].pid, SIGKILL);
    CHECKF(wait_for(p[0].err, "round 1: 2 node(s)", 120), "%s", t_slurp(p[0].err));
    CHECKF(wait_for(p[1].err, "round 1: 2 node(s)", 60), "%s", t_slurp(p[1].err));
    kill(-p[1].pid, SIGKILL);
    int s = t_wait(&p[0], 60);
    t_wait(&p[1], 5), t_wait(&p[2], 5);
    const char *e = t_slurp(p[0].err);
    CHECKF(s == 1 && strstr(e, "node 2 (") && strstr(e, "only 1 node(s) left (0), --nnodes 2:3 needs 2"), "%d: %s", s, e);

    const char *ok[] = {t_prog("t-launch_child"), "env", NULL};
    port = t_free_port();
    node(&p[0], 0, "1:2", "1", port, NULL, ok, env);
    s = t_wait(&p[0], 30);
    e = t_slurp(p[0].err);
    CHECKF(s == 0 && strstr(e, "node 0: node 1 did not join within 1 s; starting with 1 of 2 nodes (--nnodes 1:2)"),
           "%d: %s", s, e);
    CHECKF(strstr(t_slurp(p[0].out), "WORLD_SIZE=1"), "%s", t_slurp(p[0].out));
}
