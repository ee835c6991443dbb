/* ddprt-bench allreduce --device cuda: the device allreduce's table, nccl-tests style,
 * for the two paths of one comm side by side, and the device-to-device copy of the same
 * size (the reference of issue 42's goal: IPC >= 10x staged, >= 70 % of the D2D copy):
 *
 *   ipc     a staging registered for CUDA IPC (tp_staging_ipc: cuda_ipc on one host,
 *           hierarchical across hosts; the header names the path it took)
 *   staged  a second staging never registered: D2H, the host collective, H2D (the path
 *           DDPRT_P2P=0 gives)
 *   d2d     cudaMemcpy device to device of the size, on this rank's stream
 *
 * One process per rank (ddprt-launch); rank r uses GPU r % count (every rank shares
 * GPU 0 on a one-GPU machine: CUDA allows IPC within a device). Times are the slowest
 * rank's mean; busbw = algbw x 2(n-1)/n; the copy's bandwidth is bytes / time. #wrong
 * counts elements of a checked run of each path (small integers: the exact result is
 * known). Linked with the SIMT executor (build/t-bench-simt) it runs without a GPU,
 * for the table's shape only. */
#include "apps/bench/bench.h"
#include "apps/bench/bench_values.h"
#include "ports/cuda/port_cuda.h"
#include "ports/posix/port.h"
#include "transport/tp_staged.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct dpath {
    tp_dev_cuda dc;
    tp_staging st;
    void *pinned;
} dpath;

typedef struct dbench {
    const bench_opts *o;
    tp_comm *c;
    port_stream s;
    unsigned char *buf, *dst; /* buf: the region (registered for IPC); dst: the copy's target */
    void *host;
    dpath p[2];               /* 0 ipc, 1 staged */
} dbench;

static int fail(tp_comm *c, const char *what, const char *why)
{
    fprintf(stderr, "ddprt-bench[rank %d]: %s failed: %s\n", tp_rank(c), what, why);
    return 1;
}

static int path_init(dbench *b, dpath *p, int device)
{
    size_t pin = tp_staging_bytes(TP_STAGE_DEFAULT_CHUNK, TP_STAGE_DEFAULT_SLOTS);
    return tp_dev_cuda_init(&p->dc, device, b->s, TP_STAGE_DEFAULT_SLOTS) ||
                   port_pinned_malloc(&p->pinned, pin, "bench staging") ||
                   tp_staging_init(&p->st, &tp_dev_cuda_ops, &p->dc, p->pinned, TP_STAGE_DEFAULT_CHUNK,
                                   TP_STAGE_DEFAULT_SLOTS)
               ? -1
               : 0;
}

/* iters allreduces on path p (then the stream drained): the mean seconds, slowest rank. */
static int time_path(dbench *b, dpath *p, size_t n, int warm, int iters, double *t)
{
    const bench_opts *o = b->o;
    for (int i = 0; i < warm + iters; i++) {
        if (i == warm) {
            if (port_stream_sync(b->s, "bench") || tp_barrier(b->c)) return -1;
            *t = port_now_s();
        }
        if (tp_allreduce_device(b->c, b->buf, n, o->dtype, o->op, &p->st)) return -1;
    }
    if (port_stream_sync(b->s, "bench")) return -1;
    *t = (port_now_s() - *t) / iters;
    return tp_allreduce(b->c, t, t, 1, RT_F64, TP_MAX);
}

/* One checked allreduce of small integers on path p: wrong elements, all ranks summed. */
static int check_path(dbench *b, dpath *p, size_t n, int64_t *wrong)
{
    const bench_opts *o = b->o;
    int rank = tp_rank(b->c), world = tp_world(b->c);
    size_t es = rt_dtype_size(o->dtype);
    for (size_t i = 0; i < n; i++) bench_put(b->host, i, o->dtype, (double)bench_value(o->op, o->dtype, rank, i));
    if (port_memcpy_h2d(b->buf, b->host, n * es, b->s, "bench input") || port_stream_sync(b->s, "bench") ||
        tp_allreduce_device(b->c, b->buf, n, o->dtype, o->op, &p->st) ||
        port_memcpy_d2h(b->host, b->buf, n * es, b->s, "bench output") || port_stream_sync(b->s, "bench"))
        return -1;
    *wrong = 0;
    for (size_t i = 0; i < n; i++) {
        double g = bench_get(b->host, i, o->dtype), w = bench_reduced(o->op, o->dtype, world, i);
        *wrong += g != w && !(fabs(g - w) <= 1e-2 * fabs(w));
    }
    return tp_allreduce(b->c, wrong, wrong, 1, RT_I64, TP_SUM);
}

static double time_copy(dbench *b, size_t bytes, int iters)
{
    double t = 0;
    if (port_memcpy_d2d(b->dst, b->buf, bytes, b->s, "bench copy") || port_stream_sync(b->s, "bench")) return -1;
    t = port_now_s();
    for (int i = 0; i < iters; i++)
        if (port_memcpy_d2d(b->dst, b->buf, bytes, b->s, "bench copy")) return -1;
    if (port_stream_sync(b->s, "bench")) return -1;
    t = (port_now_s() - t) / iters;
    return tp_allreduce(b->c, &t, &t, 1, RT_F64, TP_MAX) ? -1 : t;
}

/* A figure in 8 columns that stays above 0 when it is (tiny sizes: exponent form). */
static const char *num(char s[16], double v)
{
    snprintf(s, 16, v > 0 && v < 0.01 ? "%8.2e" : "%8.3f", v);
    return s;
}

