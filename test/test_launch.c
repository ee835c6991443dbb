/* ddprt-launch: environment, output prefixes, failure propagation, signal forwarding,
 * flag errors, and a real rendezvous job under the launcher. */
#include "test/t.h"
#include "test/t_proc.h"
#include "ports/posix/port.h"
#include <signal.h>
#include <stdio.h>
#include <string.h>

static t_proc L;

/* Runs ddprt-launch with args (NULL-terminated) and env additions; returns its status. */
static void start(const char *const *args, char *const *env)
{
    char *argv[32];
    int n = 0;
    argv[n++] = (char *)t_prog("ddprt-launch");
    for (int i = 0; args[i] && n < 31; i++) argv[n++] = (char *)args[i];
    argv[n] = NULL;
    t_spawn(&L, "launch", argv, env);
}

static int run(const char *const *args, char *const *env)
{
    start(args, env);
    return t_wait(&L, 30);
}

/* Waits until the launcher's stdout holds every string in want (or 10 s pass). */
static int wait_output(const char *a, const char *b)
{
    for (int i = 0; i < 1000; i++) {
        const char *o = t_slurp(L.out);
        if (strstr(o, a) && strstr(o, b)) return 1;
        port_sleep_ns(10000000);
    }
    return 0;
}

PTEST(launch_sets_torchrun_env_and_prefixes_lines)
{
    t_clean_env();
    const char *args[] = {"--nproc-per-node", "2", "--", t_prog("t-launch_child"), "env", NULL};
    CHECK(run(args, NULL) == 0);
    const char *o = t_slurp(L.out), *e = t_slurp(L.err);
    CHECKF(strstr(o, "[rank 0] RANK=0 LOCAL_RANK=0 WORLD_SIZE=2 LOCAL_WORLD_SIZE=2 GROUP_RANK=0 MASTER_ADDR=127.0.0.1 "
                     "MASTER_PORT="), "%s", o);
    CHECKF(strstr(o, "[rank 1] RANK=1 LOCAL_RANK=1 WORLD_SIZE=2"), "%s", o);
    CHECKF(strstr(o, "TOKEN=set\n") && strstr(o, "[rank 1] no newline at the end\n"), "%s", o);
    CHECKF(strstr(e, "[rank 0] to stderr from 0\n") && strstr(e, "[rank 1] to stderr from 1\n"), "%s", e);
    /* Both ranks were told the same (free) port. */
    const char *p0 = strstr(o, "MASTER_PORT="), *p1 = p0 ? strstr(p0 + 1, "MASTER_PORT=") : NULL;
    CHECK(p0 && p1 && strncmp(p0, p1, 17) == 0);
}

PTEST(launch_multi_node_env_without_prefix)
{
    t_clean_env();
    const char *args[] = {"--nnodes=2", "--node_rank", "1", "--master-addr", "10.1.2.3", "--master-port", "23456",
                          "--nproc-per-node", "2", "--no-prefix", t_prog("t-launch_child"), "env", NULL};
    CHECK(run(args, NULL) == 0);
    const char *o = t_slurp(L.out);
    CHECKF(strstr(o, "RANK=2 LOCAL_RANK=0 WORLD_SIZE=4 LOCAL_WORLD_SIZE=2 GROUP_RANK=1 MASTER_ADDR=10.1.2.3 "
                     "MASTER_PORT=23456 TOKEN=unset"), "%s", o);
    CHECKF(strstr(o, "RANK=3 LOCAL_RANK=1 WORLD_SIZE=4") && !strstr(o, "[rank"), "%s", o);
}

PTEST(launch_failing_rank_stops_the_others)
{
    t_clean_env();
    const char *args[] = {"--nproc-per-node", "3", "--", t_prog("t-launch_child"), "fail", "1", "7", NULL};
    CHECK(run(args, NULL) == 7);
    const char *o = t_slurp(L.out), *e = t_slurp(L.err);
    CHECKF(strstr(o, "[rank 1] rank 1 failing") && strstr(o, "[rank 0] rank 0 got SIGTERM") &&
           strstr(o, "[rank 2] rank 2 got SIGTERM"), "%s", o);
    CHECKF(strstr(e, "ddprt-launch: rank 1 (pid ") && strstr(e, "exited with status 7; stopping the other ranks"),
           "%s", e);
}

