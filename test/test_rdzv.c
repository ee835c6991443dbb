/* Rendezvous: hostlists, launcher environments, the wire format, and real multi-process
 * jobs over tcp://, env:// and file:// including the ways they go wrong. */
#include "test/t.h"
#include "test/t_proc.h"
#include "ports/posix/port.h"
#include "ports/posix/port_sock.h"
#include "rt/rdzv_int.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- hostlists ---- */
typedef struct { char buf[1024]; } joined;
static int join_host(const char *h, void *ctx)
{
    joined *j = ctx;
    size_t n = strlen(j->buf);
    snprintf(j->buf + n, sizeof j->buf - n, "%s%s", n ? " " : "", h);
    return 0;
}
static const char *expand(const char *list)
{
    static joined j;
    j.buf[0] = 0;
    if (rt_hostlist_each(list, join_host, &j) < 0) return "ERROR";
    return j.buf;
}

PTEST(rdzv_hostlist_expands_slurm_lists)
{
    CHECK(!strcmp(expand("node[01-04,07]"), "node01 node02 node03 node04 node07"));
    CHECK(!strcmp(expand("a[1-2],b3"), "a1 a2 b3"));
    CHECK(!strcmp(expand("n[8-10]"), "n8 n9 n10"));
    CHECK(!strcmp(expand("r[1-2]n[03-04]"), "r1n03 r1n04 r2n03 r2n04"));
    CHECK(!strcmp(expand("gpu-[009-011]-ib,login"), "gpu-009-ib gpu-010-ib gpu-011-ib login"));
    CHECK(!strcmp(expand("single"), "single"));
    const char *bad[] = {"", "n[1-", "n[a-b]", "n]", "a,,b", "n[3-1]", "n[1,]", "a,", "n[[1]]", NULL};
    for (int i = 0; bad[i]; i++) CHECKF(!strcmp(expand(bad[i]), "ERROR"), "'%s' -> %s", bad[i], expand(bad[i]));
    char first[64];
    CHECK(rt_hostlist_first("gpu[07-08,11],cpu1", first, sizeof first) == 0 && !strcmp(first, "gpu07"));
    /* Bounded work: make fuzz found products of ranges ("[4-66]x[4-166]x...") that took
     * seconds to minutes; more hosts than ranks a job can have is an error. */
    CHECK(rt_hostlist_each("n[0-65535]", NULL, NULL) == RT_HOSTLIST_MAX);
    CHECK(rt_hostlist_each("n[0-65535],x", NULL, NULL) == -1);
    CHECK(rt_hostlist_each("a[4-66]b[4-166]c[4-166]d[0-9]", NULL, NULL) == -1);
}

/* ---- environments ---- */
static const rt_rdzv_opts NOOPTS = {NULL, -1, -1, -1, 0, NULL, 0};

/* t_clean_env, then the space-separated NAME=VALUE assignments of vars. */
static void clean_env(const char *vars)
{
    t_clean_env();
    t_setenv_list(vars);
}

PTEST(rdzv_env_torchrun)
{
    clean_env("RANK=2 WORLD_SIZE=4 LOCAL_RANK=1 MASTER_ADDR=10.0.0.1 MASTER_PORT=23456");
    rt_rdzv_plan p;
    char err[512];
    CHECKF(rt_rdzv_resolve(&NOOPTS, &p, err, sizeof err) == 0, "%s", err);
    CHECK(p.kind == RT_RDZV_TCP && p.rank == 2 && p.world == 4 && p.local_rank == 1 && p.port == 23456);
    CHECK(!strcmp(p.host, "10.0.0.1") && !strcmp(p.where, "tcp://10.0.0.1:23456") && p.token[0] == 0);
    CHECK_NEAR(p.timeout_s, 300, 0);
    setenv("DDPRT_TIMEOUT", "7.5", 1);
    setenv("DDPRT_JOB_TOKEN", "abc", 1);
    rt_rdzv_opts o = NOOPTS;
    o.init_method = "env://";
    CHECKF(rt_rdzv_resolve(&o, &p, err, sizeof err) == 0, "%s", err);
    CHECK_NEAR(p.timeout_s, 7.5, 0);
    CHECK(!strcmp(p.token, "abc") && !strcmp(p.source, "env://"));
    unsetenv("MASTER_PORT");
    CHECK(rt_rdzv_resolve(&o, &p, err, sizeof err) == -1 && strstr(err, "MASTER_PORT"));
}

