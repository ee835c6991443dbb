/* ddprt-bench runner: sizes loop, timing, the result check, and the two ways to get
 * a communicator (tcp through the rendezvous; loopback threads in one process). */
#include "apps/bench/bench.h"
#include "apps/bench/bench_values.h"
#include "rt/env.h"
#include "ports/posix/port.h"
#include "rt/log.h"
#include "rt/rdzv.h"
#include "transport/tp_reduce.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- inputs and expected results: small integers, exact in every dtype ----------- */

static void fill(void *buf, size_t n, int op, int dt, int r, size_t first)
{
    for (size_t i = 0; i < n; i++) bench_put(buf, i, dt, (double)bench_value(op, dt, r, first + i));
}

static size_t count_wrong(const void *buf, size_t n, int dt, size_t first, double (*want)(size_t, const void *),
                          const void *arg)
{
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        double g = bench_get(buf, i, dt), w = want(first + i, arg);
        if (g != w && !(fabs(g - w) <= 1e-2 * fabs(w) && (dt == RT_F16 || dt == RT_BF16 || dt == RT_F32)))
            bad++;
    }
    return bad;
}

typedef struct { int op, dt, world, root; } want_ctx;
static double want_reduce(size_t i, const void *a)
{
    const want_ctx *w = a;
    return bench_reduced(w->op, w->dt, w->world, i);
}
static double want_rank(size_t i, const void *a) /* element i of rank root's input */
{
    const want_ctx *w = a;
    return bench_as(w->dt, (double)bench_value(w->op, w->dt, w->root, i));
}

/* ---- one collective call --------------------------------------------------------- */

typedef struct { const bench_opts *o; tp_comm *c; void *s, *r; size_t n; } call_t;

static int run_once(const call_t *k)
{
    const bench_opts *o = k->o;
    switch (o->coll) {
    case B_ALLREDUCE: return tp_allreduce(k->c, k->s, k->r, k->n, o->dtype, o->op);
    case B_BROADCAST: return tp_broadcast(k->c, k->r, k->n, o->dtype, o->root);
    case B_REDUCE_SCATTER: return tp_reduce_scatter(k->c, k->s, k->r, k->n, o->dtype, o->op);
    default: return tp_allgather(k->c, k->s, k->r, k->n, o->dtype);
    }
}

static size_t checked_run(const call_t *k, int rank, int world, int *rc)
{
    const bench_opts *o = k->o;
    want_ctx w = {o->op, o->dtype, world, o->root};
    size_t ts = rt_dtype_size(o->dtype), n = k->n;
    switch (o->coll) {
    case B_ALLREDUCE:
        fill(k->s, n, o->op, o->dtype, rank, 0);
        memset(k->r, 0xa5, n * ts);
        if ((*rc = run_once(k))) return 0;
        return count_wrong(k->r, n, o->dtype, 0, want_reduce, &w);
    case B_BROADCAST:
        if (rank == o->root) fill(k->r, n, o->op, o->dtype, rank, 0);
        else memset(k->r, 0xa5, n * ts);
        if ((*rc = run_once(k))) return 0;
        return count_wrong(k->r, n, o->dtype, 0, want_rank, &w);
    case B_REDUCE_SCATTER:
        fill(k->s, n * (size_t)world, o->op, o->dtype, rank, 0);
        memset(k->r, 0xa5, n * ts);
        if ((*rc = run_once(k))) return 0;
        return count_wrong(k->r, n, o->dtype, (size_t)rank * n, want_reduce, &w);
    default: {
        size_t bad = 0;
        fill(k->s, n, o->op, o->dtype, rank, 0);
        memset(k->r, 0xa5, n * ts * (size_t)world);
        if ((*rc = run_once(k))) return 0;
        for (int q = 0; q < world; q++) {
            w.root = q;
            bad += count_wrong((char *)k->r + (size_t)q * n * ts, n, o->dtype, 0, want_rank, &w);
        }
        return bad;
    }
    }
}

/* ---- the sizes loop -------------------------------------------------------------- */

static int die(tp_comm *c, const char *what)
{
    fprintf(stderr, "ddprt-bench[rank %d]: %s failed: %s\n", tp_rank(c), what, tp_errmsg(c));
    return 1;
}

