/* Every op of nn/ops through the per-op harness (test/t_op.h): its forward against a
 * naive reference written here, its backward against central finite differences
 * (inputs and parameters). An op added later brings its own test file (op_KIND). */
#include "test/t.h"
#include "test/t_op.h"
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if DDPRT_CUDA
#define CUDA_BUILT 1
#else
#define CUDA_BUILT 0
#endif

TEST(op_conv2d)
{
    static const int cfg[][7] = {/* c h w k ks stride pad */ {3, 7, 6, 4, 3, 1, 1}, {2, 9, 9, 3, 3, 2, 1},
                                 {4, 5, 5, 5, 1, 2, 0}, {1, 8, 8, 2, 5, 1, 0}, {3, 11, 10, 2, 7, 2, 3}};
    for (int t = 0; t < 5; t++) {
        const int *c = cfg[t];
        for (int bias = 0; bias <= 1; bias++) {
            t_op h;
            int x = t_op_begin1(&h, 2, (nn_shape){c[0], c[1], c[2], 0});
            int y = t_op_run(&h, nn_conv2d(&h.g, "conv", x, c[3], c[4], c[5], c[6], bias));
            nn_node *X = &h.g.nodes[x], *Y = &h.g.nodes[y];
            const float *w = nn_pw(&h.g, Y, 0), *b = bias ? nn_pw(&h.g, Y, 1) : NULL;
            for (int s = 0; s < 2; s++)
                for (int k = 0; k < c[3]; k++)
                    for (int p = 0; p < Y->out.h; p++)
                        for (int q = 0; q < Y->out.w; q++) {
                            double acc = b ? b[k] : 0;
                            for (int ci = 0; ci < c[0]; ci++)
                                for (int r = 0; r < c[4]; r++)
                                    for (int u = 0; u < c[4]; u++) {
                                        int iy = p * c[5] - c[6] + r, ix = q * c[5] - c[6] + u;
                                        if (iy < 0 || ix < 0 || iy >= c[1] || ix >= c[2]) continue;
                                        acc += (double)w[((k * c[0] + ci) * c[4] + r) * c[4] + u] * t_op_at(X, s, ci, iy, ix);
                                    }
                            CHECK_NEAR(t_op_at(Y, s, k, p, q), acc, 1e-4);
                        }
            t_op_end(&h, 2e-2);
        }
    }
}

TEST(op_conv1d)
{
    t_op h; /* [c, 1, len] with a [k, c, w] weight */
    int x = t_op_begin1(&h, 3, (nn_shape){5, 1, 9, 0});
    int y = nn_conv1d(&h.g, "convs.0", x, 4, 3);
    t_op_finish(&h, y);
    CHECK_EQ(h.g.p[0].ndim, 3);
    CHECK_EQ(h.g.nodes[y].out.w, 7);
    t_op_end(&h, 2e-2);
}

TEST(op_linear)
{
    t_op h;
    int x = t_op_begin1(&h, 3, (nn_shape){7, 1, 1, 0});
    int y = t_op_run(&h, nn_linear(&h.g, "fc", x, 5));
    for (int s = 0; s < 3; s++)
        for (int o = 0; o < 5; o++) {
            double acc = nn_pw(&h.g, &h.g.nodes[y], 1)[o];
            for (int i = 0; i < 7; i++) acc += (double)nn_pw(&h.g, &h.g.nodes[y], 0)[o * 7 + i] * h.g.nodes[x].y[s * 7 + i];
            CHECK_NEAR(h.g.nodes[y].y[s * 5 + o], acc, 1e-5);
        }
    t_op_end(&h, 1e-2);
}

TEST(op_relu)
{
    t_op h;
    int x = t_op_begin1(&h, 2, (nn_shape){3, 4, 5, 0});
    int y = t_op_run(&h, nn_relu(&h.g, x));
    for (int k = 0; k < 120; k++) CHECK(h.g.nodes[y].y[k] == fmaxf(h.g.nodes[x].y[k], 0));
    t_op_end(&h, 1e-2);
}

