/* The tree collectives (transport/tp_tree.c) against the tree written out serially:
 * inputs whose sums round differently in every association (values over many
 * magnitudes), so a wrong order shows as wrong bits. Worlds 1-8 with radix-2, 3 and
 * mixed trees, counts that cut into many pieces (a small comm arena), f32/f64/bf16/
 * f16; the halves alone (ZeRO's reduce-scatter, then allgather); the sum divided in the
 * op (tp_itree_allreduce_div: the bits of a division after it); the async form in
 * issue order; and the refusals. */
#include "kernels/k.h"
#include "test/t.h"
#include "test/tp_harness.h"

/* A value whose magnitude varies over ~30 binades with r and i. */
static double wild(int r, size_t i)
{
    float u = k_rand_uniform(1000 + (uint64_t)r, i), v = k_rand_uniform(2000 + (uint64_t)r, i);
    return (u - 0.5) * ldexp(1.0, (int)(v * 30) - 15);
}

/* F over ranks [first, first + n) at levels t..: the definition in tp_tree.c. */
static void ref_tree(const int *radix, int t, int first, int n, size_t i, rt_dtype dt, void *out)
{
    if (n == 1) {
        tpt_store(dt, out, 0, wild(first, i));
        return;
    }
    /* Top level first: the groups of the last radix, each a subtree of n / f ranks. */
    int L = 0, f;
    for (int m = 1; m < n; L++) m *= radix[t + L];
    f = radix[t + L - 1];
    unsigned char acc[8], x[8];
    for (int k = 0; k < f; k++) {
        ref_tree(radix, t, first + k * (n / f), n / f, i, dt, k ? x : acc);
        if (k) tp_reduce(acc, acc, x, 1, dt, TP_SUM);
    }
    memcpy(out, acc, rt_dtype_size(dt));
}

typedef struct tr_case {
    int radix[TP_TREE_MAX_LEVELS], nlev, phases; /* phases: 3 allreduce, 1 rs then ag separately */
    int div;                                     /* > 0: tp_itree_allreduce_div by it */
    size_t count;
    rt_dtype dt;
    int bad[TPT_MAXW], rc[TPT_MAXW];
} tr_case;

static void tr_rank(tp_comm *c, void *arg)
{
    tr_case *k = arg;
    int r = tp_rank(c);
    size_t es = rt_dtype_size(k->dt);
    unsigned char *buf = malloc(k->count * es + 8), *ref = malloc(k->count * es + 8);
    for (size_t i = 0; i < k->count; i++) {
        tpt_store(k->dt, buf, i, wild(r, i));
        ref_tree(k->radix, 0, 0, tp_world(c), i, k->dt, ref + i * es);
    }
    if ((k->rc[r] = tp_set_tree(c, k->radix, k->nlev))) return;
    if (k->div) {
        tp_handle h;
        tp_avg_finish(ref, k->count, k->dt, k->div);
        k->rc[r] = tp_itree_allreduce_div(c, buf, k->count, k->dt, k->div, &h);
        if (!k->rc[r]) k->rc[r] = tp_wait(c, &h);
    } else if (k->phases == 3) k->rc[r] = tp_tree_allreduce(c, buf, k->count, k->dt, TP_SUM);
    else {
        size_t off, cnt;
        tp_tree_block(k->count, k->radix, k->nlev, r, &off, &cnt);
        k->rc[r] = tp_tree_reduce_scatter(c, buf, k->count, k->dt, TP_SUM);
        k->bad[r] += memcmp(buf + off * es, ref + off * es, cnt * es) != 0;
        if (!k->rc[r]) k->rc[r] = tp_tree_allgather(c, buf, k->count, k->dt);
    }
    k->bad[r] += memcmp(buf, ref, k->count * es) != 0;
    free(buf);
    free(ref);
}

static void run(int world, tr_case *k, size_t arena)
{
    tp_comm_opts o = {.timeout_s = 30, .arena_bytes = arena};
    tpt_world w;
    CHECK(tpt_open(&w, world, &o) == 0);
    tpt_run(&w, tr_rank, k);
    tpt_close(&w);
    for (int r = 0; r < world; r++)
        CHECKF(k->rc[r] == 0 && k->bad[r] == 0, "world %d (tree %d levels, radix0 %d) %s count %zu phases %d: rank %d rc %d, "
               "%d wrong (div %d)", world, k->nlev, k->radix[0], rt_dtype_names[k->dt], k->count, k->phases, r, k->rc[r],
               k->bad[r], k->div);
}

