/* Rendezvous when things go wrong: strangers, garbage, stalls, busy ports, duplicate or
 * out-of-range ranks, a master that never comes, ranks that die after meeting, ranks
 * that disagree. Also file:// with a stale file. Every case must end in a clear line,
 * never a hang, and must not disturb a job that is otherwise fine. */
#include "test/t.h"
#include "test/t_proc.h"
#include "ports/posix/port.h"
#include "ports/posix/port_sock.h"
#include "rt/rdzv_int.h"
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static t_proc P[8];
static char URL[64];
static int PORT;
/* A job of its own: a clean environment and a fresh tcp:// URL (rank 0 at PORT). */
static void new_job(void)
{
    t_clean_env();
    PORT = t_free_port();
    snprintf(URL, sizeof URL, "tcp://127.0.0.1:%d", PORT);
}
#define rank_proc(i, ...) t_rank_proc(&P[i], "p" #i, __VA_ARGS__)

/* Exit status of a process expected to fail, and its stderr. */
static const char *expect_fail(int i)
{
    int st = t_wait(&P[i], 20);
    CHECKF(st == 3, "process %d: status %d (expected the rendezvous error exit 3): %s", i, st, t_slurp(P[i].err));
    return t_slurp(P[i].err);
}

/* Connects to the test's rank 0 (retrying while it starts up). */
static int connect_master(void)
{
    char e[256];
    int64_t deadline = port_now_ns() + 10000000000LL;
    for (;;) {
        int fd = port_sock_connect("127.0.0.1", PORT, deadline, e, sizeof e);
        if (fd >= 0 || port_now_ns() > deadline) return fd;
        port_sleep_ns(20000000);
    }
}

/* Connects to rank 0 and sends the first 7 bytes of a hello header (announcing 60
 * bytes of body), then leaves the connection stalled there. */
static int half_hello(void)
{
    int fd = connect_master();
    uint8_t h[RT_RDZV_HDR];
    rt_rdzv_put_hdr(h, RZ_HELLO, 60, 0);
    CHECK(fd >= 0 && port_sock_write_full(fd, h, 7, port_now_ns() + 5000000000LL) == 0);
    return fd;
}

PTEST(rdzv_stranger_with_wrong_token_does_not_disturb_the_job)
{
    new_job();
    rank_proc(0, URL, 0, 2, "timeout=20", "token=job-a", NULL);
    rank_proc(1, URL, 1, 2, "timeout=10", "token=job-b", NULL); /* another job's rank 1 */
    const char *e = expect_fail(1);
    CHECKF(strstr(e, "refused this process: wrong job token"), "%s", e);
    rank_proc(2, URL, 1, 2, "timeout=20", "token=job-a", NULL); /* the real rank 1 */
    t_rank_ok(&P[0], 2);
    t_rank_ok(&P[2], 2);
    e = t_slurp(P[0].err);
    CHECKF(strstr(e, "rank 0: refused a connection from 127.0.0.1:") && strstr(e, "wrong job token"), "%s", e);
}

/* Rank 0 closes fd (its connection, refused) within secs; then rank 1 joins and the
 * job of two finishes. */
static void closed_then_job_ok(int fd, int secs)
{
    char b[64];
    CHECK(port_sock_read_full(fd, b, sizeof b, port_now_ns() + secs * 1000000000LL) == PORT_CLOSED);
    port_sock_close(fd);
    rank_proc(1, URL, 1, 2, "timeout=20", NULL, NULL);
    t_rank_ok(&P[0], 2);
    t_rank_ok(&P[1], 2);
}

PTEST(rdzv_garbage_bytes_are_refused)
{
    new_job();
    rank_proc(0, URL, 0, 2, "timeout=20", NULL, NULL);
    int fd = connect_master();
    CHECK(fd >= 0);
    const char *http = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    CHECK(port_sock_write_full(fd, http, strlen(http), port_now_ns() + 5000000000LL) == 0);
    closed_then_job_ok(fd, 10);
    CHECKF(strstr(t_slurp(P[0].err), "bad magic"), "%s", t_slurp(P[0].err));
}

