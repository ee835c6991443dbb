/* Recomputation in backward (nn/plan.c, nn/exec.c): dropping BN/ReLU/add outputs
 * and cheap conv outputs after the forward and re-running them before the backward
 * that reads them, in-place gradients, per-node workspaces inside the activations.
 * The results must be the very same bits as keeping everything, the running
 * statistics updated once per step, and the plan smaller. */
#include "test/t.h"
#include "test/t_graph.h"
#include "kernels/k.h"
#include "nn/graph.h"
#include "nn/models/models.h"
#include "rt/arena.h"
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>


static int count(const nn_graph *g, const char *kind, int mask)
{
    int k = 0;
    for (int i = 1; i < g->nn; i++)
        if (!strcmp(g->nodes[i].op->kind, kind) && (mask ? g->nodes[i].mask_from_bn : g->nodes[i].recompute)) k++;
    return k;
}

/* no_fuse: BN/add -> ReLU apart (a recomputed ReLU after a BN then takes its mask from
 * the BN's input); test_kernels_fuse.c compares the fused graphs with these. */
static void same_bits(const nn_model_cfg *c, int B, int macs, int no_fuse)
{
    static mg m, r;
    char err[256];
    CHECKF(t_graph_build(&m, c, B, macs, no_fuse, err, sizeof err) == 0, "%s", err);
    CHECKF(t_graph_build(&r, c, B, -1, no_fuse, err, sizeof err) == 0, "%s", err);
    size_t pm = m.g.act_bytes + (m.g.ws ? m.g.ws_bytes : 0), pr = r.g.act_bytes + r.g.ws_bytes;
    CHECKF(pm < pr, "%s: planned %zu with recomputation, %zu without", m.g.model, pm, pr);
    CHECK(m.g.act_bytes_keep == r.g.act_bytes);
    /* fused, a BN's output is never made (nor re-made) */
    CHECK(count(&m.g, "relu", 0) > 0 && (no_fuse ? count(&m.g, "batchnorm2d", 0) > 0 : 1));
    if (macs > 1000) CHECK(count(&m.g, "conv2d", 0) > 0 && (count(&m.g, "relu", 1) > 0) == no_fuse);
    if (macs == 0) CHECK(count(&m.g, "conv2d", 0) == 0);
    char what[96];
    snprintf(what, sizeof what, "%s macs %d%s, recomputed vs kept", m.g.model, macs, no_fuse ? " (no fusion)" : "");
    t_graph_same_training(&m, 1, &r, 1, c, B, what);
    rt_arena_free(&m.a);
    rt_arena_free(&r.a);
}

TEST(recompute_resnet20_gives_the_same_bits_as_keeping_outputs)
{
    nn_model_cfg c = {.name = "resnet20", .in = {1, 28, 28, 0}, .num_classes = 10};
    same_bits(&c, 8, 0, 0);       /* BN/ReLU/add only */
    same_bits(&c, 8, 1 << 20, 0); /* every conv too */
    same_bits(&c, 8, 0, 1);
    same_bits(&c, 8, 1 << 20, 1);
}

/* ResNet-20's plan at batch 128 (not trained) under a recompute policy and memory budget. */
static const nn_graph *r20_plan(int macs, size_t budget)
{
    static mg m;
    char err[256];
    nn_model_cfg r20 = {.name = "resnet20", .in = {1, 28, 28, 0}, .num_classes = 10};
    rt_arena plan;
    rt_arena_plan(&plan, "plan");
    CHECK(nn_model_build(&m.g, m.nodes, m.p, m.b, &r20, err, sizeof err) == 0);
    m.g.recompute_macs = macs;
    m.g.mem_budget = budget;
    CHECKF(nn_graph_finish(&m.g, &plan, 128, err, sizeof err) == 0, "%s", err);
    return &m.g;
}

TEST(recompute_cfg_resnet_and_auto_policy)
{
    nn_model_cfg c = {.file = "nn/models/resnet8.cfg", .in = {3, 32, 32, 0}, .num_classes = 4};
    same_bits(&c, 8, 1 << 20, 0);
    /* auto (-1) resolves to the smallest bound that halves the plan */
    const nn_graph *g = r20_plan(-1, 0);
    /* 155 MiB when kept: the stem and stage 1 convs (9 and 144 MACs per output) go */
    CHECK_EQ(g->recompute_macs, 144);
    CHECK(g->act_bytes <= g->act_bytes_keep / 2);
    CHECK(g->ws == NULL); /* the workspace lives inside the activations */
}

/* The default (NN_RECOMPUTE_FIT): the convs are kept while the activations fit in the
 * budget (a quarter of the rank's memory share, set by the trainer), and recomputed as
 * with -1 when they do not or the budget is unknown. */
static size_t fit_plan(size_t budget, int *macs)
{
    const nn_graph *g = r20_plan(NN_RECOMPUTE_FIT, budget);
    *macs = g->recompute_macs;
    CHECK(g->act_bytes < g->act_bytes_keep); /* BN/ReLU/add are recomputed in every case */
    return g->act_bytes;
}

TEST(recompute_fit_keeps_convs_within_the_memory_budget)
{
    int macs;
    size_t roomy = fit_plan((size_t)8 << 30, &macs);
    CHECK_EQ(macs, 0); /* 123 MiB fit in 8 GiB: no conv is recomputed */
    size_t tight = fit_plan((size_t)64 << 20, &macs);
    CHECK_EQ(macs, 144); /* over 64 MiB: as -1, the stem and stage 1 convs go */
    CHECK(tight < roomy);
    size_t unknown = fit_plan(0, &macs);
    CHECK(macs == 144 && unknown == tight);
    size_t edge = fit_plan(roomy, &macs); /* exactly the plan: it fits */
    CHECK(macs == 0 && edge == roomy);
    edge = fit_plan(roomy - 1, &macs);
    CHECK(macs == 144 && edge == tight);
}

TEST(recompute_bn_relu_mask_matches_bn_then_relu)
{
    enum { N = 2, C = 3, HW = 1500 }; /* > one 1024-float chunk, with a tail */
    float *x = malloc(sizeof(float) * N * C * HW), *y = malloc(sizeof(float) * N * C * HW);
    float *dy = malloc(sizeof(float) * N * C * HW), *d1 = malloc(sizeof(float) * N * C * HW);
    float mean[C] = {0.1f, -0.2f, 0.05f}, invstd[C] = {1.3f, 0.7f, 2.0f}, gm[C] = {1.1f, -0.9f, 0.5f},
          bt[C] = {0.01f, 0.2f, -0.3f};
    for (int i = 0; i < N * C * HW; i++) {
        x[i] = sinf((float)i * 0.71f);
        dy[i] = cosf((float)i * 0.13f);
    }
    k_bn_fwd(N, C, HW, x, mean, invstd, gm, bt, y);
    k_relu_bwd((size_t)N * C * HW, y, dy, d1);
    int zeros = 0;
    for (int i = 0; i < N * C * HW; i++) zeros += d1[i] == 0.0f;
    CHECK(zeros > 100 && zeros < N * C * HW - 100);
    k_bn_relu_bwd(N, C, HW, x, mean, invstd, gm, bt, dy, dy); /* in place */
    CHECK(memcmp(d1, dy, sizeof(float) * N * C * HW) == 0);
    free(x); free(y); free(dy); free(d1);
}
