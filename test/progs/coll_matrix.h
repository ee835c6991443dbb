/* What t-tcp_coll, t-shm_coll and t-verbs_coll share: the command line, one rank's
 * state, the expected values, the collectives matrix for one size, the allreduce loop
 * that a failure ends, and the rendezvous around them. Static: every test/progs .c file is its own program. */
#ifndef DDPRT_TEST_PROGS_COLL_MATRIX_H
#define DDPRT_TEST_PROGS_COLL_MATRIX_H
#include "ports/posix/port.h"
#include "rt/log.h"
#include "rt/rdzv.h"
#include "transport/tp.h"
#include "transport/tp_reduce.h"
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank_, world_, checks, bad;
static tp_comm *comm;

/* Rank r's element i for op: small integers, exact in f32, i32 and bf16. */
static int64_t ival(int op, int r, size_t i)
{
    if (op == TP_MAX) return (int64_t)((i * 31 + (size_t)r * 17) % 101) - 50;
    return (int64_t)((i * 7 + (size_t)r * 13) % 17) - 8;
}

static void put(void *b, size_t i, rt_dtype dt, int64_t v)
{
    if (dt == RT_F32) ((float *)b)[i] = (float)v;
    else if (dt == RT_I32) ((int32_t *)b)[i] = (int32_t)v;
    else ((uint16_t *)b)[i] = rt_f32_to_bf16((float)v);
}

static int64_t get(const void *b, size_t i, rt_dtype dt)
{
    if (dt == RT_F32) return (int64_t)((const float *)b)[i];
    if (dt == RT_I32) return ((const int32_t *)b)[i];
    return (int64_t)rt_bf16_to_f32(((const uint16_t *)b)[i]);
}

/* Element i reduced with op over all world_ ranks. */
static int64_t reduced(int op, size_t i)
{
    int64_t a = ival(op, 0, i);
    for (int q = 1; q < world_; q++) {
        int64_t v = ival(op, q, i);
        a = op == TP_MAX ? (v > a ? v : a) : a + v;
    }
    return a;
}

static void check(const char *what, size_t i, int64_t got, int64_t want)
{
    if (got != want && bad++ < 5)
        fprintf(stderr, "rank %d: %s: element %zu is %lld, want %lld\n", rank_, what, i, (long long)got,
                (long long)want);
}

static void die(const char *what)
{
    fprintf(stderr, "rank %d: %s failed: %s\n", rank_, what, tp_errmsg(comm));
    exit(3);
}

/* Where the two programs' matrices differ, kept so that each one's output stays as it was. */
typedef struct coll_style {
    int poison;     /* fill the allreduce output with 0x5a first */
    int detail;     /* a wrong element's line names the dtype and count ("allreduce sum f32 n=7") */
    int tcp_counts; /* allgather counts as a check only when n > 0; the barrier does not count */
} coll_style;

static void coll_check(const coll_style *st, const char *what, rt_dtype dt, size_t n, size_t i, int64_t got,
                       int64_t want)
{
    if (!st->detail) { check(what, i, got, want); return; }
    if (got != want && bad++ < 5)
        fprintf(stderr, "rank %d: %s %s n=%zu: element %zu is %lld, want %lld\n", rank_, what, rt_dtype_names[dt],
                n, i, (long long)got, (long long)want);
}

/* Allreduce sum and max and reduce_scatter (f32, i32, bf16), then broadcast from rank
 * k % world, allgather and barrier, all of n elements; s and r hold n * world_ of any
 * dtype. */
static void coll_sizes(const coll_style *st, size_t n, void *s, void *r, int k)
{
    static const rt_dtype dts[] = {RT_F32, RT_I32, RT_BF16};
    for (size_t d = 0; d < 3; d++) {
        rt_dtype dt = dts[d];
        for (int op = 0; op < 2; op++) {
            int o = op ? TP_MAX : TP_SUM;
            const char *what = !st->detail ? "allreduce" : op ? "allreduce max" : "allreduce sum";
            for (size_t i = 0; i < n; i++) put(s, i, dt, ival(o, rank_, i));
            if (st->poison) memset(r, 0x5a, n * rt_dtype_size(dt) + 1);
            if (tp_allreduce(comm, s, r, n, dt, o)) die("allreduce");
            for (size_t i = 0; i < n; i++) coll_check(st, what, dt, n, i, get(r, i, dt), reduced(o, i));
            checks++;
        }
        /* reduce_scatter: block rank_ of every rank's world_ * n vector, summed. */
        for (size_t i = 0; i < n * (size_t)world_; i++) put(s, i, dt, ival(TP_SUM, rank_, i));
        if (tp_reduce_scatter(comm, s, r, n, dt, TP_SUM)) die("reduce_scatter");
        for (size_t i = 0; i < n; i++)
            coll_check(st, "reduce_scatter", dt, n, i, get(r, i, dt), reduced(TP_SUM, (size_t)rank_ * n + i));
        checks++;
    }
    int root = k % world_;
    for (size_t i = 0; i < n; i++) put(r, i, RT_F32, rank_ == root ? ival(TP_SUM, root, i) : -99);
    if (tp_broadcast(comm, r, n, RT_F32, root)) die("broadcast");
    for (size_t i = 0; i < n; i++) coll_check(st, "broadcast", RT_F32, n, i, get(r, i, RT_F32), ival(TP_SUM, root, i));
    checks++;
    for (size_t i = 0; i < n; i++) put(s, i, RT_I32, ival(TP_SUM, rank_, i));
    if (tp_allgather(comm, s, r, n, RT_I32)) die("allgather");
    size_t all = n * (size_t)world_;
    for (size_t i = 0; i < all; i++)
        coll_check(st, "allgather", RT_I32, all, i, get(r, i, RT_I32), ival(TP_SUM, (int)(i / n), i % n));
    if (n || !st->tcp_counts) checks++;
    if (tp_barrier(comm)) die("barrier");
    if (!st->tcp_counts) checks++;
}