PTEST(rdzv_stalled_connection_does_not_block_others)
{
    new_job();
    /* The stalled connection's own deadline (60 s) is longer than the test waits (20 s):
     * the job can only finish if rank 0 serves the real rank beside it. */
    char *env[] = {"DDPRT_RDZV_HELLO_TIMEOUT=60", NULL};
    rank_proc(0, URL, 0, 2, "timeout=30", NULL, env);
    int fd = half_hello();
    rank_proc(1, URL, 1, 2, "timeout=30", NULL, NULL);
    t_rank_ok(&P[0], 2);
    t_rank_ok(&P[1], 2);
    port_sock_close(fd);
}

PTEST(rdzv_half_header_is_dropped_at_its_deadline)
{
    new_job();
    char *env[] = {"DDPRT_RDZV_HELLO_TIMEOUT=1", NULL};
    rank_proc(0, URL, 0, 2, "timeout=20", NULL, env);
    int fd = half_hello();
    closed_then_job_ok(fd, 15);
    const char *e = t_slurp(P[0].err);
    CHECKF(strstr(e, "dropped a connection") && strstr(e, "sent only 7 of 16 hello bytes in 1 s"), "%s", e);
}

/* Sends a hand-made hello to rank 0 and returns its REJECT text ("" if none). */
static const char *raw_hello(int rank, int world, const char *token)
{
    static char text[RT_RDZV_MAX_TEXT + 1];
    text[0] = 0;
    int fd = connect_master();
    rt_rdzv_hello h = {rank, world, -1, 1, rt_rdzv_token_hash_of(token), 0, 0, "tester", 0};
    uint8_t b[RT_RDZV_HDR + 4 + RT_RDZV_MAX_TEXT + RT_RDZV_MAX_HELLO];
    size_t n = rt_rdzv_put_hello(b + RT_RDZV_HDR, RT_RDZV_MAX_HELLO, &h);
    rt_rdzv_put_hdr(b, RZ_HELLO, (uint32_t)n, 0);
    int64_t dl = port_now_ns() + 10000000000LL;
    rt_rdzv_hdr hd;
    const char *why;
    uint32_t code;
    if (fd >= 0 && port_sock_write_full(fd, b, RT_RDZV_HDR + n, dl) == 0 &&
        port_sock_read_full(fd, b, RT_RDZV_HDR, dl) == 0 && rt_rdzv_parse_hdr(b, RT_RDZV_HDR, &hd, &why) == 0 &&
        hd.type == RZ_REJECT && port_sock_read_full(fd, b, hd.len, dl) == 0)
        rt_rdzv_parse_text(b, hd.len, &code, text, sizeof text, &why);
    port_sock_close(fd);
    return text;
}

/* Without a job token a process of another world may be a stranger: refused, and the
 * job waits on for its own ranks. */
PTEST(rdzv_rank_zero_refuses_bad_ranks_and_keeps_waiting)
{
    new_job();
    rank_proc(0, URL, 0, 2, "timeout=20", NULL, NULL);
    const char *t = raw_hello(5, 2, NULL);
    CHECKF(!strcmp(t, "rank 5 is out of range for world size 2"), "%s", t);
    t = raw_hello(1, 3, NULL);
    CHECKF(!strcmp(t, "world size 3 does not match rank 0's world size 2"), "%s", t);
    t = raw_hello(0, 2, NULL);
    CHECKF(!strcmp(t, "rank 0 is already taken by the rendezvous master"), "%s", t);
    rank_proc(1, URL, 1, 2, "timeout=20", NULL, NULL);
    t_rank_ok(&P[0], 2);
    t_rank_ok(&P[1], 2);
    new_job();
    rank_proc(0, URL, 0, 2, "timeout=20", "token=job", NULL);
    t = raw_hello(1, 2, "other-job");
    CHECKF(strstr(t, "wrong job token"), "%s", t);
    rank_proc(1, URL, 1, 2, "timeout=20", "token=job", NULL);
    t_rank_ok(&P[0], 2);
    t_rank_ok(&P[1], 2);
}