TEST(tree_allreduce_is_the_written_out_tree_on_every_rank)
{
    static const struct { int world, nlev, radix[4]; } trees[] = {
        {1, 0, {0}}, {2, 1, {2}}, {3, 1, {3}}, {4, 2, {2, 2}}, {6, 2, {2, 3}}, {6, 2, {3, 2}}, {8, 3, {2, 2, 2}},
        {8, 2, {4, 2}}, {5, 1, {5}},
    };
    static const rt_dtype dts[] = {RT_F32, RT_F64, RT_BF16, RT_F16};
    static const size_t counts[] = {0, 1, 7, 5003};
    for (size_t t = 0; t < sizeof trees / sizeof trees[0]; t++)
        for (size_t d = 0; d < 4; d++)
            for (size_t n = 0; n < 4; n++) {
                tr_case k;
                memset(&k, 0, sizeof k);
                k.nlev = trees[t].nlev, k.count = counts[n], k.dt = dts[d];
                k.phases = (t + d + n) % 2 ? 3 : 1;
                k.div = k.phases == 3 && n % 2 ? 3 + (int)t : 0; /* not the world: K virtual shards */
                memcpy(k.radix, trees[t].radix, sizeof trees[t].radix);
                /* 4608 bytes of arena: 512-byte chunks, so 5003 floats are many pieces */
                run(trees[t].world, &k, n == 3 && d == 0 ? 4608 : 0);
            }
}

/* The async form queues behind other ops and keeps the issue order. */
typedef struct as_case { int rc[TPT_MAXW], bad[TPT_MAXW]; } as_case;

static void as_rank(tp_comm *c, void *arg)
{
    as_case *k = arg;
    int r = tp_rank(c), radix[2] = {2, 2};
    float a[3000], b[64], ra[3000], rb[64];
    tp_handle ha, hb;
    for (int i = 0; i < 3000; i++) a[i] = (float)wild(r, (size_t)i);
    for (int i = 0; i < 64; i++) b[i] = rb[i] = (float)r + (float)i;
    for (int i = 0; i < 3000; i++) ref_tree(radix, 0, 0, 4, (size_t)i, RT_F32, &ra[i]);
    k->rc[r] = tp_set_tree(c, radix, 2);
    if (!k->rc[r]) k->rc[r] = tp_itree_allreduce(c, a, 3000, RT_F32, TP_SUM, &ha);
    if (!k->rc[r]) k->rc[r] = tp_iallreduce(c, b, b, 64, RT_F32, TP_MAX, &hb);
    if (!k->rc[r]) k->rc[r] = tp_wait(c, &ha) | tp_wait(c, &hb);
    for (int i = 0; i < 64; i++) rb[i] = 3.0f + (float)i;
    k->bad[r] = memcmp(a, ra, sizeof a) != 0 || memcmp(b, rb, sizeof b) != 0;
}

TEST(tree_async_in_issue_order_and_refusals)
{
    as_case k;
    memset(&k, 0, sizeof k);
    tpt_world w;
    CHECK(tpt_open(&w, 4, NULL) == 0);
    /* Before tp_set_tree, with AVG, or a tree that does not multiply to the world. */
    float x[4] = {0};
    int bad3[1] = {4}, bad1[2] = {2, 3}, big[1] = {9};
    CHECK(tp_tree_allreduce(w.c[0], x, 4, RT_F32, TP_SUM) == TP_EINVAL);
    CHECK(tp_set_tree(w.c[0], bad3, 0) == TP_EINVAL);
    CHECK(tp_set_tree(w.c[0], bad1, 2) == TP_EINVAL);
    CHECK(tp_set_tree(w.c[0], big, 1) == TP_EINVAL);
    CHECK(tp_set_tree(w.c[0], bad3, 1) == 0);
    CHECK(tp_tree_allreduce(w.c[0], x, 4, RT_F32, TP_AVG) == TP_EINVAL);
    tp_handle h;
    CHECK(tp_itree_allreduce_div(w.c[0], x, 4, RT_F32, 0, &h) == TP_EINVAL);
    CHECK(strcmp(tp_errmsg(w.c[0]), "") == 0); /* refused at issue: the comm stays healthy */
    tpt_run(&w, as_rank, &k);
    tpt_close(&w);
    for (int r = 0; r < 4; r++) CHECKF(k.rc[r] == 0 && k.bad[r] == 0, "rank %d: rc %d bad %d", r, k.rc[r], k.bad[r]);
}

TEST(tree_block_partitions_the_vector)
{
    /* Every element owned by exactly one rank (the blocks cover the vector, no overlap). */
    static const int radix[3] = {3, 2, 2};
    for (size_t count = 0; count < 40; count += 7) {
        int owners[40] = {0};
        for (int r = 0; r < 12; r++) {
            size_t off, cnt;
            tp_tree_block(count, radix, 3, r, &off, &cnt);
            CHECK(off + cnt <= count);
            for (size_t i = off; i < off + cnt; i++) owners[i]++;
        }
        for (size_t i = 0; i < count; i++) CHECKF(owners[i] == 1, "count %zu: element %zu owned %d times", count, i, owners[i]);
    }
}
