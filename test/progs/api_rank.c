/* One rank of a job on the C API alone (include/ddprt.h): test/test_api.c runs it
 * linked with libddprt.a, test/test_install.c builds the same file against the
 * installed libddprt.so with pkg-config.
 * usage: t-api_rank MODE [key=value...]   (rank, world, master: from the environment)
 *   check: every collective on f32 f64 i32 i64 u8 with every op (small integers:
 *          exact in any order), async ops waited for by another thread, ddprt_test
 *          and its done flag, allgatherv with unequal blocks, alltoallv, registered memory,
 *          argument errors, a NULL communicator, the API version;
 *          prints "rank R of W ok (N checks)".
 *   kill:  allreduce of 4 MiB in a loop; rank victim= (default world-1) SIGKILLs
 *          itself after 3 iterations; the others print "failed after T s: MSG", exit 3.
 *          async=1: iallreduce and ddprt_test until done instead (the failure must
 *          come with done set and the request released: "released" in the line).
 *   late:  rank 0 sleeps sleep= s (default 6) outside any op while the others wait in
 *          an allreduce; they fail naming it; rank 0 must then fail its next op (not
 *          exit): "rank 0 failed: MSG", exit 3.
 *   after: finalize with a request in flight and a registered block alive: the request
 *          fails "finalized" and is released, every call is an error, the block stays
 *          writable until ddprt_mem_free; prints "rank R of W after ok".
 * keys: timeout=S, init=URL, offset=N (port_offset), victim=R, sleep=S, async=1. */
#ifndef _GNU_SOURCE
#define _POSIX_C_SOURCE 200809L /* clock_gettime, nanosleep, kill: built outside the tree too */
#endif
#include "ddprt.h"
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static ddprt_comm *c;
static int rank_, world_, checks, bad;

static void sleep_s(double s)
{
    struct timespec t = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&t, NULL);
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

#define EXPECT(cond, ...)                                                    \
    do {                                                                     \
        checks++;                                                            \
        if (!(cond) && bad++ < 8) {                                          \
            fprintf(stderr, "rank %d: line %d: ", rank_, __LINE__);          \
            fprintf(stderr, __VA_ARGS__);                                    \
            fprintf(stderr, " (%s)\n", ddprt_last_error());                  \
        }                                                                    \
    } while (0)

/* Rank r's element i: small integers (0..9 for PROD, so 3 ranks stay exact in u8). */
static int64_t val(int op, int r, size_t i)
{
    if (op == DDPRT_PROD) return (int64_t)((i + (size_t)r) % 3) + 1;
    return (int64_t)((i * 7 + (size_t)r * 13) % 17) + (op == DDPRT_SUM || op == DDPRT_AVG ? 0 : 1);
}

static void put(void *b, size_t i, ddprt_dtype dt, int64_t v)
{
    switch (dt) {
    case DDPRT_FLOAT32: ((float *)b)[i] = (float)v; break;
    case DDPRT_FLOAT64: ((double *)b)[i] = (double)v; break;
    case DDPRT_INT32: ((int32_t *)b)[i] = (int32_t)v; break;
    case DDPRT_INT64: ((int64_t *)b)[i] = v; break;
    default: ((uint8_t *)b)[i] = (uint8_t)v;
    }
}

static double get(const void *b, size_t i, ddprt_dtype dt)
{
    switch (dt) {
    case DDPRT_FLOAT32: return ((const float *)b)[i];
    case DDPRT_FLOAT64: return ((const double *)b)[i];
    case DDPRT_INT32: return ((const int32_t *)b)[i];
    case DDPRT_INT64: return (double)((const int64_t *)b)[i];
    default: return ((const uint8_t *)b)[i];
    }
}

static double want(int op, size_t i, ddprt_dtype dt)
{
    double a = (double)val(op, 0, i);
    for (int q = 1; q < world_; q++) {
        double v = (double)val(op, q, i);
        a = op == DDPRT_MIN ? (v < a ? v : a) : op == DDPRT_MAX ? (v > a ? v : a) : op == DDPRT_PROD ? a * v : a + v;
    }
    if (op == DDPRT_AVG)
        a = dt == DDPRT_FLOAT32 ? (double)((float)a / (float)world_)
            : dt == DDPRT_FLOAT64 ? a / world_ : (double)((int64_t)a / world_);
    return a;
}

static const ddprt_dtype dts[] = {DDPRT_FLOAT32, DDPRT_FLOAT64, DDPRT_INT32, DDPRT_INT64, DDPRT_UINT8};

