/* TCP backend through the real rendezvous: the collectives matrix (t-tcp_coll matrix)
 * with 2, 3 and 4 processes started through ddprt-launch, env://, file:// and tcp://
 * (ranks started in varying orders), and a rank SIGKILLed mid-allreduce: every other
 * rank must exit non-zero within a bound, naming the killed rank and the operation. */
#include "test/t.h"
#include "test/t_proc.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAXW 4

/* Rank r's start position: order 0 = 0..W-1, 1 = reversed, 2 = odd ranks first. */
static int nth(int k, int world, int order)
{
    if (order == 1) return world - 1 - k;
    if (order == 2) { int odd = world / 2; return k < odd ? 2 * k + 1 : 2 * (k - odd); }
    return k;
}

/* id names the output files; rank/world -1 = from the environment. */
static void spawn_rank(t_proc *p, int id, const char *mode, const char *init, int rank, int world, char **env,
                       const char *extra1, const char *extra2)
{
    char rs[16], ws[16], name[64];
    snprintf(rs, sizeof rs, "%d", rank);
    snprintf(ws, sizeof ws, "%d", world);
    snprintf(name, sizeof name, "%s-%d", mode, id);
    char *argv[] = {(char *)t_prog("t-tcp_coll"), (char *)mode, (char *)init, rs, ws,
                    (char *)(extra1 ? extra1 : "-"), (char *)(extra2 ? extra2 : "-"), NULL};
    t_spawn(p, name, argv, env);
}

static void expect_ok(t_proc *p, int rank, int world, const char *how)
{
    int rc = t_wait(p, 60);
    char want[64];
    snprintf(want, sizeof want, "rank %d of %d ok", rank, world);
    const char *out = t_slurp(p->out);
    CHECKF(rc == 0 && strstr(out, want), "%s: rank %d of %d exited %d\nstdout: %s\nstderr: %s", how, rank,
           world, rc, out, t_slurp(p->err));
}

/* env:// (torchrun variables) with explicit per-rank environments. */
static void run_env(int world, int order)
{
    t_clean_env();
    t_proc p[MAXW];
    static char envs[MAXW][4][64];
    int port = t_free_port();
    for (int k = 0; k < world; k++) {
        int r = nth(k, world, order);
        snprintf(envs[r][0], 64, "MASTER_ADDR=127.0.0.1");
        snprintf(envs[r][1], 64, "MASTER_PORT=%d", port);
        snprintf(envs[r][2], 64, "RANK=%d", r);
        snprintf(envs[r][3], 64, "WORLD_SIZE=%d", world);
        char *env[] = {envs[r][0], envs[r][1], envs[r][2], envs[r][3], NULL};
        spawn_rank(&p[r], r, "matrix", "env://", -1, -1, env, NULL, NULL);
    }
    for (int r = 0; r < world; r++) expect_ok(&p[r], r, world, "env://");
}

static void run_url(const char *url, int world, int order)
{
    t_clean_env();
    t_proc p[MAXW];
    for (int k = 0; k < world; k++) {
        int r = nth(k, world, order);
        spawn_rank(&p[r], r, "matrix", url, r, world, NULL, "token=tcp-test", k == world - 1 ? "sleep_ms=200" : NULL);
    }
    for (int r = 0; r < world; r++) expect_ok(&p[r], r, world, url);
}

static void run_tcp_url(int world, int order)
{
    char url[64];
    snprintf(url, sizeof url, "tcp://127.0.0.1:%d", t_free_port());
    run_url(url, world, order);
}

static void run_file_url(int world, int order)
{
    char url[512];
    snprintf(url, sizeof url, "file://%s/rdzv-%d-%d", t_tmpdir(), world, order);
    run_url(url, world, order);
}