static int sizes(dbench *b, const char *backend)
{
    const bench_opts *o = b->o;
    tp_comm *c = b->c;
    int world = tp_world(c), print = tp_rank(c) == 0;
    size_t ts = rt_dtype_size(o->dtype);
    double busf = 2.0 * (world - 1) / world, sum[2] = {0, 0};
    int nrows = 0;
    if (print) {
        printf("# ddprt-bench allreduce --device cuda: world %d, backend %s, dtype %s, op %s, iters %d, warmup %d\n",
               world, backend, o->type_name, tp_op_names[o->op], o->iters, o->warmup);
        printf("# ipc: the registered staging's path (%s); staged: pinned staging (as DDPRT_P2P=0); d2d: cudaMemcpy "
               "device to device\n#\n", tp_staging_path(&b->p[0].st));
        printf("# %10s %11s %5s | %9s %8s %8s %6s | %9s %8s %8s %6s | %9s %8s | %8s %8s\n", "size", "count", "iters",
               "ipc-time", "algbw", "busbw", "#wrong", "stg-time", "algbw", "busbw", "#wrong", "d2d-time", "bw",
               "ipc/stg", "ipc/cp");
        printf("# %10s %11s %5s | %9s %8s %8s %6s | %9s %8s %8s %6s | %9s %8s | %8s %8s\n", "(B)", "(elements)", "",
               "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(x)", "(%)");
        fflush(stdout);
    }
    for (size_t size = o->min_bytes;; size *= (size_t)o->factor) {
        size_t n = size / ts ? size / ts : 1, bytes = n * ts;
        int iters = o->iters, warm = o->warmup;
        if ((uint64_t)bytes * (uint64_t)iters > o->byte_budget) {
            iters = (int)(o->byte_budget / bytes);
            iters = iters < 1 ? 1 : iters;
            warm = warm > 1 ? 1 : warm;
        }
        double t[2], bus[2], cp;
        int64_t wrong[2] = {0, 0};
        for (int k = 0; k < 2; k++) {
            if (time_path(b, &b->p[k], n, warm, iters, &t[k]) ||
                (o->check && check_path(b, &b->p[k], n, &wrong[k])))
                return fail(c, k ? "staged allreduce" : "ipc allreduce", tp_errmsg(c)[0] ? tp_errmsg(c)
                                                                                           : port_cuda_errmsg());
            bus[k] = bytes / t[k] / 1e9 * busf;
            sum[k] += bus[k];
        }
        if ((cp = time_copy(b, bytes, iters)) <= 0) return fail(c, "device copy", port_cuda_errmsg());
        nrows++;
        if (print) {
            char f[7][16];
            printf("  %10zu %11zu %5d | %9.2f %s %s %6lld | %9.2f %s %s %6lld | %9.2f %s | %s %s\n", bytes, n, iters,
                   t[0] * 1e6, num(f[0], bytes / t[0] / 1e9), num(f[1], bus[0]), (long long)wrong[0], t[1] * 1e6,
                   num(f[2], bytes / t[1] / 1e9), num(f[3], bus[1]), (long long)wrong[1], cp * 1e6,
                   num(f[4], bytes / cp / 1e9), num(f[6], t[1] / t[0]), num(f[5], 100.0 * bus[0] / (bytes / cp / 1e9)));
            fflush(stdout);
        }
        if (size > o->max_bytes / (size_t)o->factor) break;
    }
    if (print) printf("# Avg bus bandwidth    : ipc %.3f GB/s, staged %.3f GB/s\n#\n", sum[0] / nrows, sum[1] / nrows);
    return 0;
}

int bench_device(tp_comm *c, const bench_opts *o, const char *backend, int local_rank)
{
    char err[256];
    dbench b = {.o = o, .c = c};
    size_t maxb = o->max_bytes + rt_dtype_size(o->dtype);
    int ndev = port_cuda_device_count(), dev = ndev > 0 ? (local_rank < 0 ? 0 : local_rank) % ndev : 0, rc;
    if (port_cuda_init(dev, err, sizeof err)) return fail(c, "--device cuda", err);
    if (port_stream_create(&b.s, "bench stream") || port_dev_malloc((void **)&b.buf, maxb, "bench buffer") ||
        port_dev_malloc((void **)&b.dst, maxb, "bench copy target") || !(b.host = malloc(maxb)) ||
        path_init(&b, &b.p[0], dev) || path_init(&b, &b.p[1], dev))
        return fail(c, "device set-up", port_cuda_errmsg());
    memset(b.host, 0, maxb);
    if (port_memcpy_h2d(b.buf, b.host, maxb, b.s, "bench zero") || port_stream_sync(b.s, "bench"))
        return fail(c, "device set-up", port_cuda_errmsg());
    /* Collective: the device plan is chosen and logged here (rank 0). */
    if ((rc = tp_staging_ipc(c, &b.p[0].st, dev, b.buf, maxb, b.s))) return fail(c, "CUDA IPC set-up", tp_errmsg(c));
    rc = sizes(&b, backend);
    /* The peers may still map buf until the comm is destroyed: the device memory goes with
     * the process. */
    for (int k = 0; k < 2; k++) tp_dev_cuda_destroy(&b.p[k].dc), port_pinned_free(b.p[k].pinned);
    free(b.host);
    return rc;
}