static void reductions(void *s, void *r, size_t n)
{
    for (size_t d = 0; d < sizeof dts / sizeof *dts; d++)
        for (int op = 0; op < 5; op++) {
            for (size_t i = 0; i < n; i++) put(s, i, dts[d], val(op, rank_, i));
            EXPECT(!ddprt_allreduce(c, s, r, n, dts[d], (ddprt_op)op), "allreduce dt %d op %d", dts[d], op);
            for (size_t i = 0; i < n; i++)
                EXPECT(get(r, i, dts[d]) == want(op, i, dts[d]), "allreduce dt %d op %d [%zu]: %g, want %g", dts[d],
                       op, i, get(r, i, dts[d]), want(op, i, dts[d]));
            /* reduce_scatter: block q of every rank's send holds the same pattern. */
            for (int q = 0; q < world_; q++)
                for (size_t i = 0; i < n; i++) put(s, (size_t)q * n + i, dts[d], val(op, rank_, i));
            EXPECT(!ddprt_reduce_scatter(c, s, r, n, dts[d], (ddprt_op)op), "reduce_scatter dt %d op %d", dts[d], op);
            for (size_t i = 0; i < n; i++)
                EXPECT(get(r, i, dts[d]) == want(op, i, dts[d]), "reduce_scatter dt %d op %d [%zu]", dts[d], op, i);
        }
}

typedef struct { ddprt_request *req; int rc; } waiter;
static void *wait_thread(void *p)
{
    waiter *w = p;
    w->rc = ddprt_wait(w->req);
    return NULL;
}

static void movers(float *s, float *r, size_t n)
{
    /* broadcast from the last rank, allgather, allgatherv with blocks of r elements
     * (rank 0's empty). */
    for (size_t i = 0; i < n; i++) s[i] = rank_ == world_ - 1 ? (float)i : -1.0f;
    EXPECT(!ddprt_broadcast(c, s, n, DDPRT_FLOAT32, world_ - 1), "broadcast");
    for (size_t i = 0; i < n; i++) EXPECT(s[i] == (float)i, "broadcast [%zu] = %g", i, s[i]);
    for (size_t i = 0; i < n; i++) s[i] = (float)(rank_ * 1000 + (int)i);
    EXPECT(!ddprt_allgather(c, s, r, n, DDPRT_FLOAT32), "allgather");
    for (int q = 0; q < world_; q++)
        for (size_t i = 0; i < n; i++) EXPECT(r[q * n + i] == (float)(q * 1000 + (int)i), "allgather [%d][%zu]", q, i);
    size_t counts[64], total = 0;
    for (int q = 0; q < world_; q++) total += counts[q] = (size_t)q;
    for (size_t i = 0; i < total; i++) r[i] = -1;
    EXPECT(!ddprt_allgatherv(c, s, r, (size_t)rank_, counts, NULL, DDPRT_FLOAT32), "allgatherv");
    size_t at = 0;
    for (int q = 0; q < world_; q++)
        for (size_t i = 0; i < counts[q]; i++, at++) EXPECT(r[at] == (float)(q * 1000 + (int)i), "allgatherv [%zu]", at);
    /* alltoallv: rank r sends q the block of (r + 2q) % 4 elements r*1000 + q*100 + i
     * (some empty), packed; then the same blocks at displacements with gaps. */
    size_t sc[64], rc[64], sd[64], rd[64], so = 0, ro = 0;
    for (int q = 0; q < world_; q++) {
        sc[q] = (size_t)(rank_ + 2 * q) % 4, rc[q] = (size_t)(q + 2 * rank_) % 4;
        sd[q] = 512 + 2 * so, rd[q] = 3 * ro + 2;
        for (size_t i = 0; i < sc[q]; i++) s[so + i] = s[sd[q] + i] = (float)(rank_ * 1000 + q * 100 + (int)i);
        so += sc[q], ro += rc[q];
    }
    for (int pass = 0; pass < 2; pass++) {
        for (size_t i = 0; i < 3 * ro + 8; i++) r[i] = -1;
        EXPECT(!ddprt_alltoallv(c, s, sc, pass ? sd : NULL, r, rc, pass ? rd : NULL, DDPRT_FLOAT32), "alltoallv %d",
               pass);
        size_t at = 0;
        for (int q = 0; q < world_; q++, at += rc[q - 1])
            for (size_t i = 0; i < rc[q]; i++) {
                float got = r[(pass ? rd[q] : at) + i], w = (float)(q * 1000 + rank_ * 100 + (int)i);
                EXPECT(got == w, "alltoallv %d: from %d [%zu] = %g, want %g", pass, q, i, got, w);
            }
    }
    sc[rank_]++;
    EXPECT(ddprt_alltoallv(c, s, sc, NULL, r, rc, NULL, DDPRT_FLOAT32) == DDPRT_EINVAL &&
               strstr(ddprt_last_error(), "sends itself"), "alltoallv self-count mismatch refused");
    EXPECT(!ddprt_barrier(c), "barrier");
}