/* Issue 41: a local rank outside the node's ranks is refused naming both variables. */
PTEST(rdzv_env_local_rank_outside_the_node_refused)
{
    clean_env("RANK=1 WORLD_SIZE=4 LOCAL_RANK=7 LOCAL_WORLD_SIZE=2 MASTER_ADDR=10.0.0.1 MASTER_PORT=23456");
    rt_rdzv_plan p;
    char err[512];
    CHECK(rt_rdzv_resolve(&NOOPTS, &p, err, sizeof err) == -1);
    CHECKF(strstr(err, "LOCAL_RANK 7 is out of range for LOCAL_WORLD_SIZE=2 (local ranks are 0..1)"), "%s", err);
    setenv("LOCAL_WORLD_SIZE", "0", 1);
    CHECK(rt_rdzv_resolve(&NOOPTS, &p, err, sizeof err) == -1);
    CHECKF(strstr(err, "LOCAL_WORLD_SIZE=0: a node runs at least one rank"), "%s", err);
    setenv("LOCAL_WORLD_SIZE", "8", 1);
    CHECKF(rt_rdzv_resolve(&NOOPTS, &p, err, sizeof err) == 0 && p.local_rank == 7, "%s", err);
    clean_env("OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_LOCAL_RANK=3 OMPI_COMM_WORLD_LOCAL_SIZE=2");
    CHECK(rt_rdzv_resolve(&NOOPTS, &p, err, sizeof err) == -1);
    CHECKF(strstr(err, "OMPI_COMM_WORLD_LOCAL_RANK 3 is out of range for OMPI_COMM_WORLD_LOCAL_SIZE=2"), "%s", err);
}

PTEST(rdzv_env_slurm)
{
    clean_env("SLURM_PROCID=3 SLURM_NTASKS=8 SLURM_LOCALID=1 SLURM_JOB_NODELIST=gpu[07-08,11] SLURM_JOB_ID=123456");
    rt_rdzv_plan p;
    char err[512];
    CHECKF(rt_rdzv_resolve(&NOOPTS, &p, err, sizeof err) == 0, "%s", err);
    CHECK(p.kind == RT_RDZV_TCP && p.rank == 3 && p.world == 8 && p.local_rank == 1);
    CHECK(!strcmp(p.host, "gpu07") && p.port == 20000 + 123456 % 12768);
    CHECK(!strcmp(p.token, "slurm-job-123456") && !strcmp(p.source, "Slurm"));
    setenv("MASTER_PORT", "1234", 1);
    unsetenv("SLURM_NTASKS");
    setenv("SLURM_NPROCS", "8", 1); /* older Slurm */
    CHECKF(rt_rdzv_resolve(&NOOPTS, &p, err, sizeof err) == 0, "%s", err);
    CHECK(p.port == 1234 && p.world == 8);
    setenv("SLURM_PROCID", "9", 1);
    CHECK(rt_rdzv_resolve(&NOOPTS, &p, err, sizeof err) == -1);
    CHECKF(strstr(err, "rank 9 is out of range for world size 8"), "%s", err);
}

