/* BN -> ReLU, add -> ReLU and BN -> add -> ReLU fused into one pass (nn/plan.c
 * pass_fuse_relu; the k_bn_relu_*, k_bn_add_relu_fwd and k_add_relu kernels), and a
 * residual's gradient added inside ReLU's backward (k_relu_bwd_add): the very
 * bits of the ops apart, on the kernels (plane sizes with and without a vector tail,
 * in place, 1 and 2 threads) and on whole ResNet graphs (with and without
 * recomputation). Named test_kernels_* so
 * test_isa_paths.c runs it again on every ISA path. */
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

static float *fill(size_t n, float f, float off)
{
    float *p = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) p[i] = sinf((float)i * f) + off;
    return p;
}

/* One shape: every fused kernel against its unfused pair, threads 1 and 2. */
static void bn_relu_case(int N, int C, int HW)
{
    size_t T = (size_t)N * C * HW;
    float *x = fill(T, 0.71f, 0.05f), *dy = fill(T, 0.13f, 0.0f), *y = malloc(T * 4), *r = malloc(T * 4),
          *d = malloc(T * 4), *e = malloc(T * 4), *f = malloc(T * 4);
    float mean[5], var[5], invstd[5], gm[5] = {1.1f, -0.9f, 0.5f, 0.0f, 2.0f}, bt[5] = {0.01f, 0.2f, -0.3f, 0.0f, 0.5f};
    k_bn_stats(N, C, HW, x, mean, var);
    for (int c = 0; c < C; c++) invstd[c] = 1.0f / sqrtf(var[c] + 1e-5f);
    for (int th = 1; th <= 2; th++) {
        k_set_threads(th);
        /* forward: relu(bn(x)) */
        k_bn_fwd(N, C, HW, x, mean, invstd, gm, bt, y);
        k_relu_fwd(T, y, r);
        k_bn_relu_fwd(N, C, HW, x, mean, invstd, gm, bt, d);
        CHECKF(memcmp(r, d, T * 4) == 0, "bn_relu_fwd %dx%dx%d threads %d", N, C, HW, th);
        int zeros = 0;
        for (size_t i = 0; i < T; i++) zeros += r[i] == 0.0f;
        CHECK(zeros > 0 && (size_t)zeros < T);
        /* backward: relu's dx, then BN's sums and dx, against the masked forms */
        float dg0[5], db0[5], dg1[5], db1[5];
        k_relu_bwd(T, r, dy, e);
        k_bn_bwd_sums(N, C, HW, x, mean, invstd, e, dg0, db0);
        k_bn_bwd_dx(N, C, HW, x, mean, invstd, gm, dg0, db0, (double)N * HW, e, e);
        k_bn_relu_bwd_sums(N, C, HW, x, mean, invstd, gm, bt, dy, dg1, db1);
        CHECKF(memcmp(dg0, dg1, sizeof(float) * C) == 0 && memcmp(db0, db1, sizeof(float) * C) == 0,
               "bn_relu_bwd_sums %dx%dx%d threads %d", N, C, HW, th);
        memcpy(f, dy, T * 4);
        k_bn_relu_bwd_dx(N, C, HW, x, mean, invstd, gm, bt, dg1, db1, (double)N * HW, f, f); /* in place */
        CHECKF(memcmp(e, f, T * 4) == 0, "bn_relu_bwd_dx %dx%dx%d threads %d", N, C, HW, th);
        /* without affine parameters */
        k_bn_fwd(N, C, HW, x, mean, invstd, NULL, NULL, y);
        k_relu_fwd(T, y, r);
        k_bn_relu_fwd(N, C, HW, x, mean, invstd, NULL, NULL, d);
        CHECK(memcmp(r, d, T * 4) == 0);
        /* BN -> add -> relu: the BN output first in the sum */
        k_bn_fwd(N, C, HW, x, mean, invstd, gm, bt, y);
        k_add(T, y, dy, y);
        k_relu_fwd(T, y, r);
        k_bn_add_relu_fwd(N, C, HW, x, mean, invstd, gm, bt, dy, d);
        CHECKF(memcmp(r, d, T * 4) == 0, "bn_add_relu_fwd %dx%dx%d threads %d", N, C, HW, th);
        /* a gradient accumulated, then relu's backward: in place over dy */
        k_add(T, dy, x, y);
        k_relu_bwd(T, r, y, e);
        memcpy(f, dy, T * 4);
        k_relu_bwd_add(T, r, f, x, f);
        CHECKF(memcmp(e, f, T * 4) == 0, "relu_bwd_add %zu threads %d", T, th);
        /* add -> relu, in place over an input */
        k_add(T, x, dy, y);
        k_relu_fwd(T, y, r);
        memcpy(d, x, T * 4);
        k_add_relu(T, d, dy, d);
        CHECKF(memcmp(r, d, T * 4) == 0, "add_relu %zu threads %d", T, th);
    }
    k_set_threads(1);
    free(x); free(dy); free(y); free(r); free(d); free(e); free(f);
}