/* Allreduce of len bytes until it fails: prints "failed at T: MSG" and returns 3. Rank
 * victim SIGKILLs itself after iters iterations, printing "killed at T" first (T:
 * CLOCK_MONOTONIC seconds). max >= 0 bounds the iterations: past them it prints "no
 * failure in MAX iterations" and returns 4. */
#ifndef COLL_ALLOC /* the includer may give its own (registered memory) */
#define COLL_ALLOC malloc
#define COLL_FREE free
#endif
static int coll_loop(size_t len, int victim, int iters, int max)
{
    float *s = COLL_ALLOC(len + 4), *r = COLL_ALLOC(len + 4);
    memset(s, 0, len + 4), memset(r, 0, len + 4);
    for (int it = 0; max < 0 || it < max; it++) {
        if (rank_ == victim && it == iters) {
            printf("killed at %.6f\n", port_now_s());
            fflush(stdout);
            raise(SIGKILL);
        }
        if (tp_allreduce(comm, s, r, len / 4, RT_F32, TP_SUM)) {
            printf("failed at %.6f: %s\n", port_now_s(), tp_errmsg(comm));
            COLL_FREE(s), COLL_FREE(r);
            return 3;
        }
    }
    COLL_FREE(s), COLL_FREE(r);
    printf("no failure in %d iterations\n", max);
    return 4;
}

/* The programs' command line, MODE INIT RANK WORLD [key=value...]: the rendezvous
 * (INIT "-": the launcher's variables; keys token, timeout) and the keys the modes
 * read (len, victim, iters, max, algo rd|ring, sleep_ms); other keys are ignored.
 * 0, or 2 after the usage line. */
typedef struct coll_args {
    rt_rdzv_opts o;
    size_t len;
    int victim, iters, max, algo, sleep_ms;
} coll_args;

static int coll_args_parse(coll_args *a, int argc, char **argv, const char *prog, size_t len)
{
    if (argc < 5) { fprintf(stderr, "usage: %s MODE INIT RANK WORLD [key=value...]\n", prog); return 2; }
    *a = (coll_args){.o = {NULL, atoi(argv[3]), atoi(argv[4]), -1, 0, NULL, 0}, .len = len, .victim = -1,
                     .iters = 3, .max = 200, .algo = TP_ALGO_DEFAULT};
    if (strcmp(argv[2], "-")) a->o.init_method = argv[2];
    for (int i = 5; i < argc; i++) {
        char *v = strchr(argv[i], '=');
        if (!v) continue;
        *v++ = 0;
        if (!strcmp(argv[i], "token")) a->o.token = v;
        else if (!strcmp(argv[i], "timeout")) a->o.timeout_s = atof(v);
        else if (!strcmp(argv[i], "len")) a->len = (size_t)atol(v);
        else if (!strcmp(argv[i], "victim")) a->victim = atoi(v);
        else if (!strcmp(argv[i], "iters")) a->iters = atoi(v);
        else if (!strcmp(argv[i], "max")) a->max = atoi(v);
        else if (!strcmp(argv[i], "algo")) a->algo = !strcmp(v, "rd") ? TP_ALGO_RD : TP_ALGO_RING;
        else if (!strcmp(argv[i], "sleep_ms")) a->sleep_ms = atoi(v);
    }
    return 0;
}

/* Joins the job: sets rank_ and world_ and fills bs. NULL (after "ERR rendezvous: ..."
 * on stderr) when the rendezvous fails. */
static rt_rdzv *coll_join(const rt_rdzv_opts *o, tp_bootstrap *bs)
{
    char err[512];
    rt_rdzv *rz;
    if (rt_rdzv_open(&rz, o, err, sizeof err)) {
        fprintf(stderr, "ERR rendezvous: %s\n", err);
        return NULL;
    }
    rank_ = rt_rdzv_rank(rz), world_ = rt_rdzv_world(rz);
    rt_log_set_rank(rank_);
    tp_bootstrap_rdzv(bs, rz);
    return rz;
}

/* Leaves the job; main's exit status: rc when set, else 1 after wrong elements, else 0
 * after "rank R of W ok (N checks)". */
static int coll_leave(rt_rdzv *rz, int rc)
{
    tp_comm_destroy(comm);
    rt_rdzv_close(rz);
    if (rc) return rc;
    if (bad) { fprintf(stderr, "rank %d: %d wrong elements\n", rank_, bad); return 1; }
    printf("rank %d of %d ok (%d checks)\n", rank_, world_, checks);
    return 0;
}
#endif