static void async_ops(float *s, float *r, size_t n)
{
    /* Issued here, waited for by another thread (a progress thread's pattern). */
    for (size_t i = 0; i < n; i++) s[i] = (float)(rank_ + 1);
    ddprt_request *req = NULL;
    EXPECT(!ddprt_iallreduce(c, s, r, n, DDPRT_FLOAT32, DDPRT_SUM, &req) && req, "iallreduce");
    waiter w = {req, -99};
    pthread_t th;
    pthread_create(&th, NULL, wait_thread, &w);
    pthread_join(th, NULL);
    EXPECT(w.rc == 0, "wait from another thread: %d", w.rc);
    for (size_t i = 0; i < n; i++) EXPECT(r[i] == (float)(world_ * (world_ + 1) / 2), "iallreduce [%zu]", i);
    EXPECT(ddprt_wait(req) == DDPRT_EINVAL && strstr(ddprt_last_error(), "already completed"), "second wait");
    /* ddprt_test until done: 0 returned every time, the request released (NULL) with
     * done; testing it again is an argument error that reports not done. Then
     * ibroadcast, iallgather, ireduce_scatter in a row. */
    EXPECT(!ddprt_iallreduce(c, s, r, n, DDPRT_FLOAT32, DDPRT_MAX, &req), "iallreduce max");
    int t, done = 0;
    while (!(t = ddprt_test(&req, &done)) && !done) sleep_s(1e-4);
    EXPECT(t == 0 && done == 1 && req == NULL && r[0] == (float)world_, "test: %d done %d req %p, %g", t, done,
           (void *)req, r[0]);
    EXPECT(ddprt_test(&req, &done) == DDPRT_EINVAL && done == 0 && strstr(ddprt_last_error(), "already completed"),
           "test of a released request");
    EXPECT(ddprt_test(NULL, &done) == DDPRT_EINVAL && done == 0, "test NULL");
    EXPECT(!ddprt_iallreduce(c, s, r, n, DDPRT_FLOAT32, DDPRT_MAX, &req), "iallreduce max");
    EXPECT(ddprt_test(&req, NULL) == DDPRT_EINVAL && req != NULL && !ddprt_wait(req), "test without done");
    ddprt_request *q[3];
    EXPECT(!ddprt_ibroadcast(c, s, n, DDPRT_FLOAT32, 0, &q[0]), "ibroadcast");
    EXPECT(!ddprt_iallgather(c, s, r, 1, DDPRT_FLOAT32, &q[1]), "iallgather");
    static float rs[64];
    EXPECT(!ddprt_ireduce_scatter(c, r, rs, 1, DDPRT_FLOAT32, DDPRT_SUM, &q[2]), "ireduce_scatter");
    for (int k = 0; k < 3; k++) EXPECT(!ddprt_wait(q[k]), "wait %d", k);
    EXPECT(s[0] == 1.0f && r[world_ - 1] == 1.0f && rs[0] == (float)world_, "async results %g %g %g", s[0],
           r[world_ - 1], rs[0]);
}

static void registered(size_t n)
{
    float *m = ddprt_mem_alloc(c, n * sizeof *m);
    EXPECT(m != NULL, "mem_alloc");
    if (!m) return;
    for (size_t i = 0; i < n; i++) m[i] = (float)(rank_ + (int)(i % 5));
    EXPECT(!ddprt_allreduce(c, m, m, n, DDPRT_FLOAT32, DDPRT_SUM), "registered allreduce");
    float base = (float)(world_ * (world_ - 1) / 2);
    for (size_t i = 0; i < n; i += 997) EXPECT(m[i] == base + (float)(world_ * (int)(i % 5)), "registered [%zu]", i);
    ddprt_mem_free(c, m);
}

