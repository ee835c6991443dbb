/* The alpha-beta cost model (apps/bench/bench_predict.c): formulas against figures
 * worked by hand, the fit recovering known alpha and beta, and ddprt-bench --predict /
 * --fit printing their tables. */
#include "test/t.h"
#include "test/t_proc.h"
#include "apps/bench/bench_predict.h"
#include <stdio.h>
#include <string.h>

#define MIB 1048576.0

TEST(predict_ring_rd_by_hand)
{
    bp_link l = {10e-6, 1e9};
    /* 2(4-1) steps of 1 MiB / 4 = 262144 B: 6 x (10 + 262.144) us */
    CHECK_NEAR(bp_ring(4, MIB, l), 1632.864e-6, 1e-12);
    CHECK_NEAR(bp_ring(1, MIB, l), 0, 1e-15);
    /* 4 ranks: 2 exchanges of the full 1 MiB; 6 ranks: fold in + 2 + hand back */
    CHECK_NEAR(bp_rd(4, MIB, l), 2 * 1058.576e-6, 1e-12);
    CHECK_NEAR(bp_rd(6, MIB, l), 4 * 1058.576e-6, 1e-12);
    CHECK_NEAR(bp_rd(8, MIB, l), 3 * 1058.576e-6, 1e-12);
}

TEST(predict_hier_by_hand)
{
    bp_link in = {1e-6, 10e9}, ex = {10e-6, 1e9};
    /* 2 hosts x 2: intra RS+AG 2 x (1 + 52.4288) us; inter ring of 2 hosts on halves
     * sharing the link: 2 x (10 + 524.288) us */
    CHECK_NEAR(bp_hier(2, 2, MIB, in, ex), 106.8576e-6 + 1068.576e-6, 1e-12);
    /* the flat ring crosses the host link every step: 6 x (10 + 262.144) us, i.e. the
     * issue's 1.5 S over the link against the hierarchical S */
    CHECK_NEAR(bp_ring2(2, 2, MIB, in, ex), 1632.864e-6, 1e-12);
    CHECK_NEAR(bp_ring2(1, 4, MIB, in, ex), bp_ring(4, MIB, in), 1e-15);
    CHECK_NEAR(bp_hier(1, 4, MIB, in, ex), bp_ring(4, MIB, in), 1e-15);
    CHECK_NEAR(bp_hier(4, 1, MIB, in, ex), bp_ring(4, MIB, ex), 1e-15);
    /* 64 MiB: 16 segments of 4 MiB pipelined; the link lane (67.128864 ms) runs
     * throughout, the in-host lane (6.7128864 ms) adds one segment's worth */
    CHECK_EQ(bp_hier_segs(64 * MIB), 16);
    CHECK_EQ(bp_hier_segs(4096 * MIB), 64);
    CHECK_NEAR(bp_hier(2, 2, 64 * MIB, in, ex), 67.128864e-3 + 6.7128864e-3 / 16, 1e-12);
}

static double lin10(double b, const void *c) { (void)c; return b * 0.01; }
static double lin1(double b, const void *c) { (void)c; return b * 0.001; }

TEST(predict_step_overlap)
{
    /* 100 B in buckets of 30: 30 30 30 | 10. Backward 0.15 s. */
    bp_step s = {0.3, 100, 30, 0.5};
    /* 0.9 s of hidden-bucket allreduce spills 0.75 past backward, + last 0.1 */
    CHECK_NEAR(bp_step_time(&s, lin10, NULL), 0.3 + 0.75 + 0.1, 1e-12);
    /* 0.09 s fits inside backward: only the last bucket's 0.01 shows */
    CHECK_NEAR(bp_step_time(&s, lin1, NULL), 0.31, 1e-12);
    s.bucket_bytes = 100; /* one bucket: nothing overlaps */
    CHECK_NEAR(bp_step_time(&s, lin1, NULL), 0.4, 1e-12);
}