PTEST(rdzv_env_open_mpi_and_pmi)
{
    clean_env("OMPI_COMM_WORLD_RANK=1 OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_LOCAL_RANK=1");
    rt_rdzv_plan p;
    char err[512];
    CHECK(rt_rdzv_resolve(&NOOPTS, &p, err, sizeof err) == -1);
    CHECKF(strstr(err, "Open MPI") && strstr(err, "MASTER_ADDR") && strstr(err, "mpirun -x"), "%s", err);
    setenv("MASTER_ADDR", "host0", 1), setenv("MASTER_PORT", "29500", 1);
    CHECKF(rt_rdzv_resolve(&NOOPTS, &p, err, sizeof err) == 0, "%s", err);
    CHECK(p.rank == 1 && p.world == 2 && p.local_rank == 1 && !strcmp(p.host, "host0") && p.port == 29500);
    /* Plain mpirun on one node: 127.0.0.1, port and token from the job id. */
    clean_env("OMPI_COMM_WORLD_RANK=1 OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_LOCAL_SIZE=2 OMPI_MCA_ess_base_jobid=1397096449");
    CHECKF(rt_rdzv_resolve(&NOOPTS, &p, err, sizeof err) == 0, "%s", err);
    CHECK(!strcmp(p.host, "127.0.0.1") && p.port >= 20000 && p.port < 32768 && !strcmp(p.source, "Open MPI"));
    CHECKF(!strcmp(p.token, "ompi-job-1397096449"), "%s", p.token);
    int port1 = p.port;
    setenv("OMPI_MCA_ess_base_jobid", "1397096450", 1); /* the next mpirun */
    CHECKF(rt_rdzv_resolve(&NOOPTS, &p, err, sizeof err) == 0, "%s", err);
    CHECK(p.port != port1 && !strcmp(p.token, "ompi-job-1397096450"));
    unsetenv("OMPI_MCA_ess_base_jobid"); /* Open MPI 5: only the PMIx namespace */
    setenv("PMIX_NAMESPACE", "prterun-node01-4242@1", 1);
    CHECKF(rt_rdzv_resolve(&NOOPTS, &p, err, sizeof err) == 0, "%s", err);
    CHECK(p.port >= 20000 && p.port < 32768 && !strcmp(p.token, "ompi-job-prterun-node01-4242@1"));
    setenv("MASTER_PORT", "29555", 1), setenv("DDPRT_JOB_TOKEN", "mine", 1); /* the user's choice wins */
    CHECKF(rt_rdzv_resolve(&NOOPTS, &p, err, sizeof err) == 0, "%s", err);
    CHECK(p.port == 29555 && !strcmp(p.token, "mine") && !strcmp(p.host, "127.0.0.1"));
    unsetenv("MASTER_PORT"), unsetenv("PMIX_NAMESPACE");
    CHECK(rt_rdzv_resolve(&NOOPTS, &p, err, sizeof err) == -1);
    CHECKF(strstr(err, "MASTER_PORT") && strstr(err, "job id"), "%s", err);
    /* Across nodes rank 0's host is unknown: the clear message stays. */
    setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "1", 1), setenv("PMIX_NAMESPACE", "4242", 1);
    CHECK(rt_rdzv_resolve(&NOOPTS, &p, err, sizeof err) == -1);
    CHECKF(strstr(err, "not all on this node") && strstr(err, "MASTER_ADDR") && strstr(err, "mpirun -x"), "%s", err);
    setenv("MASTER_ADDR", "node01", 1);
    CHECKF(rt_rdzv_resolve(&NOOPTS, &p, err, sizeof err) == 0, "%s", err);
    CHECK(!strcmp(p.host, "node01") && p.port >= 20000 && p.port < 32768);
    clean_env("PMI_RANK=2 PMI_SIZE=3 MPI_LOCALRANKID=0 MASTER_ADDR=h MASTER_PORT=29501");
    CHECKF(rt_rdzv_resolve(&NOOPTS, &p, err, sizeof err) == 0, "%s", err);
    CHECK(p.rank == 2 && p.world == 3 && p.local_rank == 0 && !strcmp(p.source, "MPICH/PMI"));
}

PTEST(rdzv_env_explicit_options_win_and_errors)
{
    clean_env("RANK=2 WORLD_SIZE=4");
    rt_rdzv_opts o = {"tcp://127.0.0.1:5000", 1, 3, 0, 2.5, "tok", 0};
    rt_rdzv_plan p;
    char err[512];
    CHECKF(rt_rdzv_resolve(&o, &p, err, sizeof err) == 0, "%s", err);
    CHECK(p.rank == 1 && p.world == 3 && p.local_rank == 0 && p.timeout_s == 2.5 && !strcmp(p.token, "tok"));
    o.rank = o.world_size = -1;
    CHECKF(rt_rdzv_resolve(&o, &p, err, sizeof err) == 0, "%s", err); /* from RANK/WORLD_SIZE */
    CHECK(p.rank == 2 && p.world == 4);
    t_clean_env();
    const char *bad[] = {"udp://h:1", "tcp://host", "tcp://h:0", "tcp://h:99999", "tcp://:5", "file://", "file://rel",
                         "file:///dir/", NULL};
    o.rank = 0, o.world_size = 2;
    for (int i = 0; bad[i]; i++) {
        o.init_method = bad[i];
        CHECKF(rt_rdzv_resolve(&o, &p, err, sizeof err) == -1 && strstr(err, "bad init method"), "%s: %s", bad[i], err);
    }
    o.init_method = "tcp://h:5";
    o.rank = 5, o.world_size = 4;
    CHECK(rt_rdzv_resolve(&o, &p, err, sizeof err) == -1);
    CHECKF(strstr(err, "rank 5 is out of range for world size 4"), "%s", err);
    o.init_method = NULL, o.rank = 1, o.world_size = 2;
    CHECK(rt_rdzv_resolve(&o, &p, err, sizeof err) == -1 && strstr(err, "no init method"));
    setenv("DDPRT_TIMEOUT", "soon", 1);
    CHECK(rt_rdzv_resolve(&NOOPTS, &p, err, sizeof err) == -1 && strstr(err, "DDPRT_TIMEOUT"));
    unsetenv("DDPRT_TIMEOUT");
    setenv("RANK", "x", 1), setenv("WORLD_SIZE", "2", 1), setenv("MASTER_ADDR", "h", 1), setenv("MASTER_PORT", "1", 1);
    CHECK(rt_rdzv_resolve(&NOOPTS, &p, err, sizeof err) == -1 && strstr(err, "RANK=x"));
    t_clean_env();
    CHECKF(rt_rdzv_resolve(&NOOPTS, &p, err, sizeof err) == 0 && p.kind == RT_RDZV_SINGLE, "%s", err);
}