TEST(op_add)
{
    t_op h;
    t_op_begin(&h, 2);
    int a = t_op_source(&h, (nn_shape){3, 2, 5, 0}), b = t_op_source(&h, (nn_shape){3, 2, 5, 0});
    int y = t_op_run(&h, nn_add2(&h.g, a, b));
    for (int k = 0; k < 60; k++) CHECK(h.g.nodes[y].y[k] == h.g.nodes[a].y[k] + h.g.nodes[b].y[k]);
    t_op_end(&h, 1e-2);
}

TEST(op_concat)
{
    t_op h;
    t_op_begin(&h, 2);
    int parts[3] = {t_op_source(&h, (nn_shape){2, 1, 1, 0}), t_op_source(&h, (nn_shape){3, 1, 1, 0}),
                    t_op_source(&h, (nn_shape){1, 1, 1, 0})};
    int y = t_op_run(&h, nn_concat(&h.g, parts, 3));
    CHECK_EQ(h.g.nodes[y].out.c, 6);
    CHECK(h.g.nodes[y].y[6 + 2] == h.g.nodes[parts[1]].y[3]); /* sample 1, channel 2 = part 1's first */
    CHECK(h.g.nodes[y].y[5] == h.g.nodes[parts[2]].y[0]);
    t_op_end(&h, 1e-2);
}

TEST(op_flatten)
{
    t_op h;
    int x = t_op_begin1(&h, 2, (nn_shape){2, 3, 2, 0});
    int y = nn_flatten(&h.g, nn_relu(&h.g, x));
    t_op_finish(&h, y);
    CHECK_EQ(h.g.nodes[y].out.c, 12);
    CHECK(h.g.nodes[y].y == h.g.nodes[y - 1].y); /* a view */
    t_op_end(&h, 1e-2);
}

TEST(op_batchnorm2d)
{
    static const int cfg[][3] = {{3, 4, 5}, {2, 1, 1}, {5, 7, 3}};
    for (int t = 0; t < 3; t++) {
        t_op h;
        int x = t_op_begin1(&h, 4, (nn_shape){cfg[t][0], cfg[t][1], cfg[t][2], 0});
        int y = nn_batchnorm(&h.g, "bn", x);
        t_op_finish(&h, y);
        CHECK_EQ(h.g.nb, 3);
        CHECK(h.g.b[2].dtype == RT_I64);
        t_op_objective(&h);
        nn_node *X = &h.g.nodes[x], *Y = &h.g.nodes[y];
        int C = cfg[t][0], hw = cfg[t][1] * cfg[t][2];
        const float *gm = nn_pw(&h.g, Y, 0), *bt = nn_pw(&h.g, Y, 1);
        const float *rm = nn_buf_data(&h.g, 0), *rv = nn_buf_data(&h.g, 1);
        for (int c = 0; c < C; c++) {
            double s = 0, ss = 0, m = 4.0 * hw;
            for (int i = 0; i < 4; i++)
                for (int k = 0; k < hw; k++) s += X->y[(i * C + c) * hw + k];
            double mean = s / m;
            for (int i = 0; i < 4; i++)
                for (int k = 0; k < hw; k++) ss += pow(X->y[(i * C + c) * hw + k] - mean, 2);
            double var = ss / m;
            for (int i = 0; i < 4; i++)
                for (int k = 0; k < hw; k++) {
                    double want = (X->y[(i * C + c) * hw + k] - mean) / sqrt(var + 1e-5) * gm[c] + bt[c];
                    CHECK_NEAR(Y->y[(i * C + c) * hw + k], want, 1e-4);
                }
            CHECK_NEAR(rm[c], 0.1 * mean, 1e-5);
            CHECK_NEAR(rv[c], 0.9 + 0.1 * var * m / (m - 1), 1e-5);
        }
        CHECK_EQ(*(int64_t *)nn_buf_data(&h.g, 2), 1);
        /* Evaluation normalises with the running statistics. */
        nn_forward(&h.g, NULL, 4, 0, 0, 0);
        for (int c = 0; c < C; c++)
            CHECK_NEAR(Y->y[c * hw], (X->y[c * hw] - rm[c]) / sqrt(rv[c] + 1e-5) * gm[c] + bt[c], 1e-4);
        t_op_end(&h, 3e-2);
    }
}

