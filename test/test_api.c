/* The C API (include/ddprt.h) through t-api_rank: every collective, dtype and op at 1, 2
 * and 3 ranks; the torchrun variables with the master port already taken (as
 * torch.distributed's store takes it); a SIGKILLed rank and a late rank turn into
 * errors naming the rank, returned to the caller (the library never exits). */
#include "test/t.h"
#include "test/t_proc.h"
#include "ports/posix/port_sock.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAXW 3

static void launch_check(int world, int taken_port)
{
    char n[16], port[16];
    snprintf(n, sizeof n, "%d", world);
    snprintf(port, sizeof port, "%d", taken_port);
    char *argv[] = {(char *)t_prog("ddprt-launch"), "--nproc-per-node", n, "--master-port", port, "--",
                    (char *)t_prog("t-api_rank"), "check", NULL};
    if (!taken_port) memmove(&argv[3], &argv[5], 4 * sizeof *argv);
    t_launch_ok(argv, NULL, world, "rank %d of %d ok", 120);
}

PTEST(api_collectives_one_process)
{
    t_clean_env();
    char *argv[] = {(char *)t_prog("t-api_rank"), "check", NULL};
    t_proc p;
    t_spawn(&p, "one", argv, NULL);
    int rc = t_wait(&p, 30);
    CHECKF(rc == 0 && strstr(t_slurp(p.out), "rank 0 of 1 ok"), "exit %d: %s%s", rc, t_slurp(p.out),
           t_slurp(p.err));
}

PTEST(api_collectives_2_ranks) { launch_check(2, 0); }

/* Over a transport: a request in flight and a registered block alive at finalize. */
PTEST(api_after_finalize_2_ranks_errors_and_a_live_block)
{
    t_clean_env();
    char *argv[] = {(char *)t_prog("ddprt-launch"), "--nproc-per-node", "2", "--", (char *)t_prog("t-api_rank"),
                    "after", NULL};
    t_launch_ok(argv, NULL, 2, "rank %d of %d after ok", 120);
}

/* MASTER_PORT held by someone else for the whole job (torch.distributed's TCPStore
 * under torchrun): ddprt meets on the port + 2 and never touches it. */
PTEST(api_collectives_3_ranks_beside_a_store_on_the_master_port)
{
    char err[200];
    int port = 0, fd = -1;
    for (int i = 0; i < 20 && fd < 0; i++) {
        port = t_free_port();
        fd = port_sock_listen("0.0.0.0", port, 16, err, sizeof err);
    }
    CHECKF(fd >= 0, "cannot hold a port: %s", err);
    launch_check(3, port);
    port_sock_close(fd);
}

/* Ranks started directly with torchrun's variables (per-rank exit codes). */
/* warn: DDPRT_STALL_WARN (short, for the late rank; a kill must not look like a stall). */
static void spawn_env(t_proc *p, int world, int port, const char *mode, const char *a1, const char *a2,
                      const char *warn)
{
    static char envs[MAXW][5][64];
    for (int r = 0; r < world; r++) {
        snprintf(envs[r][0], 64, "MASTER_ADDR=127.0.0.1");
        snprintf(envs[r][1], 64, "MASTER_PORT=%d", port);
        snprintf(envs[r][2], 64, "RANK=%d", r);
        snprintf(envs[r][3], 64, "WORLD_SIZE=%d", world);
        snprintf(envs[r][4], 64, "DDPRT_STALL_WARN=%s", warn);
        char *env[] = {envs[r][0], envs[r][1], envs[r][2], envs[r][3], envs[r][4], NULL};
        char name[32];
        snprintf(name, sizeof name, "%s-%d", mode, r);
        char *argv[] = {(char *)t_prog("t-api_rank"), (char *)mode, (char *)a1, (char *)a2, NULL};
        t_spawn(&p[r], name, argv, env);
    }
}

/* victim: the rank that SIGKILLs itself; async: the others poll with ddprt_test, whose
 * failure must come with done set and the request released. */
static void killed(int victim, const char *async)
{
    t_clean_env();
    t_proc p[MAXW];
    char v[32];
    snprintf(v, sizeof v, "victim=%d", victim);
    spawn_env(p, 3, t_free_port(), "kill", v, async, "10");
    int rc[MAXW];
    for (int r = 0; r < 3; r++) rc[r] = t_wait(&p[r], 60);
    CHECKF(rc[victim] == 128 + 9, "victim exited %d: %s", rc[victim], t_slurp(p[victim].err));
    char who[16];
    snprintf(who, sizeof who, "rank %d", victim);
    for (int r = 0; r < 3; r++) {
        if (r == victim) continue;
        const char *out = t_slurp(p[r].out);
        double t = 99;
        CHECKF(rc[r] == 3 && sscanf(out, "failed after %lf", &t) == 1, "rank %d exited %d: %s%s", r, rc[r], out,
               t_slurp(p[r].err));
        CHECKF(strstr(out, who) && t < 25, "rank %d: %s", r, out);
        if (strcmp(async, "timeout=30")) CHECKF(strstr(out, "(test: done, released)"), "rank %d: %s", r, out);
    }
}

PTEST(api_sigkilled_rank_is_an_error_naming_it) { killed(1, "timeout=30"); }
PTEST(api_sigkilled_rank_fails_ddprt_test_with_done_set) { killed(2, "async=1"); }

/* Rank 0 computes (sleeps) past the others' deadline: they fail naming it, and rank 0
 * gets the failure from its next op instead of the process ending (the programs' stall
 * watch would _exit it). */
PTEST(api_late_rank_gets_an_error_not_an_exit)
{
    t_clean_env();
    t_proc p[2];
    spawn_env(p, 2, t_free_port(), "late", "timeout=2", "sleep=6", "1");
    int rc0 = t_wait(&p[0], 60), rc1 = t_wait(&p[1], 60);
    const char *out0 = t_slurp(p[0].out), *out1 = t_slurp(p[1].out);
    CHECKF(rc1 == 3 && strstr(out1, "rank 1 failed") && strstr(out1, "rank 0"), "rank 1 exited %d: %s%s", rc1, out1,
           t_slurp(p[1].err));
    CHECKF(rc0 == 3 && strstr(out0, "rank 0 failed:"), "rank 0 exited %d: %s%s", rc0, out0, t_slurp(p[0].err));
}

PTEST(api_init_errors_are_returned)
{
    t_clean_env();
    static const char *const cases[][2] = {
        {"init=tcp://nohost", "bad init method 'tcp://nohost'"},
        {"init=file://relative", "file:///absolute"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char *argv[] = {(char *)t_prog("t-api_rank"), "check", (char *)cases[i][0], NULL};
        t_proc p;
        t_spawn(&p, "init", argv, NULL);
        int rc = t_wait(&p, 20);
        const char *out = t_slurp(p.out);
        CHECKF(rc == 3 && strstr(out, "init failed: ddprt_init: rendezvous:") && strstr(out, cases[i][1]),
               "%s: exit %d: %s%s", cases[i][0], rc, out, t_slurp(p.err));
        CHECKF(!*t_slurp(p.err), "%s: the library printed: %s", cases[i][0], t_slurp(p.err));
    }
}
