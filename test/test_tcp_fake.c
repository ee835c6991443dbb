/* See test_tcp_fake.h. Wire between a rank and the test process: the rank writes
 * (u32 len, len bytes) and reads back world * len bytes; EOF means the other side is
 * gone, which fails the allgather (the rank then reports a create error). */
#include "test/test_tcp_fake.h"
#include "ports/posix/port.h"
#include "rt/log.h"
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct { int wfd, rfd, world, rank; } fake_ctx;
int tcpf_die_rank = -1;

static int full_io(int fd, void *buf, size_t n, int out)
{
    char *p = buf;
    while (n) {
        ssize_t r = out ? write(fd, p, n) : read(fd, p, n);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return -1;
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

static int fake_allgather(void *ctx, const void *mine, size_t len, void *all, char *err, size_t errlen)
{
    fake_ctx *c = ctx;
    uint32_t l = (uint32_t)len;
    if (full_io(c->wfd, &l, 4, 1) || full_io(c->wfd, (void *)mine, len, 1) ||
        full_io(c->rfd, all, len * (size_t)c->world, 0)) {
        snprintf(err, errlen, "fake bootstrap: the test process went away");
        return -1;
    }
    if (c->rank == tcpf_die_rank) _exit(7);
    return 0;
}

void tcpf_fill(void *buf, size_t n, unsigned seed)
{
    unsigned char *p = buf;
    for (size_t i = 0; i < n; i++) p[i] = (unsigned char)((i * 2654435761u) >> 13 ^ seed * 131u);
}

size_t tcpf_check(const void *buf, size_t n, unsigned seed)
{
    const unsigned char *p = buf;
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += p[i] != (unsigned char)((i * 2654435761u) >> 13 ^ seed * 131u);
    return bad;
}

static void child(int rank, int world, double timeout_s, uint64_t token, int wfd, int rfd, int resfd,
                  tcpf_body body)
{
    fake_ctx ctx = {wfd, rfd, world, rank};
    rt_log_init();
    rt_log_set_rank(rank);
    tp_bootstrap bs = {&ctx, rank, world, rank, token, timeout_s, fake_allgather, ""};
    tp_backend *b = NULL;
    char msg[320] = "", line[400];
    int code;
    if (tp_tcp_create(&bs, &b, msg, sizeof msg)) code = 3;
    else code = body(b, rank, world, msg, sizeof msg);
    close(wfd); /* the test process sees EOF: no more rounds from this rank */
    int n = snprintf(line, sizeof line, "%d %d %s\n", rank, code, msg);
    if (write(resfd, line, (size_t)(n < (int)sizeof line ? n : (int)sizeof line - 1)) < 0) code = 99;
    if (b) b->ops->destroy(b);
    _exit(code);
}

/* Serves allgather rounds until every rank closed its pipe; if one rank vanishes
 * mid-round, closes every pipe so the others fail instead of waiting forever. */
static void coordinate(int world, int *from, int *to, tcpf_hook hook, void *arg)
{
    int round = 0;
    for (;;) {
        uint32_t len = 0, l;
        char *all = NULL;
        int eof = 0;
        for (int r = 0; r < world; r++) {
            if (full_io(from[r], &l, 4, 0)) { eof++; continue; }
            if (!all) { len = l; all = calloc((size_t)world, len ? len : 1); }
            if (l != len || full_io(from[r], all + (size_t)r * len, len, 0)) { eof++; continue; }
        }
        if (eof) { free(all); break; }
        if (round++ == 0 && hook) hook(all, len, world, arg);
        for (int r = 0; r < world; r++) full_io(to[r], all, (size_t)world * len, 1);
        free(all);
    }
    for (int r = 0; r < world; r++) close(to[r]), close(from[r]);
}

typedef struct { int world, *from, *to; tcpf_hook hook; void *arg; } coord_arg;
static void *coord_main(void *p)
{
    coord_arg *a = p;
    coordinate(a->world, a->from, a->to, a->hook, a->arg);
    return NULL;
}

int tcpf_run(int world, double timeout_s, uint64_t token, tcpf_body body, tcpf_hook hook, void *arg,
             tcpf_result *res)
{
    int from[16], to[16], pids[16], resp[2];
    if (world > 16 || pipe(resp)) return -1;
    signal(SIGPIPE, SIG_IGN);
    double t0 = port_now_s();
    for (int r = 0; r < world; r++) {
        int a[2], b[2];
        if (pipe(a) || pipe(b)) return -1;
        fflush(NULL);
        pids[r] = fork();
        if (pids[r] == 0) {
            close(a[0]), close(b[1]), close(resp[0]);
            for (int q = 0; q < r; q++) close(from[q]), close(to[q]);
            child(r, world, timeout_s, token, a[1], b[0], resp[1], body);
        }
        close(a[1]), close(b[0]);
        from[r] = a[0], to[r] = b[1];
        res[r] = (tcpf_result){.code = -1};
    }
    close(resp[1]);
    /* The coordinator runs beside the reaper so exit times are exact even while
     * some ranks still hold a round open. */
    coord_arg ca = {world, from, to, hook, arg};
    pthread_t th;
    if (pthread_create(&th, NULL, coord_main, &ca)) return -1;
    /* Reap with timestamps (1 ms resolution) so tests can report exit times. */
    for (int left = world; left;) {
        int st;
        pid_t p = waitpid(-1, &st, WNOHANG);
        if (p < 0) break;
        if (p == 0) { port_sleep_ns(1000000); continue; }
        for (int r = 0; r < world; r++)
            if (pids[r] == p) {
                res[r].code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
                res[r].exit_s = port_now_s() - t0;
                left--;
            }
    }
    pthread_join(th, NULL);
    FILE *f = fdopen(resp[0], "r");
    char line[400];
    while (f && fgets(line, sizeof line, f)) {
        int r, c, off = 0;
        if (sscanf(line, "%d %d %n", &r, &c, &off) >= 2 && r >= 0 && r < world) {
            line[strcspn(line, "\n")] = 0;
            snprintf(res[r].msg, sizeof res[r].msg, "%s", line + off);
        }
    }
    if (f) fclose(f);
    return 0;
}

static int64_t dl(double s) { return port_now_ns() + (int64_t)(s * 1e9); }
tcpf_mismatch tcpf_mm;
int tcpf_body_mismatch(tp_backend *b, int rank, int world, char *msg, size_t n)
{
    (void)world;
    size_t len = tcpf_mm.slen > tcpf_mm.rlen ? tcpf_mm.slen : tcpf_mm.rlen;
    char *buf = calloc(1, len + 8);
    tp_req r, *rp = &r;
    int rc = 0;
    for (int i = 0; i < tcpf_mm.pre && !rc; i++) {
        if (rank == 0) b->ops->isend(b, 1, buf, 8, &r);
        else b->ops->irecv(b, 0, buf, 8, &r);
        rc = b->ops->waitall(b, &rp, 1, dl(tcpf_mm.wait_s));
    }
    if (!rc) {
        if (rank == 0) b->ops->isend(b, 1, buf, tcpf_mm.slen, &r);
        else b->ops->irecv(b, 0, buf, tcpf_mm.rlen, &r);
        rc = b->ops->waitall(b, &rp, 1, dl(tcpf_mm.wait_s));
    }
    if (rank == 0 && rc == 0) { /* the send went out; the failure shows on the next recv */
        b->ops->irecv(b, 1, buf, 4, &r);
        rc = b->ops->waitall(b, &rp, 1, dl(tcpf_mm.wait_s));
    }
    snprintf(msg, n, "%d %s", rc, b->err);
    free(buf);
    return rc ? 2 : 0;
}