PTEST(tcp_matrix_env_2) { run_env(2, 1); }
PTEST(tcp_matrix_env_3) { run_env(3, 2); }
PTEST(tcp_matrix_tcp_init_3) { run_tcp_url(3, 1); }
PTEST(tcp_matrix_tcp_init_4) { run_tcp_url(4, 2); }
PTEST(tcp_matrix_file_init_2) { run_file_url(2, 0); }
PTEST(tcp_matrix_file_init_4) { run_file_url(4, 1); }

/* run_env with the NAME=VALUE settings of vars (space-separated) in the environment. */
static void run_env_with(const char *vars, int world, int order)
{
    t_setenv_list(vars);
    run_env(world, order);
}

/* Over TCP on 127.0.0.1 instead of the same-machine unix sockets. */
PTEST(tcp_matrix_env_4_loopback_tcp) { run_env_with("DDPRT_TCP_LOCAL=tcp", 4, 0); }
PTEST(tcp_matrix_ring_only_3) { run_env_with("DDPRT_ALGO=ring", 3, 0); }
PTEST(tcp_matrix_rd_only_3) { run_env_with("DDPRT_ALGO=rd", 3, 1); }
/* Several sockets per peer (large messages striped over them), over real TCP. */
PTEST(tcp_matrix_nsocks_3) { run_env_with("DDPRT_TCP_NSOCKS=3 DDPRT_TCP_LOCAL=tcp", 3, 1); }
PTEST(tcp_matrix_nsocks_2_unix_4) { run_env_with("DDPRT_TCP_NSOCKS=2", 4, 2); }

/* Ranks that disagree on DDPRT_TCP_NSOCKS: both fail at setup, saying so. */
PTEST(tcp_nsocks_differ_is_a_clear_error)
{
    t_clean_env();
    t_proc p[2];
    char url[64];
    static char e0[] = "DDPRT_TCP_NSOCKS=2", e1[] = "DDPRT_TCP_NSOCKS=1";
    char *env0[] = {e0, NULL}, *env1[] = {e1, NULL};
    snprintf(url, sizeof url, "tcp://127.0.0.1:%d", t_free_port());
    spawn_rank(&p[0], 0, "matrix", url, 0, 2, env0, "timeout=20", NULL);
    spawn_rank(&p[1], 1, "matrix", url, 1, 2, env1, "timeout=20", NULL);
    for (int r = 0; r < 2; r++) {
        int rc = t_wait(&p[r], 40);
        const char *err = t_slurp(p[r].err);
        CHECKF(rc == 3 && strstr(err, "DDPRT_TCP_NSOCKS differs between the ranks"), "rank %d exited %d: %s", r,
               rc, err);
    }
}

static void run_launch(int world)
{
    char n[16];
    snprintf(n, sizeof n, "%d", world);
    char *argv[] = {(char *)t_prog("ddprt-launch"), "--nproc-per-node", n, "--", (char *)t_prog("t-tcp_coll"),
                    "matrix", "-", "-1", "-1", NULL};
    t_launch_ok(argv, NULL, world, "rank %d of %d ok", 90);
}

PTEST(tcp_matrix_launch_2) { run_launch(2); }
PTEST(tcp_matrix_launch_4) { run_launch(4); }

/* SIGKILL one rank mid-allreduce of a big buffer: every survivor exits 3 with an error
 * naming the op and the dead rank. Times are reported, and only loosely bounded. */