PTEST(rdzv_single_process_needs_no_network)
{
    t_clean_env();
    rt_rdzv *r;
    char err[512];
    CHECKF(rt_rdzv_open(&r, NULL, err, sizeof err) == 0, "%s", err);
    CHECK(rt_rdzv_rank(r) == 0 && rt_rdzv_world(r) == 1 && rt_rdzv_local_rank(r) == 0);
    int x = 42, y = 0;
    CHECK(rt_rdzv_allgather(r, &x, sizeof x, &y, err, sizeof err) == 0 && y == 42);
    CHECK(rt_rdzv_barrier(r, err, sizeof err) == 0);
    rt_rdzv_close(r);
}

/* ---- wire format ---- */
PTEST(rdzv_wire_roundtrip_and_bounds)
{
    uint8_t b[RT_RDZV_HDR + RT_RDZV_MAX_HELLO];
    rt_rdzv_hello h = {3, 4, -1, 77, 0x1122334455667788ull, 9, 10, "node07", 0xabcdef0123ull}, g;
    size_t n = rt_rdzv_put_hello(b, sizeof b, &h);
    const char *why;
    CHECK(n > 0 && rt_rdzv_parse_hello(b, n, &g, &why) == 0);
    CHECK(g.rank == 3 && g.world == 4 && g.local_rank == -1 && g.pid == 77 && g.token_hash == h.token_hash && g.host_id == h.host_id);
    CHECK(g.config_hash == 9 && g.gen == 10 && !strcmp(g.host, "node07"));
    CHECK(rt_rdzv_parse_hello(b, n - 1, &g, &why) == -1);
    b[49] = 0xff; /* hostname length beyond the message */
    CHECK(rt_rdzv_parse_hello(b, n, &g, &why) == -1);
    rt_rdzv_hdr hd;
    rt_rdzv_put_hdr(b, RZ_HELLO, 40, 5);
    CHECK(rt_rdzv_parse_hdr(b, RT_RDZV_HDR, &hd, &why) == 0 && hd.len == 40 && hd.seq == 5);
    CHECK(rt_rdzv_parse_hdr(b, RT_RDZV_HDR - 1, &hd, &why) == -1);
    rt_rdzv_put_hdr(b, RZ_HELLO, RT_RDZV_MAX_HELLO + 1, 0);
    CHECK(rt_rdzv_parse_hdr(b, RT_RDZV_HDR, &hd, &why) == -1 && strstr(why, "length"));
    rt_rdzv_put_hdr(b, RZ_GATHER, RT_RDZV_MAX_MSG + 1, 0);
    CHECK(rt_rdzv_parse_hdr(b, RT_RDZV_HDR, &hd, &why) == -1);
    memcpy(b, "GET / HTTP/1.1\r\n", 16);
    CHECK(rt_rdzv_parse_hdr(b, RT_RDZV_HDR, &hd, &why) == -1 && strstr(why, "magic"));
    rt_rdzv_put_hdr(b, RZ_HELLO, 0, 0);
    b[4] = 9;
    CHECK(rt_rdzv_parse_hdr(b, RT_RDZV_HDR, &hd, &why) == -1 && strstr(why, "version"));
    uint32_t code;
    char text[16];
    n = rt_rdzv_put_text(b, sizeof b, 2, "a\nb\x01 long text");
    CHECK(rt_rdzv_parse_text(b, n, &code, text, sizeof text, &why) == 0 && code == 2 && !strcmp(text, "a?b? long text"));
    CHECK(rt_rdzv_token_hash_of("") == 0 && rt_rdzv_token_hash_of(NULL) == 0);
    CHECK(rt_rdzv_token_hash_of("a") != rt_rdzv_token_hash_of("b") && rt_rdzv_token_hash_of("a") != 0);
}