TEST(predict_fit_recovers)
{
    double b[12], t[12];
    bp_link want = {20e-6, 2e9}, got;
    int k = 0;
    for (double s = 4096; s <= 64 * MIB; s *= 4, k++) b[k] = s, t[k] = bp_ring(4, s, want);
    CHECK(bp_fit(4, 0, b, t, k, &got) == 0);
    CHECK_NEAR(got.alpha, want.alpha, 1e-6);
    CHECK_NEAR(got.bw / 1e9, 2.0, 1e-6);
    /* +-4% alternating noise: still close */
    for (int i = 0; i < k; i++) t[i] *= i % 2 ? 1.04 : 0.96;
    CHECK(bp_fit(4, 0, b, t, k, &got) == 0);
    CHECK_NEAR(got.alpha / want.alpha, 1, 0.1);
    CHECK_NEAR(got.bw / want.bw, 1, 0.1);
    /* recursive doubling at 6 ranks: 4 steps of the whole vector */
    for (int i = 0; i < k; i++) t[i] = bp_rd(6, b[i], want);
    CHECK(bp_fit(6, 1, b, t, k, &got) == 0);
    CHECK_NEAR(got.alpha, want.alpha, 1e-6);
    CHECK_NEAR(got.bw / 1e9, 2.0, 1e-6);
    /* a negative intercept (time below the bandwidth line at small sizes): alpha 0 */
    for (int i = 0; i < k; i++) t[i] = bp_ring(4, b[i], (bp_link){0, 2e9}) - 0.2e-6;
    CHECK(bp_fit(4, 0, b, t, k, &got) == 0);
    CHECK(got.alpha == 0);
    CHECK_NEAR(got.bw / 1e9, 2.0, 0.05);
    CHECK(bp_fit(4, 0, b, t, 1, &got) == -1); /* one row cannot give two unknowns */
    double same[2] = {4096, 4096};
    CHECK(bp_fit(4, 0, same, t, 2, &got) == -1);
}

PTEST(predict_cli_tables)
{
    t_proc p;
    char *a1[] = {(char *)t_prog("ddprt-bench"), "--predict", "--step-ms", "190", "--grad-mb", "97.5",
                  "--alpha-us", "5", "--beta-gbs", "24", "--intra-gbs", "130", "--gpus", "8-1024", NULL};
    t_spawn(&p, "scale", a1, NULL);
    CHECK_EQ(t_wait(&p, 20), 0);
    const char *o = t_slurp(p.out);
    CHECKF(strstr(o, "hier AR") && strstr(o, "\n    1024    128 |"), "output:\n%s", o);

    /* rows as ddprt-bench prints them, two runs: the fit takes the median per size */
    char path[300];
    snprintf(path, sizeof path, "%s/rows.txt", t_tmpdir());
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    bp_link l = {30e-6, 1.5e9};
    for (int run = 0; run < 3; run++)
        for (double s = 4096; s <= 16 * MIB; s *= 4)
            fprintf(f, "  %10.0f %12.0f %8s %6s %6d %10.2f %8.3f %8.3f %7s0\n", s, s / 4, "float", "sum", 20,
                    bp_ring(2, s, l) * 1e6 * (run == 1 ? 3 : 1), 0.0, 0.0, "");
    fclose(f);
    char *a2[] = {(char *)t_prog("ddprt-bench"), "allreduce", "--fit", path, "--world-size", "2", NULL};
    t_spawn(&p, "fit", a2, NULL);
    CHECK_EQ(t_wait(&p, 20), 0);
    o = t_slurp(p.out);
    CHECKF(strstr(o, "alpha 30.00 us, beta 1.500 GB/s") && strstr(o, "worst |error| 0.0%"), "output:\n%s", o);

    char *a3[] = {(char *)t_prog("ddprt-bench"), "--predict", "--world-size", "4", "--alpha-us", "10",
                  "--beta-gbs", "1", "-b", "1M", "-e", "1M", NULL};
    t_spawn(&p, "table", a3, NULL);
    CHECK_EQ(t_wait(&p, 20), 0);
    o = t_slurp(p.out);
    CHECKF(strstr(o, "1048576       262144    float    sum      -    1632.86"), "output:\n%s", o);

    /* predicted vs measured over the same rows: the model that made them fits exactly,
     * one twice as slow misses every size by +100 % */
    char *a5[] = {(char *)t_prog("ddprt-bench"), "--predict", "--world-size", "2", "--alpha-us", "30",
                  "--beta-gbs", "1.5", "--measured", path, NULL};
    t_spawn(&p, "compare", a5, NULL);
    CHECK_EQ(t_wait(&p, 20), 0);
    o = t_slurp(p.out);
    CHECKF(strstr(o, "within 15%: 7 of 7 sizes; worst |error| 0.0%"), "output:\n%s", o);
    char *a6[] = {(char *)t_prog("ddprt-bench"), "--predict", "--world-size", "2", "--alpha-us", "60",
                  "--beta-gbs", "0.75", "--measured", path, "-b", "64K", NULL};
    t_spawn(&p, "compare2", a6, NULL);
    CHECK_EQ(t_wait(&p, 20), 0);
    o = t_slurp(p.out);
    CHECKF(strstr(o, "+100.0%") && strstr(o, "within 15%: 0 of 5 sizes"), "output:\n%s", o);

    char *a4[] = {(char *)t_prog("ddprt-bench"), "--fit", path, NULL}; /* no world size */
    t_spawn(&p, "bad", a4, NULL);
    CHECK_EQ(t_wait(&p, 20), 2);
    CHECK(strstr(t_slurp(p.err), "--world-size") != NULL);
}