/* Issue 41 point 9: a rank with this job's token but another world (launchers that
 * disagree on --nproc-per-node) fails rank 0 at once, naming it; without a token rank 0
 * waits on, and its timeout line names the rank it refused. */
PTEST(rdzv_rank_zero_names_a_rank_of_another_world)
{
    new_job();
    rank_proc(0, URL, 0, 2, "timeout=20", "token=job", NULL);
    const char *t = raw_hello(3, 4, "job");
    CHECKF(!strcmp(t, "world size 4 does not match rank 0's world size 2"), "%s", t);
    const char *e = expect_fail(0);
    CHECKF(strstr(e, "rank 0: rank 3 (pid 1 on tester): world size 4 does not match rank 0's world size 2 (do the "
                     "launchers agree on --nproc-per-node and --nnodes?)"), "%s", e);
    new_job();
    rank_proc(0, URL, 0, 2, "timeout=1", NULL, NULL);
    t = raw_hello(3, 4, NULL);
    CHECKF(!strcmp(t, "world size 4 does not match rank 0's world size 2"), "%s", t);
    e = expect_fail(0);
    CHECKF(strstr(e, "timed out after 1 s: rank 1 of 2 did not join; refused meanwhile: rank 3 (pid 1 on tester) with "
                     "world size 4 (do the launchers agree on --nproc-per-node and --nnodes?)"), "%s", e);
}

PTEST(rdzv_duplicate_rank_is_refused)
{
    new_job();
    rank_proc(0, URL, 0, 3, "timeout=20", NULL, NULL);
    rank_proc(1, URL, 1, 3, "timeout=20", NULL, NULL);
    rank_proc(2, URL, 1, 3, "timeout=20", NULL, NULL);
    /* Whichever rank 1 came second is refused; rank 2 is not started yet, so the
     * meeting is still open when it arrives. */
    int loser = -1, st = 0;
    int64_t deadline = port_now_ns() + 15000000000LL;
    while (loser < 0 && port_now_ns() < deadline) {
        for (int i = 1; i <= 2 && loser < 0; i++)
            if (waitpid(P[i].pid, &st, WNOHANG) == P[i].pid) loser = i;
        port_sleep_ns(10000000);
    }
    CHECK(loser > 0 && WIFEXITED(st) && WEXITSTATUS(st) == 3);
    const char *e = t_slurp(P[loser].err);
    CHECKF(strstr(e, "rank 1: rendezvous at tcp://127.0.0.1:") && strstr(e, "rank 1 is already taken by 127.0.0.1:"),
           "%s", e);
    rank_proc(3, URL, 2, 3, "timeout=20", NULL, NULL);
    t_rank_ok(&P[0], 3);
    t_rank_ok(&P[3 - loser], 3);
    t_rank_ok(&P[3], 3);
}

/* Token on one side only: this job's rank, misconfigured; both sides fail at once. */
PTEST(rdzv_token_on_one_side_fails_both_sides_fast)
{
    for (int dir = 0; dir < 2; dir++) {
        new_job();
        double t0 = port_now_s();
        rank_proc(0, URL, 0, 3, "timeout=30", dir ? NULL : "token=job", NULL);
        rank_proc(1, URL, 1, 3, "timeout=30", dir ? "token=job" : NULL, NULL);
        const char *e0 = expect_fail(0), *e1 = expect_fail(1);
        CHECKF(strstr(e0, "rank 0: job token set on rank ") && strstr(e0, "set DDPRT_JOB_TOKEN on every rank"), "%s", e0);
        CHECKF(strstr(e1, "rank 1: rendezvous at tcp://") && strstr(e1, "job token set on rank "), "%s", e1);
        CHECKF(strstr(e1, dir ? "set on rank 1 only" : "set on rank 0 only"), "%s", e1);
        CHECK(port_now_s() - t0 < 20);
    }
}