PTEST(launch_killed_rank_exits_128_plus_signal)
{
    t_clean_env();
    const char *args[] = {"--nproc-per-node", "2", "--", t_prog("t-launch_child"), "kill", "0", NULL};
    CHECK(run(args, NULL) == 128 + SIGKILL);
    CHECKF(strstr(t_slurp(L.err), "rank 0 (pid ") && strstr(t_slurp(L.err), "was killed by signal 9"), "%s",
           t_slurp(L.err));
    CHECKF(strstr(t_slurp(L.out), "[rank 1] rank 1 got SIGTERM"), "%s", t_slurp(L.out));
}

PTEST(launch_forwards_sigterm)
{
    t_clean_env();
    const char *args[] = {"--nproc-per-node", "2", "--", t_prog("t-launch_child"), "wait", NULL};
    start(args, NULL);
    CHECK(wait_output("[rank 0] ready", "[rank 1] ready"));
    kill(L.pid, SIGTERM);
    CHECK(t_wait(&L, 20) == 128 + SIGTERM);
    const char *o = t_slurp(L.out);
    CHECKF(strstr(o, "[rank 0] rank 0 got SIGTERM") && strstr(o, "[rank 1] rank 1 got SIGTERM"), "%s", o);
}

PTEST(launch_escalates_to_sigkill_after_grace)
{
    t_clean_env();
    const char *args[] = {"--nproc-per-node", "2", "--", t_prog("t-launch_child"), "stubborn", NULL};
    char *env[] = {"DDPRT_LAUNCH_GRACE=0.5", NULL};
    start(args, env);
    CHECK(wait_output("[rank 0] ready", "[rank 1] ready"));
    kill(L.pid, SIGINT);
    CHECK(t_wait(&L, 20) == 128 + SIGINT);
    CHECKF(strstr(t_slurp(L.err), "ddprt-launch: rank 1 did not exit 0.5 s after being told to stop; killing it"), "%s",
           t_slurp(L.err));
}

PTEST(launch_rejects_bad_flags)
{
    t_clean_env();
    static const struct { const char *args[10]; int status; const char *msg; } cases[] = {
        {{"--nproc-per-node", "0", "--", "x"}, 2, "--nproc-per-node needs an integer in range, got '0'"},
        {{"--nproc-per-node", "two", "--", "x"}, 2, "got 'two'"},
        {{"--bogus", "--", "x"}, 2, "unknown flag '--bogus'"},
        {{"--nproc-per-node", "2"}, 2, "no program given"},
        {{"--nproc-per-node"}, 2, "--nproc-per-node needs a value"},
        {{"--", "x"}, 2, "--nproc-per-node N is required"},
        {{"--nnodes", "2", "--node-rank", "2", "--nproc-per-node", "1", "--", "x"}, 2,
         "--node-rank 2 is out of range for --nnodes 2"},
        {{"--nproc-per-node", "1", "--", "/nonexistent/prog"}, 127, "cannot run '/nonexistent/prog'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int st = run(cases[i].args, NULL);
        const char *e = t_slurp(L.err);
        CHECKF(st == cases[i].status && strstr(e, cases[i].msg), "case %zu: status %d: %s", i, st, e);
    }
}

PTEST(launch_runs_a_rendezvous_job)
{
    t_clean_env();
    const char *args[] = {"--nproc-per-node", "3", "--", t_prog("t-rdzv_rank"), "-", "-1", "-1", "timeout=20", NULL};
    int st = run(args, NULL);
    const char *o = t_slurp(L.out);
    CHECKF(st == 0, "status %d: %s %s", st, o, t_slurp(L.err));
    CHECKF(strstr(o, "[rank 0] rank 0 of 3 local 0 ok token yes") && strstr(o, "[rank 2] rank 2 of 3 local 2 ok token yes"),
           "%s", o);
}
