/* The pinned-staging pipeline (transport/tp_staged.c) on CPU: a fake device whose
 * copies are queued and run late (when the pipeline waits for them, as a real copy
 * engine finishes "some time later"), over loopback worlds of 2 and 4 ranks. A
 * schedule that read a slot before its D2H finished, or refilled a slot an H2D was
 * still reading, produces wrong numbers or trips the fake's checks. */
#include "kernels/k.h"
#include "test/t.h"
#include "test/tp_harness.h"
#include "transport/tp_staged.h"
#include <stdlib.h>
#include <string.h>

#define FQ 64 /* queued copies per direction */

typedef struct fake_copy { int slot; void *dst; const void *src; size_t bytes; } fake_copy;
typedef struct fake_dev {
    fake_copy q[2][FQ];
    int head[2], tail[2];
    int violations;     /* slot refilled while an H2D from it was queued */
    int begun, ended, fail_d2h_at; /* fail the n-th D2H (1-based; 0 = never) */
    int d2h_count;
} fake_dev;

static void run_until(fake_dev *f, int dir, int slot)
{
    /* FIFO: running the last copy tagged slot runs everything before it. */
    int last = -1;
    for (int i = f->head[dir]; i < f->tail[dir]; i++)
        if (f->q[dir][i % FQ].slot == slot) last = i;
    for (; f->head[dir] <= last; f->head[dir]++) {
        fake_copy *c = &f->q[dir][f->head[dir] % FQ];
        memcpy(c->dst, c->src, c->bytes);
    }
}

static int push(fake_dev *f, int dir, int slot, void *dst, const void *src, size_t bytes)
{
    if (f->tail[dir] - f->head[dir] == FQ) return -1;
    f->q[dir][f->tail[dir]++ % FQ] = (fake_copy){slot, dst, src, bytes};
    return 0;
}

static int f_d2h(void *ctx, int slot, void *host, const void *dev, size_t bytes)
{
    fake_dev *f = ctx;
    if (++f->d2h_count == f->fail_d2h_at) return -1;
    for (int i = f->head[1]; i < f->tail[1]; i++)
        if (f->q[1][i % FQ].slot == slot) f->violations++;
    return push(f, 0, slot, host, dev, bytes);
}
static int f_h2d(void *ctx, int slot, void *dev, const void *host, size_t bytes)
{
    return push(ctx, 1, slot, dev, host, bytes);
}
static int f_wait_d2h(void *ctx, int slot) { run_until(ctx, 0, slot); return 0; }
static int f_wait_h2d(void *ctx, int slot) { run_until(ctx, 1, slot); return 0; }
static int f_begin(void *ctx) { ((fake_dev *)ctx)->begun++; return 0; }
static int f_end(void *ctx)
{
    /* The consumer waits for the H2D queue: the device buffer is final after this. */
    fake_dev *f = ctx;
    f->ended++;
    for (int s = 0; s < TP_STAGE_MAX_SLOTS; s++) run_until(f, 1, s);
    return 0;
}
static const char *f_err(void *ctx) { (void)ctx; return "fake copy engine failed"; }
static const tp_dev_ops fake_ops = {NULL, f_d2h, f_h2d, f_wait_d2h, f_wait_h2d, f_begin, f_end, f_err};

typedef struct st_case {
    size_t count, chunk;
    int nslots, reps;
    rt_dtype dt;
    tp_op op;
    int fail_rank;   /* rank whose fake D2H fails (-1 none) */
    int bad[TPT_MAXW], violations[TPT_MAXW], rc[TPT_MAXW];
    char msg[TPT_MAXW][256], cmsg[TPT_MAXW][700];
} st_case;

/* Each rank: device buffer (host memory here) with exact values; staged allreduce;
 * compare with the host path on a copy, cut into the same chunks. */
static void st_rank(tp_comm *c, void *arg)
{
    st_case *k = arg;
    int r = tp_rank(c);
    size_t esz = rt_dtype_size(k->dt);
    unsigned char *dev = calloc(k->count + 1, esz), *ref = calloc(k->count + 1, esz);
    void *pinned = aligned_alloc(64, (tp_staging_bytes(k->chunk, k->nslots) + 63) / 64 * 64);
    fake_dev *f = calloc(1, sizeof *f);
    f->fail_d2h_at = r == k->fail_rank ? 2 : 0;
    tp_staging st;
    if (tp_staging_init(&st, &fake_ops, f, pinned, k->chunk, k->nslots)) { k->rc[r] = -100; return; }
    for (int rep = 0; rep < k->reps && !k->rc[r]; rep++) {
        for (size_t i = 0; i < k->count; i++) tpt_store(k->dt, dev, i, (double)tpt_val(k->dt, k->op, r + rep, i));
        memcpy(ref, dev, k->count * esz);
        k->rc[r] = tp_allreduce_device(c, dev, k->count, k->dt, k->op, &st);
        if (k->rc[r]) {
            /* The transport failed the comm itself: the peers see it closed. */
            snprintf(k->msg[r], sizeof k->msg[r], "%s", tp_staging_errmsg(&st));
            snprintf(k->cmsg[r], sizeof k->cmsg[r], "%s", tp_errmsg(c));
            break;
        }
        size_t per = st.chunk / esz;
        for (size_t off = 0; off < k->count; off += per) {
            size_t n = k->count - off < per ? k->count - off : per;
            if (tp_allreduce(c, ref + off * esz, ref + off * esz, n, k->dt, k->op)) { k->rc[r] = -101; break; }
        }
        if (memcmp(dev, ref, k->count * esz)) k->bad[r]++;
    }
    k->violations[r] = f->violations;
    if (!k->rc[r] && (f->begun != k->reps || f->ended != k->reps)) k->bad[r] += 1000;
    free(dev); free(ref); free(pinned); free(f);
}