/* A second copy of a rank after the meeting (2 ranks: it closed when the first copy
 * came) is refused at once by rank 0's door, not left retrying until its timeout. */
PTEST(rdzv_second_copy_after_the_meeting_is_refused_at_once)
{
    new_job();
    rank_proc(0, URL, 0, 2, "timeout=20", "hold_ms=6000", NULL);
    rank_proc(1, URL, 1, 2, "timeout=20", "hold_ms=6000", NULL);
    double t0 = port_now_s();
    rank_proc(2, URL, 1, 2, "timeout=30", "sleep_ms=1000", NULL);
    const char *e = expect_fail(2);
    CHECKF(strstr(e, "rank 1 is already taken by 127.0.0.1:"), "%s", e);
    CHECK(port_now_s() - t0 < 15);
    t_rank_ok(&P[0], 2);
    t_rank_ok(&P[1], 2);
    CHECKF(strstr(t_slurp(P[0].err), "rank 0: refused"), "%s", t_slurp(P[0].err));
}

PTEST(rdzv_host_that_does_not_resolve_fails_at_once)
{
    t_clean_env();
    rt_rdzv_opts o = {"tcp://nosuchhost.invalid:23502", 1, 2, -1, 30, NULL, 0};
    rt_rdzv *r;
    char err[512];
    double t0 = port_now_s();
    CHECK(rt_rdzv_open(&r, &o, err, sizeof err) == -1);
    CHECKF(strstr(err, "rank 1: rendezvous tcp://nosuchhost.invalid:23502: cannot resolve 'nosuchhost.invalid'"),
           "%s", err);
    CHECK(port_now_s() - t0 < 10);
}

PTEST(rdzv_bad_ddprt_variables_are_one_error)
{
    static const char *const bad[][3] = {
        {"DDPRT_ALGO", "rign", "DDPRT_ALGO=rign: expected one of ring|rd|hier|auto"},
        {"DDPRT_ISA", "sse9", "DDPRT_ISA=sse9: expected one of generic|avx2|avx512|avx512bf16"},
        {"DDPRT_TCP_BUFSIZE", "1M", "DDPRT_TCP_BUFSIZE=1M: expected an integer >= 0"},
        {"DDPRT_TCP_NSOCKS", "0", "DDPRT_TCP_NSOCKS=0: expected one of 1|2|3|4|5|6|7|8"},
        {"DDPRT_TIMEOUT", "-3", "DDPRT_TIMEOUT=-3: expected a number > 0"},
        {"DDPRT_LOG", "loud", "DDPRT_LOG=loud: expected one of error|warn|warning|info|debug"},
        {"DDPRT_STALL_WARN", "abc", "DDPRT_STALL_WARN=abc: expected a number > 0"},
    };
    for (int i = 0; i < (int)(sizeof bad / sizeof bad[0]); i++) {
        t_clean_env();
        setenv(bad[i][0], bad[i][1], 1);
        rt_rdzv_opts o = {NULL, 0, 1, -1, 5, NULL, 0};
        rt_rdzv *r = NULL;
        char err[512];
        CHECK(rt_rdzv_open(&r, &o, err, sizeof err) == -1);
        CHECKF(!strcmp(err, bad[i][2]), "%s", err);
        unsetenv(bad[i][0]);
    }
    setenv("DDPRT_ALGO", "ring", 1);
    rt_rdzv_opts o = {NULL, 0, 1, -1, 5, NULL, 0};
    rt_rdzv *r = NULL;
    char err[512];
    CHECKF(rt_rdzv_open(&r, &o, err, sizeof err) == 0, "%s", err);
    rt_rdzv_close(r);
}