static void header(const bench_opts *o, int world, const char *backend, tp_comm *c)
{
    const char *algo = o->algo == TP_ALGO_RING ? "ring" : o->algo == TP_ALGO_RD ? "rd"
                     : o->algo == TP_ALGO_HIER ? "hier" : NULL;
    if (!algo) {
        const char *e = rt_env_str(RT_ENV_ALGO);
        algo = o->algo == TP_ALGO_DEFAULT && e ? e : "auto";
    }
    printf("# ddprt-bench %s: world %d, backend %s, allreduce algorithm %s", o->coll_name, world, backend, algo);
    if (!strcmp(algo, "auto"))
        printf(" (rd below %d B, else hierarchical across several hosts of several ranks, else ring)",
               TP_AUTO_RD_MAX_BYTES);
    printf(", reduce ISA %s, comm scratch %zu KiB\n", rt_isa_name(tp_isa_active()),
           tp_comm_arena_bytes(c) >> 10);
    printf("# dtype %s, op %s, iters %d, warmup %d, check %s, buffers %s; iterations shrink so one size moves at most "
           "%.3g GiB per rank\n", o->type_name, tp_op_names[o->op], o->iters, o->warmup, o->check ? "on" : "off",
           o->registered ? "registered" : "malloc", (double)o->byte_budget / (1 << 30));
    printf("#\n# %10s %12s %8s %6s %6s %10s %8s %8s %7s\n", "size", "count", "type", "redop", "iters",
           "time", "algbw", "busbw", "#wrong");
    printf("# %10s %12s %8s %6s %6s %10s %8s %8s %7s\n", "(B)", "(elements)", "", "", "", "(us)", "(GB/s)",
           "(GB/s)", "");
    fflush(stdout);
}

static int run_sizes(tp_comm *c, const bench_opts *o, const char *backend)
{
    int rank = tp_rank(c), world = tp_world(c), print = rank == 0;
    /* The world is known only now (--world-size may come from the environment). */
    if (o->coll == B_BROADCAST && o->root >= world) {
        if (print) fprintf(stderr, "ddprt-bench: error: --root %d is out of range for %d ranks (0..%d)\n", o->root, world,
                           world - 1);
        return 2;
    }
    size_t ts = rt_dtype_size(o->dtype), maxb = o->max_bytes + ts * (size_t)world;
    char *s = o->registered ? tp_mem_alloc(c, maxb) : malloc(maxb);
    char *r = o->registered ? tp_mem_alloc(c, maxb) : malloc(maxb);
    if (!s || !r) { fprintf(stderr, "ddprt-bench: cannot allocate 2 x %zu bytes\n", maxb); return 1; }
    memset(s, 0, maxb), memset(r, 0, maxb);
    fill(s, maxb / ts, o->op, o->dtype, rank, 0);
    if (print) header(o, world, backend, c);
    double bw_sum = 0;
    int nrows = 0;
    for (size_t size = o->min_bytes;;) {
        size_t count = size / ts, n = count, bytes;
        double busf = 1;
        if (o->coll == B_ALLREDUCE) busf = 2.0 * (world - 1) / world;
        if (o->coll == B_REDUCE_SCATTER || o->coll == B_ALLGATHER) {
            n = count / (size_t)world; /* per-rank block; the row's size is the whole */
            count = n * (size_t)world;
            busf = (double)(world - 1) / world;
        }
        bytes = count * ts;
        call_t k = {o, c, s, r, n};
        int iters = o->iters, warm = o->warmup;
        if (bytes && (uint64_t)bytes * (uint64_t)iters > o->byte_budget) {
            iters = (int)(o->byte_budget / bytes);
            if (iters < 1) iters = 1;
            if (warm > 1) warm = 1;
        }
        for (int i = 0; i < warm; i++)
            if (run_once(&k)) return die(c, o->coll_name);
        if (tp_barrier(c)) return die(c, "barrier");
        double t0 = port_now_s();
        for (int i = 0; i < iters; i++)
            if (run_once(&k)) return die(c, o->coll_name);
        double dt = (port_now_s() - t0) / iters;
        if (tp_allreduce(c, &dt, &dt, 1, RT_F64, TP_MAX)) return die(c, "timing allreduce");
        int64_t wrong = 0;
        if (o->check) {
            int rc = 0;
            wrong = (int64_t)checked_run(&k, rank, world, &rc);
            if (rc) return die(c, o->coll_name);
            if (tp_allreduce(c, &wrong, &wrong, 1, RT_I64, TP_SUM)) return die(c, "check allreduce");
        }
        double algbw = bytes / dt / 1e9, busbw = algbw * busf;
        if (print) {
            printf("  %10zu %12zu %8s %6s %6d %10.2f %8.3f %8.3f %7s%lld\n", bytes, count, o->type_name,
                   o->coll == B_ALLREDUCE || o->coll == B_REDUCE_SCATTER ? tp_op_names[o->op] : "none",
                   iters, dt * 1e6, algbw, busbw, o->check ? "" : "N/A ", o->check ? (long long)wrong : 0LL);
            fflush(stdout);
        }
        bw_sum += busbw, nrows++;
        if (size > o->max_bytes / (size_t)o->factor) break;
        size = size ? size * (size_t)o->factor : 1;
    }
    if (print) printf("# Avg bus bandwidth    : %.3f GB/s\n#\n", nrows ? bw_sum / nrows : 0);
    if (o->registered) tp_mem_free(c, s), tp_mem_free(c, r);
    else free(s), free(r);
    return 0;
}