static void run_case(int world, st_case *k)
{
    tp_comm_opts o = {.timeout_s = 20};
    tpt_world w;
    CHECK(tpt_open(&w, world, &o) == 0);
    tpt_run(&w, st_rank, k);
    tpt_close(&w);
}

TEST(staged_allreduce_matches_host_path_2_and_4_ranks)
{
    static const rt_dtype dts[] = {RT_F32, RT_F16, RT_BF16, RT_I32, RT_F64};
    static const struct { size_t count, chunk; int nslots; } shapes[] = {
        {1, 64, 2}, {1000, 64, 3}, {4097, 256, 4}, {100000, 4096, 4}, {33333, 1024, 8}, {777, 8192, 4},
    };
    for (int world = 2; world <= 4; world += 2)
        for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++)
            for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
                st_case k = {.count = shapes[s].count, .chunk = shapes[s].chunk, .nslots = shapes[s].nslots,
                             .reps = 3, .dt = dts[d], .op = d == 3 ? TP_MAX : TP_SUM, .fail_rank = -1};
                run_case(world, &k);
                for (int r = 0; r < world; r++) {
                    CHECKF(k.rc[r] == 0, "world %d %s count %zu: rank %d rc %d (%s)", world, rt_dtype_names[dts[d]],
                           k.count, r, k.rc[r], k.msg[r]);
                    CHECKF(k.bad[r] == 0, "world %d %s count %zu chunk %zu slots %d: rank %d differs from the host path (%d)",
                           world, rt_dtype_names[dts[d]], k.count, k.chunk, k.nslots, r, k.bad[r]);
                    CHECKF(k.violations[r] == 0, "rank %d refilled a slot an H2D was still reading", r);
                }
            }
}

TEST(staged_allreduce_avg_of_random_floats_is_bitwise_equal_across_ranks)
{
    /* Inexact sums: the staged result must equal the host path on the same chunks
     * bit for bit (same reduction order), on every rank. */
    st_case k = {.count = 50000, .chunk = 4096, .nslots = 4, .reps = 2, .dt = RT_F32, .op = TP_AVG, .fail_rank = -1};
    run_case(4, &k);
    for (int r = 0; r < 4; r++) CHECKF(k.rc[r] == 0 && k.bad[r] == 0, "rank %d: rc %d bad %d", r, k.rc[r], k.bad[r]);
}

TEST(staged_allreduce_device_failure_fails_every_rank_without_hanging)
{
    /* Rank 1's second D2H fails: it returns the device's message and its comm fails
     * with it (naming the chunk's collective); rank 0, waiting in the middle of its
     * pipeline, must fail too, drain its slots and return, well before the deadline. */
    st_case k = {.count = 100000, .chunk = 1024, .nslots = 4, .reps = 1, .dt = RT_F32, .op = TP_SUM, .fail_rank = 1};
    tp_comm_opts o = {.timeout_s = 5};
    tpt_world w;
    CHECK(tpt_open(&w, 2, &o) == 0);
    double t0 = port_now_s();
    tpt_run(&w, st_rank, &k);
    CHECKF(port_now_s() - t0 < 4, "took %.1fs: waited for the deadline", port_now_s() - t0);
    CHECKF(k.rc[1] != 0 && strstr(k.msg[1], "D2H copy") && strstr(k.msg[1], "fake copy engine"), "%s", k.msg[1]);
    CHECKF(strstr(k.cmsg[1], "allreduce #") && strstr(k.cmsg[1], "D2H copy"), "rank 1's comm: %s", k.cmsg[1]);
    CHECKF(k.rc[0] != 0 && strstr(k.msg[0], "rank 1"), "rank 0: rc %d: %s", k.rc[0], k.msg[0]);
    tpt_close(&w);
}

typedef struct bc_case { int root, bad[TPT_MAXW], rc[TPT_MAXW]; } bc_case;