/* ---- real jobs ---- */
static t_proc P[8];
#define rank_proc(i, ...) t_rank_proc(&P[i], "p" #i, __VA_ARGS__)
#define expect_ok(i, world) t_rank_ok(&P[i], world)
static char URL[64];
/* A job of its own: a clean environment and a fresh tcp:// URL. */
static void new_job(void)
{
    t_clean_env();
    snprintf(URL, sizeof URL, "tcp://127.0.0.1:%d", t_free_port());
}

PTEST(rdzv_tcp_two_ranks)
{
    new_job();
    rank_proc(0, URL, 0, 2, "timeout=20", "token=t1", NULL);
    rank_proc(1, URL, 1, 2, "timeout=20", "token=t1", NULL);
    expect_ok(0, 2);
    expect_ok(1, 2);
    CHECK(strstr(t_slurp(P[1].out), "local 1 ok token yes")); /* same host: local rank derived */
    /* Both learn the address on the route to the meeting (the one peers can dial). */
    CHECK(strstr(t_slurp(P[0].out), "ip 127.0.0.1") && strstr(t_slurp(P[1].out), "ip 127.0.0.1"));
}

PTEST(rdzv_tcp_four_ranks_rank0_last)
{
    new_job();
    rank_proc(3, URL, 3, 4, "timeout=20", "len=1000", NULL);
    rank_proc(2, URL, 2, 4, "timeout=20", "len=1000", NULL);
    rank_proc(1, URL, 1, 4, "timeout=20", "len=1000", NULL);
    port_sleep_ns(300000000); /* the others are already retrying */
    rank_proc(0, URL, 0, 4, "timeout=20", "len=1000", NULL);
    for (int q = 0; q < 4; q++) t_rank_ok(&P[q], 4);
}

PTEST(rdzv_env_method_three_ranks)
{
    t_clean_env();
    char port[32];
    snprintf(port, sizeof port, "MASTER_PORT=%d", t_free_port());
    static char rk[3][32], lr[3][32];
    for (int q = 0; q < 3; q++) {
        snprintf(rk[q], sizeof rk[q], "RANK=%d", q);
        snprintf(lr[q], sizeof lr[q], "LOCAL_RANK=%d", q);
        char *env[] = {rk[q], lr[q], "WORLD_SIZE=3", "MASTER_ADDR=127.0.0.1", port, "DDPRT_TIMEOUT=20", NULL};
        t_rank_proc(&P[q], rk[q], "env://", -1, -1, "rounds=5", NULL, env);
    }
    for (int q = 0; q < 3; q++) t_rank_ok(&P[q], 3);
    CHECK(strstr(t_slurp(P[2].out), "rank 2 of 3 local 2"));
}

/* "Same host" is same machine and same network namespace: a process in a new network
 * namespace (a container on the same node) has another host id. */
TEST(rdzv_host_id_tells_network_namespaces_apart)
{
    uint64_t mine = port_host_id();
    CHECK(mine != 0 && mine == port_host_id());
    int fd[2];
    CHECK(pipe(fd) == 0);
    pid_t pid = fork();
    if (pid == 0) {
        uint64_t other = 0;
        if (unshare(CLONE_NEWNET) == 0) other = port_host_id();
        _exit(write(fd[1], &other, sizeof other) == (ssize_t)sizeof other ? 0 : 1);
    }
    uint64_t other = 1;
    CHECK(read(fd[0], &other, sizeof other) == (ssize_t)sizeof other);
    waitpid(pid, NULL, 0);
    close(fd[0]), close(fd[1]);
    /* 0: no permission to make a namespace here (not root): nothing to compare. */
    CHECK(other == 0 || (other != mine && other != 1));
}