static void run_kill(int world, int victim)
{
    t_clean_env();
    t_proc p[MAXW];
    char url[64], vs[32];
    snprintf(url, sizeof url, "tcp://127.0.0.1:%d", t_free_port());
    snprintf(vs, sizeof vs, "victim=%d", victim);
    for (int r = 0; r < world; r++) spawn_rank(&p[r], r, "kill", url, r, world, NULL, vs, "timeout=60");
    int rc[MAXW];
    for (int r = 0; r < world; r++) rc[r] = t_wait(&p[r], 45);
    CHECKF(rc[victim] == 128 + 9, "victim exited %d: %s", rc[victim], t_slurp(p[victim].err));
    double tk = 0;
    CHECK(sscanf(t_slurp(p[victim].out), "killed at %lf", &tk) == 1);
    char want[32];
    snprintf(want, sizeof want, "rank %d", victim);
    for (int r = 0; r < world; r++) {
        if (r == victim) continue;
        const char *out = t_slurp(p[r].out);
        double tf = 0;
        int n = sscanf(out, "failed at %lf", &tf);
        CHECKF(rc[r] == 3 && n == 1, "rank %d exited %d\nstdout: %s\nstderr: %s", r, rc[r], out,
               t_slurp(p[r].err));
        CHECKF(strstr(out, "allreduce") && strstr(out, want), "rank %d's error does not name the op and %s: %s",
               r, want, out);
        CHECKF(tf - tk < 30, "rank %d failed %.1f s after the kill", r, tf - tk);
        printf("  world %d, rank %d killed: rank %d failed %.3f s later: %s", world, victim, r, tf - tk,
               strchr(out, ':') ? strchr(out, ':') + 2 : out);
    }
}

PTEST(tcp_kill_one_rank_2) { run_kill(2, 1); }
PTEST(tcp_kill_one_rank_3) { run_kill(3, 1); }
PTEST(tcp_kill_one_rank_4) { run_kill(4, 2); }

PTEST(tcp_kill_one_rank_nsocks_3)
{
    setenv("DDPRT_TCP_NSOCKS", "3", 1);
    setenv("DDPRT_TCP_LOCAL", "tcp", 1);
    run_kill(3, 1);
}

/* ddprt-bench end to end: every data row starts with the size and has #wrong 0. */
static void bench_ok(const char *coll, const char *nproc, const char *backend)
{
    t_clean_env();
    t_proc p;
    char *lb[] = {(char *)t_prog("ddprt-bench"), (char *)coll, "-b", "4", "-e", "1M", "-f", "8", "-n", "2",
                  "-w", "1", "--backend", "loopback", "--world-size", (char *)nproc, NULL};
    char *tc[] = {(char *)t_prog("ddprt-launch"), "--nproc-per-node", (char *)nproc, "--no-prefix", "--",
                  (char *)t_prog("ddprt-bench"), (char *)coll, "-b", "4", "-e", "1M", "-f", "8", "-n", "2", "-w",
                  "1", NULL};
    t_spawn(&p, coll, strcmp(backend, "loopback") ? tc : lb, NULL);
    int rc = t_wait(&p, 60);
    const char *out = t_slurp(p.out);
    CHECKF(rc == 0, "%s %s: exit %d\n%s\n%s", coll, backend, rc, out, t_slurp(p.err));
    int rows = 0;
    for (const char *l = out; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
        unsigned long long size, count;
        char type[16], op[16];
        int iters;
        double t, alg, bus;
        long long wrong;
        if (*l == '#') continue;
        if (sscanf(l, "%llu %llu %15s %15s %d %lf %lf %lf %lld", &size, &count, type, op, &iters, &t, &alg, &bus,
                   &wrong) != 9)
            continue;
        rows++;
        CHECKF(wrong == 0, "%s %s: wrong results: %.80s", coll, backend, l);
    }
    CHECKF(rows == 7, "%s %s: %d data rows in:\n%s", coll, backend, rows, out);
    CHECKF(strstr(out, "# ddprt-bench ") && strstr(out, "busbw"), "%s", out);
}

PTEST(tcp_bench_allreduce_2) { bench_ok("allreduce", "2", "tcp"); }
PTEST(tcp_bench_collectives_3)
{
    bench_ok("reduce_scatter", "3", "tcp");
    bench_ok("allgather", "3", "tcp");
    bench_ok("broadcast", "3", "tcp");
}
PTEST(tcp_bench_loopback_3) { bench_ok("allreduce", "3", "loopback"); }