static void bc_rank(tp_comm *c, void *arg)
{
    bc_case *k = arg;
    int r = tp_rank(c);
    size_t count = 10007, chunk = 512;
    float *dev = malloc(count * sizeof(float));
    void *pinned = aligned_alloc(64, tp_staging_bytes(chunk, 3));
    fake_dev *f = calloc(1, sizeof *f);
    tp_staging st;
    for (size_t i = 0; i < count; i++) dev[i] = (float)(r * 100000 + (int)i);
    k->rc[r] = tp_staging_init(&st, &fake_ops, f, pinned, chunk, 3) ||
               tp_broadcast_device(c, dev, count, RT_F32, k->root, &st);
    if (k->rc[r]) tp_abort(c, "staged broadcast failed"); /* release the peers */
    for (size_t i = 0; i < count; i++) k->bad[r] += dev[i] != (float)(k->root * 100000 + (int)i);
    k->bad[r] += f->violations;
    free(dev); free(pinned); free(f);
}

TEST(staged_broadcast_from_each_root)
{
    for (int world = 2; world <= 4; world += 2)
        for (int root = 0; root < world; root++) {
            bc_case k = {.root = root};
            tp_comm_opts o = {.timeout_s = 20};
            tpt_world w;
            CHECK(tpt_open(&w, world, &o) == 0);
            tpt_run(&w, bc_rank, &k);
            tpt_close(&w);
            for (int r = 0; r < world; r++)
                CHECKF(k.rc[r] == 0 && k.bad[r] == 0, "world %d root %d rank %d: rc %d, %d wrong", world, root, r,
                       k.rc[r], k.bad[r]);
        }
}

/* The async forms: several device ops (each its own staging, as nn_ddp's buckets share
 * one) in flight with host ops between them, all run by the comm thread in issue
 * order; every result is the host path's on the same chunks, and the ops' sequence
 * numbers (one per chunk) match across ranks (the shared-memory path checks them). */
#define NA 5
typedef struct as_case { int bad[TPT_MAXW], rc[TPT_MAXW]; } as_case;

static void as_rank(tp_comm *c, void *arg)
{
    as_case *k = arg;
    int r = tp_rank(c);
    size_t chunk = 1024, counts[NA] = {3000, 1, 700, 5000, 257};
    void *pinned = aligned_alloc(64, tp_staging_bytes(chunk, 3));
    fake_dev *f = calloc(1, sizeof *f);
    tp_staging st;
    float *dev[NA], *ref[NA], host[64], href[64];
    tp_handle h[NA], hh;
    k->rc[r] = tp_staging_init(&st, &fake_ops, f, pinned, chunk, 3);
    for (int j = 0; j < NA; j++) {
        dev[j] = malloc(counts[j] * sizeof(float));
        ref[j] = malloc(counts[j] * sizeof(float));
        for (size_t i = 0; i < counts[j]; i++) dev[j][i] = ref[j][i] = k_rand_uniform(7 + r * NA + j, i) - 0.5f;
    }
    for (int i = 0; i < 64; i++) host[i] = href[i] = k_rand_uniform(99 + r, i);
    for (int j = 0; j < NA && !k->rc[r]; j++) {
        k->rc[r] |= tp_iallreduce_device(c, dev[j], counts[j], RT_F32, TP_AVG, &st, &h[j]);
        if (j == 2) k->rc[r] |= tp_iallreduce(c, host, host, 64, RT_F32, TP_SUM, &hh);
    }
    for (int j = 0; j < NA && !k->rc[r]; j++) k->rc[r] |= tp_wait(c, &h[j]);
    if (!k->rc[r]) k->rc[r] = tp_wait(c, &hh);
    /* A blocking device op after the async ones, then the references. */
    if (!k->rc[r]) k->rc[r] = tp_broadcast_device(c, dev[1], counts[1], RT_F32, 1, &st);
    size_t per = chunk / sizeof(float);
    for (int j = 0; j < NA && !k->rc[r]; j++) {
        for (size_t off = 0; off < counts[j]; off += per)
            k->rc[r] |= tp_allreduce(c, ref[j] + off, ref[j] + off, counts[j] - off < per ? counts[j] - off : per,
                                     RT_F32, TP_AVG);
        if (j == 2) k->rc[r] |= tp_allreduce(c, href, href, 64, RT_F32, TP_SUM);
        k->bad[r] += memcmp(dev[j], ref[j], counts[j] * sizeof(float)) != 0;
    }
    k->bad[r] += memcmp(host, href, sizeof host) != 0;
    k->bad[r] += f->violations + (f->begun != NA + 1) + (f->ended != NA + 1);
    for (int j = 0; j < NA; j++) free(dev[j]), free(ref[j]);
    free(pinned); free(f);
}

TEST(staged_async_device_ops_interleave_with_host_ops_in_issue_order)
{
    for (int world = 2; world <= 3; world++) {
        as_case k;
        memset(&k, 0, sizeof k);
        tp_comm_opts o = {.timeout_s = 20};
        tpt_world w;
        CHECK(tpt_open(&w, world, &o) == 0);
        tpt_run(&w, as_rank, &k);
        tpt_close(&w);
        for (int r = 0; r < world; r++)
            CHECKF(k.rc[r] == 0 && k.bad[r] == 0, "world %d rank %d: rc %d, %d wrong", world, r, k.rc[r], k.bad[r]);
    }
}