TEST(op_maxpool2d)
{
    static const int cfg[][5] = {/* h w k stride pad */ {6, 6, 2, 2, 0}, {7, 9, 3, 2, 1}, {5, 5, 3, 1, 1}};
    for (int t = 0; t < 3; t++) {
        t_op h;
        int x = t_op_begin1(&h, 2, (nn_shape){3, cfg[t][0], cfg[t][1], 0});
        int y = t_op_run(&h, nn_maxpool(&h.g, x, cfg[t][2], cfg[t][3], cfg[t][4]));
        nn_node *X = &h.g.nodes[x], *Y = &h.g.nodes[y];
        for (int s = 0; s < 2; s++)
            for (int c = 0; c < 3; c++)
                for (int p = 0; p < Y->out.h; p++)
                    for (int q = 0; q < Y->out.w; q++) {
                        float m = -INFINITY;
                        for (int r = 0; r < cfg[t][2]; r++)
                            for (int u = 0; u < cfg[t][2]; u++) {
                                int iy = p * cfg[t][3] - cfg[t][4] + r, ix = q * cfg[t][3] - cfg[t][4] + u;
                                if (iy >= 0 && ix >= 0 && iy < X->out.h && ix < X->out.w) m = fmaxf(m, t_op_at(X, s, c, iy, ix));
                            }
                        CHECK(t_op_at(Y, s, c, p, q) == m);
                    }
        t_op_end(&h, 1e-2);
    }
}

TEST(op_avgpool1x1)
{
    t_op h;
    int x = t_op_begin1(&h, 3, (nn_shape){4, 3, 5, 0});
    int y = t_op_run(&h, nn_avgpool_1x1(&h.g, x));
    double s = 0;
    for (int k = 0; k < 15; k++) s += h.g.nodes[x].y[15 * 5 + k]; /* sample 1, channel 1 */
    CHECK_NEAR(h.g.nodes[y].y[4 + 1], s / 15, 1e-5);
    t_op_end(&h, 1e-2);
}

TEST(op_dropout)
{
    t_op h;
    for (int two_d = 0; two_d <= 1; two_d++) {
        int x = t_op_begin1(&h, 4, (nn_shape){6, 2, 3, 0});
        int y = t_op_run(&h, nn_dropout(&h.g, x, 0.4f, two_d));
        int kept = 0;
        for (int k = 0; k < 4 * 36; k++) {
            float xv = h.g.nodes[x].y[k], yv = h.g.nodes[y].y[k];
            CHECK(yv == 0.0f || fabsf(yv - xv / 0.6f) <= 1e-6f * fabsf(yv) + 1e-7f);
            kept += yv != 0.0f;
            if (two_d && k % 6) CHECK((yv == 0.0f) == (h.g.nodes[y].y[k - 1] == 0.0f) || xv == 0.0f);
        }
        CHECK(kept > 20 && kept < 4 * 36 - 20);
        t_op_end(&h, 1e-2);
    }
}

TEST(op_embedding)
{
    t_op h;
    int ids = t_op_begin1(&h, 2, (nn_shape){1, 1, 6, 1});
    int y = t_op_run(&h, nn_embedding(&h.g, "embedding", ids, 7, 5));
    const int32_t *tok = (const int32_t *)h.g.nodes[ids].y;
    for (int s2 = 0; s2 < 2; s2++)
        for (int d = 0; d < 5; d++)
            for (int t = 0; t < 6; t++)
                CHECK(h.g.nodes[y].y[(s2 * 5 + d) * 6 + t] == nn_pw(&h.g, &h.g.nodes[y], 0)[tok[s2 * 6 + t] * 5 + d]);
    t_op_end(&h, 1e-2);
}