TEST(kernels_fuse_bn_relu_and_add_relu_match_the_ops_apart)
{
    bn_relu_case(2, 3, 1500);  /* a tail on every path */
    bn_relu_case(3, 5, 49);    /* planes shorter than the unrolled loops */
    bn_relu_case(2, 4, 1024);  /* no tail */
    bn_relu_case(4, 5, 3136);  /* resnet18's 56x56, over the parallel threshold */
}


/* ReLUs fused with a BN (bn 1) or an add (bn 0); bn 2: BNs fused through an add;
 * bn 3: ReLUs whose backward adds a residual gradient; bn 4: adds whose second input's
 * gradient is their own (no copy). */
static int fused(const nn_graph *g, int bn)
{
    int k = 0;
    for (int i = 1; i < g->nn; i++) {
        const nn_node *n = &g->nodes[i];
        if (bn == 4) k += (n->op->flags & NN_BWD_IDENTITY) && n->dy && g->nodes[n->in[1]].dy == n->dy;
        else if (bn == 3) k += n->acc_from > 0 && g->nodes[n->acc_from].acc_defer;
        else if (bn == 2) k += n->fused_into && g->nodes[n->fused_into].fuse_from != i;
        else k += n->fuse_from && nn_relu_bwd_fused(g->nodes, n) == bn;
    }
    return k;
}

/* Fused (threads th) against unfused (1 thread): 3 training steps, then evaluation. */
static void graph_same_bits(const nn_model_cfg *c, int B, int macs, int th)
{
    static mg m, r;
    char err[256];
    CHECKF(t_graph_build(&m, c, B, macs, 0, err, sizeof err) == 0, "%s", err);
    CHECKF(t_graph_build(&r, c, B, macs, 1, err, sizeof err) == 0, "%s", err);
    CHECK(fused(&m.g, 1) > 0 && fused(&m.g, 0) > 0 && fused(&m.g, 2) > 0 && fused(&m.g, 3) > 0);
    CHECK(fused(&r.g, 1) == 0 && fused(&r.g, 0) == 0 && fused(&r.g, 2) == 0 && fused(&r.g, 3) == 0);
    /* the residual gradient handed on in place: with the memory savers only */
    CHECKF((fused(&m.g, 4) > 0) == (macs >= 0), "macs %d: %d adds in place", macs, fused(&m.g, 4));
    /* no BN or add output, no BN dy: never more memory */
    CHECKF(m.g.act_bytes <= r.g.act_bytes, "%s macs %d: %zu fused, %zu not", m.g.model, macs, m.g.act_bytes,
           r.g.act_bytes);
    char what[96];
    snprintf(what, sizeof what, "%s macs %d, fused on %d threads vs apart", m.g.model, macs, th);
    t_graph_same_training(&m, th, &r, 1, c, B, what);
    rt_arena_free(&m.a);
    rt_arena_free(&r.a);
}

TEST(kernels_fuse_resnet_graphs_give_the_same_bits_fused)
{
    nn_model_cfg r20 = {.name = "resnet20", .in = {1, 28, 28, 0}, .num_classes = 10};
    graph_same_bits(&r20, 8, -1, 1);      /* everything kept */
    graph_same_bits(&r20, 8, 0, 2);       /* BN/ReLU/add re-made */
    graph_same_bits(&r20, 8, 1 << 20, 1); /* every conv too */
    nn_model_cfg r8 = {.file = "nn/models/resnet8.cfg", .in = {3, 32, 32, 0}, .num_classes = 4};
    graph_same_bits(&r8, 8, 0, 2);
}
