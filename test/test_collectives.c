/* Collectives over the loopback backend, one thread per rank, against a serial
 * reference (exact inputs: see test/tp_harness.h, so results compare bit for bit).
 *
 * Matrix size (kept fast for 2 cores under TSan/ASan at -O1):
 *  - full matrix: every dtype x op x world 1..8 x counts {0, 1, 7, 1 KiB + 3}, for
 *    allreduce with each algorithm forced (ring, rd) and for reduce-scatter;
 *    allgather and broadcast (no op) over every dtype x world x count, both
 *    broadcast algorithms;
 *  - big counts only on a few combinations: 1 Mi + 5 elements for f32/bf16 sum,
 *    f16 avg, i64 max, u8 prod at worlds {2, 3, 8}, and 16 MiB of f32 sum (ring) at
 *    worlds {2, 5}; plus reduce-scatter/allgather/broadcast of ~1 MiB; sanitizer
 *    builds run these on world 3 (16 MiB: world 2) only;
 *  - a 4.5 KiB scratch arena (512-byte chunks) so that pipelining, reduce-scatter
 *    column groups and rd pieces run with many chunks on mid-size vectors. */
#include "test/t.h"
#include "test/tp_harness.h"
#include <stdarg.h>

/* Sanitizer builds (-O1, 5-15x slower) run the big sizes on fewer world sizes. */
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define SANITIZED 1
#else
#define SANITIZED 0
#endif

enum { K_ALLREDUCE, K_REDUCE_SCATTER, K_ALLGATHER, K_BROADCAST };
static const char *const knames[] = {"allreduce", "reduce_scatter", "allgather", "broadcast"};

typedef struct matrix {
    int kind;
    const rt_dtype *dts;
    int ndt;
    const tp_op *ops;
    int nops;
    const size_t *counts;
    int ncounts;
    int world;
    port_mutex mu;
    int nfail;
    char first[256];
} matrix;

static const rt_dtype all_dts[] = {RT_F32, RT_F64, RT_F16, RT_BF16, RT_I32, RT_I64, RT_U8};
static const tp_op all_ops[] = {TP_SUM, TP_PROD, TP_MIN, TP_MAX, TP_AVG};
static const size_t small_counts[] = {0, 1, 7, 1024 + 3};