static void errors(float *s)
{
    EXPECT(ddprt_allreduce(c, s, s, 1, (ddprt_dtype)9, DDPRT_SUM) == DDPRT_EINVAL &&
               strstr(ddprt_last_error(), "unknown dtype 9"), "bad dtype");
    EXPECT(ddprt_allreduce(c, s, s, 1, DDPRT_FLOAT32, (ddprt_op)7) == DDPRT_EINVAL, "bad op");
    EXPECT(ddprt_broadcast(c, s, 1, DDPRT_FLOAT32, world_) == DDPRT_EINVAL && strstr(ddprt_last_error(), "root"),
           "bad root");
    EXPECT(ddprt_allreduce(c, NULL, s, 4, DDPRT_FLOAT32, DDPRT_SUM) == DDPRT_EINVAL, "NULL buffer");
    EXPECT(ddprt_wait(NULL) == DDPRT_EINVAL, "wait NULL");
    /* A NULL communicator: an error with its line, never a crash. */
    EXPECT(ddprt_rank(NULL) == DDPRT_EINVAL && strstr(ddprt_last_error(), "ddprt_rank: the communicator is NULL"),
           "rank NULL");
    EXPECT(ddprt_size(NULL) == DDPRT_EINVAL && strstr(ddprt_last_error(), "ddprt_size: the communicator is NULL"),
           "size NULL");
    EXPECT(ddprt_local_rank(NULL) == DDPRT_EINVAL && ddprt_local_size(NULL) == DDPRT_EINVAL &&
               strstr(ddprt_last_error(), "ddprt_local_size: the communicator is NULL"), "local rank/size NULL");
    EXPECT(ddprt_mem_alloc(NULL, 64) == NULL && strstr(ddprt_last_error(), "ddprt_mem_alloc: the communicator"),
           "mem_alloc NULL");
    ddprt_mem_free(NULL, s);
    EXPECT(strstr(ddprt_last_error(), "ddprt_mem_free: the communicator is NULL"), "mem_free NULL");
    ddprt_request *q = NULL;
    EXPECT(ddprt_allgatherv(NULL, s, s, 1, NULL, NULL, DDPRT_FLOAT32) == DDPRT_EINVAL &&
               ddprt_iallreduce(NULL, s, s, 1, DDPRT_FLOAT32, DDPRT_SUM, &q) == DDPRT_EINVAL && !q &&
               strstr(ddprt_last_error(), "ddprt_iallreduce: the communicator is NULL"), "collectives NULL");
    EXPECT(!strcmp(ddprt_comm_error(NULL), "") && ddprt_api_version() == DDPRT_API_VERSION && *ddprt_version(),
           "comm_error NULL, version %d (header %d) '%s'", ddprt_api_version(), DDPRT_API_VERSION, ddprt_version());
    /* Nothing was sent: the comm is still healthy. */
    EXPECT(!ddprt_barrier(c) && !*ddprt_comm_error(c), "healthy after argument errors");
}

static int mode_check(void)
{
    size_t n = 37;
    float *s = malloc(64 * 1024 * 8), *r = malloc(64 * 1024 * 8);
    reductions(s, r, n);
    movers(s, r, n);
    async_ops(s, r, 1000);
    registered(256 * 1024);
    errors(s);
    free(s), free(r);
    ddprt_finalize(c);
    if (bad) return 1;
    printf("rank %d of %d ok (%d checks)\n", rank_, world_, checks);
    return 0;
}

/* One allreduce, blocking or (async) by ddprt_test until done: 0 or a code; *how says
 * whether a failed request came back released. */
static int kill_step(float *x, size_t n, int async, const char **how)
{
    *how = "";
    if (!async) return ddprt_allreduce(c, x, x, n, DDPRT_FLOAT32, DDPRT_SUM);
    ddprt_request *req;
    int rc = ddprt_iallreduce(c, x, x, n, DDPRT_FLOAT32, DDPRT_SUM, &req), done = 0;
    if (rc) return rc;
    while (!(rc = ddprt_test(&req, &done)) && !done) sleep_s(1e-4);
    *how = done && !req ? " (test: done, released)" : " (test: NOT released)";
    return rc;
}

static int mode_kill(int victim, int async)
{
    size_t n = 1 << 20;
    float *x = calloc(n, sizeof *x);
    double t0 = now_s();
    const char *how;
    for (int it = 0; it < 1000000; it++) {
        if (rank_ == victim && it == 3) {
            fflush(stdout);
            kill(getpid(), SIGKILL);
        }
        if (kill_step(x, n, async, &how)) {
            printf("failed after %.1f s: %s%s\n", now_s() - t0, ddprt_last_error(), how);
            fflush(stdout);
            ddprt_finalize(c); /* a failed comm: returns at once */
            free(x);
            return 3;
        }
    }
    return 0;
}