TEST(op_max_time)
{
    t_op h;
    int x = t_op_begin1(&h, 3, (nn_shape){4, 1, 7, 0});
    int y = t_op_run(&h, nn_max_time(&h.g, x));
    for (int k = 0; k < 12; k++) {
        float m = -INFINITY;
        for (int t = 0; t < 7; t++) m = fmaxf(m, h.g.nodes[x].y[k * 7 + t]);
        CHECK(h.g.nodes[y].y[k] == m);
    }
    t_op_end(&h, 1e-2);
}

TEST(op_log_softmax)
{
    t_op h;
    int x = t_op_begin1(&h, 3, (nn_shape){6, 1, 1, 0});
    int y = t_op_run(&h, nn_log_softmax(&h.g, x));
    for (int s2 = 0; s2 < 3; s2++) {
        double z = 0;
        for (int k = 0; k < 6; k++) z += exp(h.g.nodes[x].y[s2 * 6 + k]);
        for (int k = 0; k < 6; k++) CHECK_NEAR(h.g.nodes[y].y[s2 * 6 + k], h.g.nodes[x].y[s2 * 6 + k] - log(z), 1e-5);
    }
    t_op_end(&h, 1e-2);
}

TEST(graph_every_op_has_a_test_and_bad_graphs_fail_clearly)
{
    /* The table is generated from the nn/ops files: every op there is found by its kind and
     * alias, describes itself, and has a test named op_KIND (in any test file). */
    int n = 0;
    for (; nn_ops[n]; n++) {
        const nn_op *op = nn_ops[n];
        char name[64];
        snprintf(name, sizeof name, "op_%s", op->kind);
        CHECKF(t_registered(name), "op %s has no test named %s", op->kind, name);
        CHECK(nn_op_find(op->kind) == op && (!op->alias || nn_op_find(op->alias) == op));
        CHECKF(op->attr_size <= NN_ATTR_BYTES && (op->attrs == NULL) == (op->attr_size == 0), "op %s", op->kind);
        CHECKF(op->infer && op->fwd && op->bwd && (op->fwd_cuda != NULL) == CUDA_BUILT &&
               (op->bwd_cuda != NULL) == CUDA_BUILT, "op %s lacks an entry point", op->kind);
    }
    CHECK(n >= 14 && !nn_op_find("input") && !nn_op_find("nosuch"));
    t_op h;
    char err[256] = "";
    rt_arena plan;
    t_op_begin(&h, 2);
    int a = t_op_source(&h, (nn_shape){3, 4, 4, 0}), b = t_op_source(&h, (nn_shape){3, 2, 2, 0});
    nn_add2(&h.g, a, b);
    rt_arena_plan(&plan, "p");
    CHECK(nn_graph_finish(&h.g, &plan, 2, err, sizeof err) == -1);
    CHECKF(strstr(err, "node 3 (add)") && strstr(err, "shapes differ: 3x4x4 and 3x2x2"), "%s", err);
    t_op_begin(&h, 2);
    a = t_op_source(&h, (nn_shape){3, 4, 4, 0});
    nn_linear(&h.g, "fc", a, 5);
    CHECK(nn_graph_finish(&h.g, &plan, 2, err, sizeof err) == -1);
    CHECKF(strstr(err, "node 2 (linear fc)") && strstr(err, "flatten first"), "%s", err);
    t_op_begin(&h, 2);
    a = t_op_source(&h, (nn_shape){3, 4, 4, 0});
    nn_conv2d(&h.g, "c", a, 4, 7, 1, 1, 0);
    CHECK(nn_graph_finish(&h.g, &plan, 2, err, sizeof err) == -1);
    CHECKF(strstr(err, "larger than the padded input"), "%s", err);
}