/* ---- communicators --------------------------------------------------------------- */

static tp_comm_opts comm_opts(const bench_opts *o)
{
    tp_comm_opts co = {.timeout_s = o->timeout_s, .algo = o->algo, .arena_bytes = o->arena_bytes};
    return co;
}

int bench_tcp(const bench_opts *o)
{
    char err[512];
    rt_rdzv *rz = NULL;
    rt_rdzv_opts ro = {.init_method = o->init_method, .rank = o->rank, .world_size = o->world,
                       .local_rank = -1, .timeout_s = o->timeout_s};
    if (rt_rdzv_open(&rz, &ro, err, sizeof err)) {
        fprintf(stderr, "ddprt-bench: rendezvous: %s\n", err);
        return 1;
    }
    rt_log_set_rank(rt_rdzv_rank(rz));
    tp_bootstrap bs;
    tp_bootstrap_rdzv(&bs, rz);
    tp_backend *b = NULL;
    tp_comm *c = NULL;
    tp_comm_opts co = comm_opts(o);
    if (tp_backend_create(&bs, o->backend, &b, err, sizeof err) || tp_comm_create(&c, b, &co, err, sizeof err)) {
        fprintf(stderr, "ddprt-bench[rank %d]: %s\n", rt_rdzv_rank(rz), err);
        rt_rdzv_close(rz);
        return 1;
    }
    int rc = !strcmp(o->device, "cuda") ? bench_device(c, o, b->ops->name, rt_rdzv_local_rank(rz))
                                        : run_sizes(c, o, b->ops->name);
    if (rc) tp_abort(c, "benchmark failed");
    tp_comm_destroy(c);
    rt_rdzv_close(rz);
    return rc;
}

typedef struct { const bench_opts *o; tp_backend *b; int rc; } lb_arg;

static void *lb_thread(void *p)
{
    lb_arg *a = p;
    char err[256];
    tp_comm *c = NULL;
    tp_comm_opts co = comm_opts(a->o);
    if (tp_comm_create(&c, a->b, &co, err, sizeof err)) {
        fprintf(stderr, "ddprt-bench: %s\n", err);
        a->rc = 1;
        return NULL;
    }
    a->rc = run_sizes(c, a->o, "loopback (threads)");
    if (a->rc) tp_abort(c, "benchmark failed");
    tp_comm_destroy(c);
    return NULL;
}

int bench_loopback(const bench_opts *o)
{
    int world = o->world > 0 ? o->world : 2, rc = 0;
    tp_backend **bs = calloc((size_t)world, sizeof *bs);
    lb_arg *args = calloc((size_t)world, sizeof *args);
    port_thread *th = calloc((size_t)world, sizeof *th);
    if (!bs || !args || !th || tp_loopback_create(world, bs)) {
        fprintf(stderr, "ddprt-bench: cannot create the loopback backend\n");
        return 1;
    }
    for (int r = 0; r < world; r++) {
        args[r] = (lb_arg){o, bs[r], 0};
        port_thread_start(&th[r], lb_thread, &args[r]);
    }
    for (int r = 0; r < world; r++) {
        port_thread_join(th[r]);
        rc |= args[r].rc;
    }
    free(bs), free(args), free(th);
    return rc;
}