static void mfail(matrix *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void mfail(matrix *m, const char *fmt, ...)
{
    va_list ap;
    port_mutex_lock(&m->mu);
    if (!m->nfail++) {
        va_start(ap, fmt);
        vsnprintf(m->first, sizeof m->first, fmt, ap);
        va_end(ap);
    }
    port_mutex_unlock(&m->mu);
}

/* Runs one collective on one rank and checks this rank's output; 0 ok. */
static int one_case(tp_comm *c, matrix *m, unsigned char *sb, unsigned char *rb, rt_dtype dt,
                    tp_op op, size_t n, int variant)
{
    int r = tp_rank(c), w = tp_world(c), rc = 0;
    size_t es = rt_dtype_size(dt);
    long bad = -1;
    memset(rb, 0xa5, (n * (size_t)w + 1) * es); /* garbage, and a canary past the end */
    switch (m->kind) {
    case K_ALLREDUCE: {
        unsigned char *src = variant ? rb : sb; /* variant 1: in place */
        tpt_fill(dt, op, r, src, 0, n);
        rc = tp_allreduce(c, src, rb, n, dt, op);
        if (!rc) bad = tpt_check(dt, op, w, rb, 0, n);
        break;
    }
    case K_REDUCE_SCATTER:
        tpt_fill(dt, op, r, sb, 0, n * (size_t)w);
        rc = tp_reduce_scatter(c, sb, rb, n, dt, op);
        if (!rc) bad = tpt_check(dt, op, w, rb, (size_t)r * n, n);
        break;
    case K_ALLGATHER: {
        /* variant 1: the send block already sits in recv (in place). */
        unsigned char *src = variant ? rb + (size_t)r * n * es : sb;
        tpt_fill(dt, TP_SUM, r, src, 0, n);
        rc = tp_allgather(c, src, rb, n, dt);
        for (int q = 0; q < w && !rc && bad < 0; q++) {
            long b = tpt_check_vals(dt, TP_SUM, q, rb + (size_t)q * n * es, 0, n);
            if (b >= 0) bad = (long)((size_t)q * n) + b;
        }
        break;
    }
    case K_BROADCAST: {
        int root = (int)(n % (size_t)w);
        if (r == root) tpt_fill(dt, TP_SUM, 77, rb, 0, n);
        rc = tp_broadcast(c, rb, n, dt, root);
        if (!rc) bad = tpt_check_vals(dt, TP_SUM, 77, rb, 0, n);
        break;
    }
    }
    size_t outn = m->kind == K_ALLGATHER ? n * (size_t)w : n;
    int canary = rb[outn * es] == 0xa5;
    if (rc || bad >= 0 || !canary)
        mfail(m, "%s %s %s world %d count %zu variant %d rank %d: %s%s (first bad element %ld)",
              knames[m->kind], rt_dtype_names[dt], tp_op_names[op], w, n, variant, r,
              rc ? tp_errmsg(c) : "wrong result", canary ? "" : ", wrote past the end", bad);
    return rc;
}

static void matrix_rank(tp_comm *c, void *arg)
{
    matrix *m = arg;
    size_t maxn = 0;
    for (int k = 0; k < m->ncounts; k++) maxn = m->counts[k] > maxn ? m->counts[k] : maxn;
    size_t cap = (maxn * (size_t)tp_world(c) + 1) * 8;
    unsigned char *sb = malloc(cap), *rb = malloc(cap);
    int nops = m->kind == K_ALLREDUCE || m->kind == K_REDUCE_SCATTER ? m->nops : 1;
    int rc = 0;
    for (int d = 0; d < m->ndt && !rc; d++)
        for (int o = 0; o < nops && !rc; o++)
            for (int k = 0; k < m->ncounts && !rc; k++)
                rc = one_case(c, m, sb, rb, m->dts[d], m->ops[o], m->counts[k], (d + o + k) % 2);
    free(sb);
    free(rb);
}

static const uint64_t *g_hosts; /* fake topology for the next run_matrix (NULL: learned) */

static void run_matrix(int kind, int algo, size_t arena, const int *worlds, int nworlds,
                       const rt_dtype *dts, int ndt, const tp_op *ops, int nops,
                       const size_t *counts, int ncounts)
{
    for (int i = 0; i < nworlds; i++) {
        matrix m = {.kind = kind, .dts = dts, .ndt = ndt, .ops = ops, .nops = nops,
                    .counts = counts, .ncounts = ncounts, .world = worlds[i]};
        port_mutex_init(&m.mu);
        tp_comm_opts o = {.timeout_s = 60, .algo = algo, .arena_bytes = arena, .host_ids = g_hosts};
        tpt_world w;
        CHECK(tpt_open(&w, worlds[i], &o) == 0);
        tpt_run(&w, matrix_rank, &m);
        tpt_close(&w);
        CHECKF(m.nfail == 0, "%d failures; first: %s", m.nfail, m.first);
    }
}

static const int worlds_1_8[] = {1, 2, 3, 4, 5, 6, 7, 8};
#define N(a) ((int)(sizeof(a) / sizeof((a)[0])))

TEST(tp_allreduce_ring_matrix)
{
    run_matrix(K_ALLREDUCE, TP_ALGO_RING, 0, worlds_1_8, 8, all_dts, N(all_dts), all_ops, N(all_ops),
               small_counts, N(small_counts));
}

TEST(tp_allreduce_rd_matrix)
{
    run_matrix(K_ALLREDUCE, TP_ALGO_RD, 0, worlds_1_8, 8, all_dts, N(all_dts), all_ops, N(all_ops),
               small_counts, N(small_counts));
}

TEST(tp_reduce_scatter_matrix)
{
    run_matrix(K_REDUCE_SCATTER, TP_ALGO_AUTO, 0, worlds_1_8, 8, all_dts, N(all_dts), all_ops,
               N(all_ops), small_counts, N(small_counts));
}

TEST(tp_allgather_broadcast_matrix)
{
    run_matrix(K_ALLGATHER, TP_ALGO_AUTO, 0, worlds_1_8, 8, all_dts, N(all_dts), all_ops, 1,
               small_counts, N(small_counts));
    run_matrix(K_BROADCAST, TP_ALGO_RING, 0, worlds_1_8, 8, all_dts, N(all_dts), all_ops, 1,
               small_counts, N(small_counts));
    run_matrix(K_BROADCAST, TP_ALGO_RD, 0, worlds_1_8, 8, all_dts, N(all_dts), all_ops, 1,
               small_counts, N(small_counts));
}

/* Hierarchical allreduce on fake hosts: grids (hosts in rank blocks or interleaved),
 * and irregular ones that must fall back to the flat ring. */
TEST(tp_allreduce_hier_matrix)
{
    static const struct { int world, hosts, interleaved; } topo[] = {
        {4, 2, 0}, {6, 2, 0}, {6, 3, 0}, {8, 2, 1}, {6, 3, 1}, {3, 2, 0}, {5, 2, 0}, {4, 1, 0}, {4, 4, 0}};
    static uint64_t h[8];
    for (int t = 0; t < N(topo); t++) {
        int w = topo[t].world, nh = topo[t].hosts, per = (w + nh - 1) / nh;
        for (int r = 0; r < w; r++) h[r] = 1000 + (uint64_t)(topo[t].interleaved ? r % nh : r / per);
        g_hosts = h;
        run_matrix(K_ALLREDUCE, TP_ALGO_HIER, 0, &topo[t].world, 1, all_dts, N(all_dts), all_ops, N(all_ops),
                   small_counts, N(small_counts));
    }
    /* Many chunks per block (4.5 KiB scratch) and a big vector. */
    static const size_t mid[] = {5000, (1 << 20) + 5};
    static const rt_dtype f32[] = {RT_F32}, f16[] = {RT_F16};
    static const tp_op sum[] = {TP_SUM}, avg[] = {TP_AVG};
    static const int w6[] = {6};
    for (int r = 0; r < 6; r++) h[r] = (uint64_t)(r / 2);
    run_matrix(K_ALLREDUCE, TP_ALGO_HIER, 4608, w6, 1, f32, 1, sum, 1, mid, 1);
    run_matrix(K_ALLREDUCE, TP_ALGO_AUTO, 0, w6, 1, f32, 1, sum, 1, mid + 1, 1);
    run_matrix(K_ALLREDUCE, TP_ALGO_HIER, 0, w6, 1, f16, 1, avg, 1, mid + 1, 1);
    /* Several pipelined segments (4 MiB each): 12 MiB + 28 B over 2 hosts x 2, interleaved. */
    static const size_t seg3[] = {(3u << 20) + 7};
    static const int w4[] = {4};
    for (int r = 0; r < 4; r++) h[r] = (uint64_t)(r % 2);
    run_matrix(K_ALLREDUCE, TP_ALGO_AUTO, 0, w4, 1, f32, 1, avg, 1, seg3, 1);
    g_hosts = NULL;
}

TEST(tp_allreduce_big)
{
    static const int worlds[] = {3, 2, 8};
    const int nw = SANITIZED ? 1 : 3;
    static const size_t big[] = {(1 << 20) + 5};
    static const rt_dtype f32[] = {RT_F32}, bf16[] = {RT_BF16}, f16[] = {RT_F16}, i64[] = {RT_I64},
                          u8[] = {RT_U8};
    static const tp_op sum[] = {TP_SUM}, avg[] = {TP_AVG}, max[] = {TP_MAX}, prod[] = {TP_PROD};
    run_matrix(K_ALLREDUCE, TP_ALGO_AUTO, 0, worlds, nw, f32, 1, sum, 1, big, 1);
    run_matrix(K_ALLREDUCE, TP_ALGO_AUTO, 0, worlds, nw, bf16, 1, sum, 1, big, 1);
    run_matrix(K_ALLREDUCE, TP_ALGO_AUTO, 0, worlds, nw, f16, 1, avg, 1, big, 1);
    run_matrix(K_ALLREDUCE, TP_ALGO_AUTO, 0, worlds, nw, i64, 1, max, 1, big, 1);
    run_matrix(K_ALLREDUCE, TP_ALGO_AUTO, 0, worlds, nw, u8, 1, prod, 1, big, 1);
    run_matrix(K_ALLREDUCE, TP_ALGO_RD, 0, worlds, 1, f32, 1, sum, 1, big, 1);
    static const int w16[] = {2, 5};
    static const size_t mib16[] = {(16u << 20) / 4}; /* 16 MiB of f32 */
    run_matrix(K_ALLREDUCE, TP_ALGO_RING, 0, w16, SANITIZED ? 1 : 2, f32, 1, sum, 1, mib16, 1);
}

TEST(tp_other_collectives_big)
{
    static const int worlds[] = {3, 8};
    const int nw = SANITIZED ? 1 : 2;
    static const size_t rs[] = {(128 << 10) + 3}, ag[] = {(256 << 10) + 1}, bc[] = {(1 << 20) + 5};
    static const rt_dtype f32[] = {RT_F32}, u8[] = {RT_U8};
    static const tp_op sum[] = {TP_SUM};
    run_matrix(K_REDUCE_SCATTER, TP_ALGO_AUTO, 0, worlds, nw, f32, 1, sum, 1, rs, 1);
    run_matrix(K_ALLGATHER, TP_ALGO_AUTO, 0, worlds, nw, f32, 1, sum, 1, ag, 1);
    run_matrix(K_BROADCAST, TP_ALGO_RING, 0, worlds, nw, u8, 1, sum, 1, bc, 1);
    run_matrix(K_BROADCAST, TP_ALGO_RD, 0, worlds, nw, u8, 1, sum, 1, bc, 1);
}

TEST(tp_tiny_arena_many_chunks)
{
    static const int worlds[] = {2, 3, 7};
    static const size_t counts[] = {(64 << 10) + 3, 4099};
    static const rt_dtype dts[] = {RT_F32, RT_BF16, RT_I64};
    static const tp_op ops[] = {TP_SUM, TP_AVG};
    size_t arena = 4608; /* 9 buffers of 512 bytes */
    run_matrix(K_ALLREDUCE, TP_ALGO_RING, arena, worlds, 3, dts, 3, ops, 2, counts, 2);
    run_matrix(K_ALLREDUCE, TP_ALGO_RD, arena, worlds, 3, dts, 1, ops, 1, counts, 2);
    run_matrix(K_REDUCE_SCATTER, TP_ALGO_AUTO, arena, worlds, 3, dts, 3, ops, 2, counts + 1, 1);
    run_matrix(K_ALLGATHER, TP_ALGO_AUTO, arena, worlds, 3, dts, 3, ops, 1, counts + 1, 1);
    run_matrix(K_BROADCAST, TP_ALGO_RING, arena, worlds, 3, dts, 3, ops, 1, counts, 2);
}