PTEST(rdzv_port_in_use_names_the_port)
{
    t_clean_env();
    char err[512], url[64];
    int fd = port_sock_listen(NULL, 0, 1, err, sizeof err), port = port_sock_local_port(fd);
    snprintf(url, sizeof url, "tcp://127.0.0.1:%d", port);
    rt_rdzv_opts o = {url, 0, 2, -1, 2, NULL, 0};
    rt_rdzv *r;
    CHECK(rt_rdzv_open(&r, &o, err, sizeof err) == -1);
    char want[200];
    snprintf(want, sizeof want, "rank 0: cannot listen on 0.0.0.0:%d: Address already in use (another job on this "
             "port? set MASTER_PORT)", port);
    CHECKF(!strcmp(err, want), "%s", err);
    port_sock_close(fd);
}

PTEST(rdzv_master_never_comes)
{
    new_job();
    rt_rdzv_opts o = {URL, 1, 2, -1, 1, NULL, 0};
    rt_rdzv *r;
    char err[512], want[200];
    double t0 = port_now_s();
    CHECK(rt_rdzv_open(&r, &o, err, sizeof err) == -1);
    snprintf(want, sizeof want, "rank 1: no rendezvous with %s after 1 s: Connection refused", URL);
    CHECKF(!strcmp(err, want), "%s", err);
    CHECK(port_now_s() - t0 < 10);
}

PTEST(rdzv_missing_rank_times_out_naming_it)
{
    new_job();
    rank_proc(0, URL, 0, 3, "timeout=1", NULL, NULL);
    rank_proc(1, URL, 1, 3, "timeout=20", NULL, NULL);
    const char *e0 = expect_fail(0), *e1 = expect_fail(1);
    CHECKF(strstr(e0, "rank 0: rendezvous at tcp://") && strstr(e0, "timed out after 1 s: rank 2 of 3 did not join"),
           "%s", e0);
    CHECKF(strstr(e1, "refused this process: rendezvous at") && strstr(e1, "rank 2 of 3 did not join"), "%s", e1);
}

PTEST(rdzv_rank_killed_after_meeting_fails_the_others)
{
    new_job();
    rank_proc(0, URL, 0, 3, "timeout=20", NULL, NULL);
    rank_proc(1, URL, 1, 3, "timeout=20", NULL, NULL);
    rank_proc(2, URL, 2, 3, "timeout=20", "die=1", NULL);
    CHECK(t_wait(&P[2], 20) == 0);
    const char *e0 = expect_fail(0), *e1 = expect_fail(1);
    CHECKF(strstr(e0, "rank 0: rank 2 (127.0.0.1:") && strstr(e0, "closed the connection in allgather round 1"), "%s", e0);
    CHECKF(strstr(e1, "rank 1: allgather round 1 failed: rank 2 (127.0.0.1:") && strstr(e1, "(reported by rank 0)"), "%s", e1);
}

PTEST(rdzv_master_killed_after_meeting_fails_the_others)
{
    new_job();
    rank_proc(0, URL, 0, 2, "timeout=20", "die=1", NULL);
    rank_proc(1, URL, 1, 2, "timeout=20", NULL, NULL);
    const char *e = expect_fail(1);
    CHECKF(strstr(e, "rank 1: rank 0 (tcp://127.0.0.1:") && strstr(e, "closed the connection"), "%s", e);
}

PTEST(rdzv_config_mismatch_names_the_rank_everywhere)
{
    new_job();
    rank_proc(0, URL, 0, 3, "timeout=20", "config=aa", NULL);
    rank_proc(1, URL, 1, 3, "timeout=20", "config=aa", NULL);
    rank_proc(2, URL, 2, 3, "timeout=20", "config=bb", NULL);
    for (int i = 0; i < 3; i++) {
        const char *e = expect_fail(i);
        CHECKF(strstr(e, "configuration mismatch: rank 2 (00000000000000bb) differs from rank 0 (00000000000000aa)"),
               "%d: %s", i, e);
    }
}