static int mode_late(double nap)
{
    float x = 1;
    EXPECT(!ddprt_allreduce(c, &x, &x, 1, DDPRT_FLOAT32, DDPRT_SUM), "first allreduce");
    if (rank_ == 0) sleep_s(nap);
    if (ddprt_allreduce(c, &x, &x, 1, DDPRT_FLOAT32, DDPRT_SUM)) {
        printf("rank %d failed: %s\n", rank_, ddprt_last_error());
        fflush(stdout);
        ddprt_finalize(c);
        return 3;
    }
    printf("rank %d: no failure\n", rank_);
    return 0;
}

static int mode_after(void)
{
    size_t n = 1 << 16;
    float *blk = ddprt_mem_alloc(c, n * sizeof *blk), x = 1, y = 0;
    EXPECT(blk != NULL, "mem_alloc: %s", ddprt_last_error());
    if (!blk) return 1;
    for (size_t i = 0; i < n; i++) blk[i] = (float)(rank_ + 1);
    EXPECT(!ddprt_allreduce(c, blk, blk, n, DDPRT_FLOAT32, DDPRT_SUM) && blk[n - 1] == world_ * (world_ + 1) / 2.0f,
           "allreduce in the block: %s", ddprt_last_error());
    ddprt_request *req = NULL;
    EXPECT(!ddprt_iallreduce(c, &x, &y, 1, DDPRT_FLOAT32, DDPRT_SUM, &req), "iallreduce: %s", ddprt_last_error());
    ddprt_finalize(c);
    int rc = ddprt_wait(req);
    EXPECT(rc == DDPRT_ECLOSED && strstr(ddprt_last_error(), "finalized"), "wait after finalize: %d %s", rc,
           ddprt_last_error());
    EXPECT(ddprt_wait(req) == DDPRT_EINVAL, "a second wait: %s", ddprt_last_error());
    EXPECT(ddprt_allreduce(c, &x, &y, 1, DDPRT_FLOAT32, DDPRT_SUM) == DDPRT_EINVAL &&
               strstr(ddprt_last_error(), "finalized"), "allreduce after finalize: %s", ddprt_last_error());
    EXPECT(ddprt_rank(c) == DDPRT_EINVAL && ddprt_mem_alloc(c, 8) == NULL, "rank/mem_alloc after finalize");
    ddprt_finalize(c);
    EXPECT(strstr(ddprt_last_error(), "finalized already") != NULL, "second finalize: %s", ddprt_last_error());
    for (size_t i = 0; i < n; i++) blk[i] = -1.0f; /* still this process's memory */
    EXPECT(blk[0] == -1.0f && blk[n - 1] == -1.0f, "the block after finalize");
    ddprt_mem_free(c, blk); /* the last block: the transport goes now */
    if (bad) return 1;
    printf("rank %d of %d after ok (%d checks)\n", rank_, world_, checks);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: t-api_rank check|kill|late|after [key=value...]\n");
        return 2;
    }
    ddprt_opts o;
    ddprt_opts_default(&o);
    int victim = -1, async = 0;
    double nap = 6;
    for (int i = 2; i < argc; i++) {
        char *v = strchr(argv[i], '=');
        if (!v) continue;
        *v++ = 0;
        if (!strcmp(argv[i], "timeout")) o.timeout_s = atof(v);
        else if (!strcmp(argv[i], "init")) o.init_method = v;
        else if (!strcmp(argv[i], "offset")) o.port_offset = atoi(v);
        else if (!strcmp(argv[i], "victim")) victim = atoi(v);
        else if (!strcmp(argv[i], "async")) async = atoi(v);
        else if (!strcmp(argv[i], "sleep")) nap = atof(v);
    }
    if (ddprt_init(&c, &o)) {
        printf("init failed: %s\n", ddprt_last_error());
        return 3;
    }
    rank_ = ddprt_rank(c), world_ = ddprt_size(c);
    if (!strcmp(argv[1], "kill")) return mode_kill(victim < 0 ? world_ - 1 : victim, async);
    if (!strcmp(argv[1], "late")) return mode_late(nap);
    if (!strcmp(argv[1], "after")) return mode_after();
    return mode_check();
}