PTEST(rdzv_allgather_length_mismatch_fails_every_rank)
{
    new_job();
    rank_proc(0, URL, 0, 2, "timeout=20", "len=8", NULL);
    rank_proc(1, URL, 1, 2, "timeout=20", "len=16", NULL);
    const char *e0 = expect_fail(0), *e1 = expect_fail(1);
    CHECKF(strstr(e0, "rank 1 is at round 1 with 16 bytes, rank 0 gave 8 bytes"), "%s", e0);
    CHECKF(strstr(e1, "rank 1 is at round 1 with 16 bytes") && strstr(e1, "reported by rank 0"), "%s", e1);
}

/* ---- file:// ---- */
static void write_stale(const char *path, const char *token_hex, int port)
{
    FILE *f = fopen(path, "w");
    fprintf(f, "ddprt-rdzv-file 1\ntoken %s\ngen 1234\nworld 3\naddr 127.0.0.1:%d\n", token_hex, port);
    fclose(f);
}

PTEST(rdzv_file_meets_despite_stale_files_and_cleans_up)
{
    t_clean_env();
    char path[512], url[600], tok[32];
    snprintf(path, sizeof path, "%s/rdzv-shared", t_tmpdir());
    snprintf(url, sizeof url, "file://%s", path);
    /* 1: no token, the file left by an earlier run points at a dead port. */
    write_stale(path, "0000000000000000", t_free_port());
    rank_proc(1, url, 1, 3, "timeout=20", NULL, NULL);
    rank_proc(2, url, 2, 3, "timeout=20", NULL, NULL);
    port_sleep_ns(200000000);
    rank_proc(0, url, 0, 3, "timeout=20", NULL, NULL);
    for (int i = 0; i < 3; i++) t_rank_ok(&P[i], 3);
    CHECK(access(path, F_OK) != 0);
    /* 2: with a token, a stale file of another job is ignored; rank 0 starts first. */
    snprintf(tok, sizeof tok, "%016llx", (unsigned long long)rt_rdzv_token_hash_of("old-job"));
    write_stale(path, tok, t_free_port());
    rank_proc(0, url, 0, 3, "timeout=20", "token=new-job", NULL);
    rank_proc(1, url, 1, 3, "timeout=20", "token=new-job", NULL);
    rank_proc(2, url, 2, 3, "timeout=20", "token=new-job", NULL);
    for (int i = 0; i < 3; i++) t_rank_ok(&P[i], 3);
    CHECK(access(path, F_OK) != 0);
    /* 3: a rank that never finds its rank 0 says where it looked. */
    rt_rdzv_opts o = {url, 1, 3, -1, 1, NULL, 0};
    rt_rdzv *r;
    char err[1024];
    CHECK(rt_rdzv_open(&r, &o, err, sizeof err) == -1);
    CHECKF(strstr(err, "rank 1: no rendezvous through file://") && strstr(err, "does not exist yet"), "%s", err);
}

/* Issue 41 point 9: rank 0 too (it listens on every interface, but its peers use the
 * name): one line at once, not a wait to the timeout. */
PTEST(rdzv_rank_zero_with_a_host_that_does_not_resolve_fails_at_once)
{
    t_clean_env();
    rt_rdzv_opts o = {"tcp://nosuchhost.invalid:23503", 0, 2, -1, 30, NULL, 0};
    rt_rdzv *r;
    char err[512];
    double t0 = port_now_s();
    CHECK(rt_rdzv_open(&r, &o, err, sizeof err) == -1);
    CHECKF(strstr(err, "rank 0: rendezvous tcp://nosuchhost.invalid:23503: cannot resolve 'nosuchhost.invalid'"),
           "%s", err);
    CHECK(port_now_s() - t0 < 10);
}
