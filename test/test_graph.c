/* The per-op harness (as ggml's test-backend-ops): every op of the graph built as a
 * tiny graph on random shapes, its forward against a naive reference written here,
 * its backward against central finite differences (inputs and parameters). */
#include "test/t.h"
#include "nn/graph.h"
#include "nn/ops/ops.h"
#include "rt/arena.h"
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rs = 0x243F6A8885A308D3ULL;
static double urand(void) /* [0, 1) */
{
    rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17;
    return (double)(rs >> 11) * 0x1p-53;
}
static float frand(void) { return (float)(urand() * 2 - 1); }

typedef struct hx {
    nn_graph g;
    nn_node nodes[NN_MAX_NODES];
    nn_param p[64];
    nn_buf b[64];
    rt_arena a;
    int src[NN_MAX_IN], nsrc, op;
    float *ry; /* random weights of the scalar L = sum ry * y */
    int batch;
} hx;

/* A source node: a value with a gradient, filled by the test. */
static int source(hx *h, nn_shape s)
{
    int id = nn_add(&h->g, "input", "", NULL, 0, NULL, 0, NULL, 0);
    h->g.nodes[id].out = s;
    h->g.nodes[id].grad_source = !s.tokens;
    h->src[h->nsrc++] = id;
    return id;
}

static void begin(hx *h, int batch)
{
    memset(h, 0, sizeof *h);
    nn_graph_begin(&h->g, h->nodes, h->p, h->b, "harness", (nn_shape){1, 1, 1, 0}, -1);
    h->batch = batch;
}

static void finish(hx *h, int op)
{
    char err[256] = "";
    h->op = op;
    rt_arena plan;
    rt_arena_plan(&plan, "plan");
    int rc = nn_graph_finish(&h->g, &plan, h->batch, err, sizeof err);
    CHECKF(rc == 0, "%s", err);
    if (rc) exit(1);
    CHECK(rt_arena_init(&h->a, "harness", plan.high) == 0);
    CHECK(nn_graph_finish(&h->g, &h->a, h->batch, err, sizeof err) == 0);
    nn_graph_init(&h->g, 7);
    for (int i = 0; i < h->g.np; i++) /* perturb BN's 1/0 init so gamma/beta matter */
        for (size_t k = 0; k < h->g.p[i].numel; k++) h->g.params[h->g.p[i].offset + k] += 0.3f * frand();
    for (int s = 0; s < h->nsrc; s++) {
        nn_node *n = &h->g.nodes[h->src[s]];
        size_t m = nn_shape_numel(n->out) * (size_t)h->batch;
        for (size_t k = 0; k < m; k++) {
            if (n->out.tokens) ((int32_t *)n->y)[k] = (int32_t)(urand() * 7);
            else n->y[k] = frand();
        }
    }
    size_t m = nn_shape_numel(h->g.nodes[op].out) * (size_t)h->batch;
    h->ry = malloc(m * sizeof(float));
    for (size_t k = 0; k < m; k++) h->ry[k] = frand();
}

static double objective(hx *h)
{
    nn_forward(&h->g, h->g.nodes[0].y, h->batch, 1, 5, 3);
    const nn_node *o = &h->g.nodes[h->op];
    double L = 0;
    for (size_t k = 0; k < nn_shape_numel(o->out) * (size_t)h->batch; k++) L += (double)h->ry[k] * o->y[k];
    return L;
}

/* Gradients by the op's backward vs central differences on a sample of elements. */
static void check_grads_eps(hx *h, double tol, float eps)
{
    nn_node *o = &h->g.nodes[h->op];
    objective(h);
    memcpy(o->dy, h->ry, nn_shape_numel(o->out) * (size_t)h->batch * sizeof(float));
    nn_backward_from(&h->g, h->op, h->batch);
    for (int s = 0; s < h->nsrc; s++) {
        nn_node *src = &h->g.nodes[h->src[s]];
        if (src->out.tokens) continue;
        size_t m = nn_shape_numel(src->out) * (size_t)h->batch;
        /* The planner may reuse a gradient's bytes during the next forward: keep a copy. */
        float *dy = malloc(m * sizeof(float));
        memcpy(dy, src->dy, m * sizeof(float));
        for (int t = 0; t < 12; t++) {
            size_t k = (size_t)(urand() * (double)m);
            float keep = src->y[k];
            src->y[k] = keep + eps;
            double lp = objective(h);
            src->y[k] = keep - eps;
            double lm = objective(h);
            src->y[k] = keep;
            CHECK_NEAR((lp - lm) / (2 * eps), dy[k], tol);
        }
        free(dy);
    }
    for (int i = 0; i < h->g.np; i++) {
        nn_param *p = &h->g.p[i];
        for (int t = 0; t < 8; t++) {
            size_t k = p->offset + (size_t)(urand() * (double)p->numel);
            float keep = h->g.params[k];
            h->g.params[k] = keep + eps;
            double lp = objective(h);
            h->g.params[k] = keep - eps;
            double lm = objective(h);
            h->g.params[k] = keep;
            CHECKF(fabs((lp - lm) / (2 * eps) - h->g.grads[k]) <= tol * fmax(1, fabs(h->g.grads[k])),
                   "%s[%zu]: %g vs %g", p->name, k - p->offset, (lp - lm) / (2 * eps), h->g.grads[k]);
        }
    }
}

static void check_grads(hx *h, double tol) { check_grads_eps(h, tol, 1e-2f); }

static void done(hx *h)
{
    rt_arena_free(&h->a);
    free(h->ry);
}

static float at(const nn_node *n, int s, int c, int y, int x)
{
    return n->y[(((size_t)s * n->out.c + c) * n->out.h + y) * n->out.w + x];
}

TEST(graph_op_conv2d_conv1d)
{
    static const int cfg[][7] = {/* c h w k ks stride pad */ {3, 7, 6, 4, 3, 1, 1}, {2, 9, 9, 3, 3, 2, 1},
                                 {4, 5, 5, 5, 1, 2, 0}, {1, 8, 8, 2, 5, 1, 0}, {3, 11, 10, 2, 7, 2, 3}};
    for (int t = 0; t < 5; t++) {
        const int *c = cfg[t];
        for (int bias = 0; bias <= 1; bias++) {
            hx h;
            begin(&h, 2);
            int x = source(&h, (nn_shape){c[0], c[1], c[2], 0});
            int y = nn_conv2d(&h.g, "conv", x, c[3], c[4], c[5], c[6], bias);
            finish(&h, y);
            objective(&h);
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
                                        acc += (double)w[((k * c[0] + ci) * c[4] + r) * c[4] + u] * at(X, s, ci, iy, ix);
                                    }
                            CHECK_NEAR(at(Y, s, k, p, q), acc, 1e-4);
                        }
            check_grads(&h, 2e-2);
            done(&h);
        }
    }
    hx h; /* conv1d: [c, 1, len] with a [k, c, w] weight */
    begin(&h, 3);
    int x = source(&h, (nn_shape){5, 1, 9, 0});
    int y = nn_conv1d(&h.g, "convs.0", x, 4, 3);
    finish(&h, y);
    CHECK_EQ(h.g.p[0].ndim, 3);
    CHECK_EQ(h.g.nodes[y].out.w, 7);
    check_grads(&h, 2e-2);
    done(&h);
}

TEST(graph_op_linear_relu_add_concat_flatten)
{
    hx h;
    begin(&h, 3);
    int x = source(&h, (nn_shape){7, 1, 1, 0});
    int y = nn_linear(&h.g, "fc", x, 5);
    finish(&h, y);
    objective(&h);
    for (int s = 0; s < 3; s++)
        for (int o = 0; o < 5; o++) {
            double acc = nn_pw(&h.g, &h.g.nodes[y], 1)[o];
            for (int i = 0; i < 7; i++) acc += (double)nn_pw(&h.g, &h.g.nodes[y], 0)[o * 7 + i] * h.g.nodes[x].y[s * 7 + i];
            CHECK_NEAR(h.g.nodes[y].y[s * 5 + o], acc, 1e-5);
        }
    check_grads(&h, 1e-2);
    done(&h);

    begin(&h, 2);
    x = source(&h, (nn_shape){3, 4, 5, 0});
    y = nn_relu(&h.g, x);
    finish(&h, y);
    objective(&h);
    for (int k = 0; k < 120; k++) CHECK(h.g.nodes[y].y[k] == fmaxf(h.g.nodes[x].y[k], 0));
    check_grads(&h, 1e-2);
    done(&h);

    begin(&h, 2);
    int a = source(&h, (nn_shape){3, 2, 5, 0}), b = source(&h, (nn_shape){3, 2, 5, 0});
    y = nn_add2(&h.g, a, b);
    finish(&h, y);
    objective(&h);
    for (int k = 0; k < 60; k++) CHECK(h.g.nodes[y].y[k] == h.g.nodes[a].y[k] + h.g.nodes[b].y[k]);
    check_grads(&h, 1e-2);
    done(&h);

    begin(&h, 2);
    int parts[3] = {source(&h, (nn_shape){2, 1, 1, 0}), source(&h, (nn_shape){3, 1, 1, 0}),
                    source(&h, (nn_shape){1, 1, 1, 0})};
    y = nn_concat(&h.g, parts, 3);
    finish(&h, y);
    objective(&h);
    CHECK_EQ(h.g.nodes[y].out.c, 6);
    CHECK(h.g.nodes[y].y[6 + 2] == h.g.nodes[parts[1]].y[3]); /* sample 1, channel 2 = part 1's first */
    CHECK(h.g.nodes[y].y[5] == h.g.nodes[parts[2]].y[0]);
    check_grads(&h, 1e-2);
    done(&h);

    begin(&h, 2);
    x = source(&h, (nn_shape){2, 3, 2, 0});
    y = nn_flatten(&h.g, nn_relu(&h.g, x));
    finish(&h, y);
    CHECK_EQ(h.g.nodes[y].out.c, 12);
    CHECK(h.g.nodes[y].y == h.g.nodes[y - 1].y); /* a view */
    check_grads(&h, 1e-2);
    done(&h);
}

TEST(graph_op_batchnorm_train_and_eval)
{
    static const int cfg[][3] = {{3, 4, 5}, {2, 1, 1}, {5, 7, 3}};
    for (int t = 0; t < 3; t++) {
        hx h;
        begin(&h, 4);
        int x = source(&h, (nn_shape){cfg[t][0], cfg[t][1], cfg[t][2], 0});
        int y = nn_batchnorm(&h.g, "bn", x);
        finish(&h, y);
        CHECK_EQ(h.g.nb, 3);
        CHECK(h.g.b[2].dtype == RT_I64);
        objective(&h);
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
        check_grads(&h, 3e-2);
        done(&h);
    }
}

TEST(graph_op_pools_dropout_embedding_max_time_log_softmax)
{
    static const int cfg[][5] = {/* h w k stride pad */ {6, 6, 2, 2, 0}, {7, 9, 3, 2, 1}, {5, 5, 3, 1, 1}};
    for (int t = 0; t < 3; t++) {
        hx h;
        begin(&h, 2);
        int x = source(&h, (nn_shape){3, cfg[t][0], cfg[t][1], 0});
        int y = nn_maxpool(&h.g, x, cfg[t][2], cfg[t][3], cfg[t][4]);
        finish(&h, y);
        objective(&h);
        nn_node *X = &h.g.nodes[x], *Y = &h.g.nodes[y];
        for (int s = 0; s < 2; s++)
            for (int c = 0; c < 3; c++)
                for (int p = 0; p < Y->out.h; p++)
                    for (int q = 0; q < Y->out.w; q++) {
                        float m = -INFINITY;
                        for (int r = 0; r < cfg[t][2]; r++)
                            for (int u = 0; u < cfg[t][2]; u++) {
                                int iy = p * cfg[t][3] - cfg[t][4] + r, ix = q * cfg[t][3] - cfg[t][4] + u;
                                if (iy >= 0 && ix >= 0 && iy < X->out.h && ix < X->out.w) m = fmaxf(m, at(X, s, c, iy, ix));
                            }
                        CHECK(at(Y, s, c, p, q) == m);
                    }
        check_grads(&h, 1e-2);
        done(&h);
    }
    hx h;
    begin(&h, 3);
    int x = source(&h, (nn_shape){4, 3, 5, 0});
    int y = nn_avgpool_1x1(&h.g, x);
    finish(&h, y);
    objective(&h);
    double s = 0;
    for (int k = 0; k < 15; k++) s += h.g.nodes[x].y[15 * 5 + k]; /* sample 1, channel 1 */
    CHECK_NEAR(h.g.nodes[y].y[4 + 1], s / 15, 1e-5);
    check_grads(&h, 1e-2);
    done(&h);

    for (int two_d = 0; two_d <= 1; two_d++) {
        begin(&h, 4);
        x = source(&h, (nn_shape){6, 2, 3, 0});
        y = nn_dropout(&h.g, x, 0.4f, two_d);
        finish(&h, y);
        objective(&h);
        int kept = 0;
        for (int k = 0; k < 4 * 36; k++) {
            float xv = h.g.nodes[x].y[k], yv = h.g.nodes[y].y[k];
            CHECK(yv == 0.0f || fabsf(yv - xv / 0.6f) <= 1e-6f * fabsf(yv) + 1e-7f);
            kept += yv != 0.0f;
            if (two_d && k % 6) CHECK((yv == 0.0f) == (h.g.nodes[y].y[k - 1] == 0.0f) || xv == 0.0f);
        }
        CHECK(kept > 20 && kept < 4 * 36 - 20);
        check_grads(&h, 1e-2);
        done(&h);
    }

    begin(&h, 2);
    int ids = source(&h, (nn_shape){1, 1, 6, 1});
    y = nn_embedding(&h.g, "embedding", ids, 7, 5);
    finish(&h, y);
    objective(&h);
    const int32_t *tok = (const int32_t *)h.g.nodes[ids].y;
    for (int s2 = 0; s2 < 2; s2++)
        for (int d = 0; d < 5; d++)
            for (int t = 0; t < 6; t++)
                CHECK(h.g.nodes[y].y[(s2 * 5 + d) * 6 + t] == nn_pw(&h.g, &h.g.nodes[y], 0)[tok[s2 * 6 + t] * 5 + d]);
    check_grads(&h, 1e-2);
    done(&h);

    begin(&h, 3);
    x = source(&h, (nn_shape){4, 1, 7, 0});
    y = nn_max_time(&h.g, x);
    finish(&h, y);
    objective(&h);
    for (int k = 0; k < 12; k++) {
        float m = -INFINITY;
        for (int t = 0; t < 7; t++) m = fmaxf(m, h.g.nodes[x].y[k * 7 + t]);
        CHECK(h.g.nodes[y].y[k] == m);
    }
    check_grads(&h, 1e-2);
    done(&h);

    begin(&h, 3);
    x = source(&h, (nn_shape){6, 1, 1, 0});
    y = nn_log_softmax(&h.g, x);
    finish(&h, y);
    objective(&h);
    for (int s2 = 0; s2 < 3; s2++) {
        double z = 0;
        for (int k = 0; k < 6; k++) z += exp(h.g.nodes[x].y[s2 * 6 + k]);
        for (int k = 0; k < 6; k++) CHECK_NEAR(h.g.nodes[y].y[s2 * 6 + k], h.g.nodes[x].y[s2 * 6 + k] - log(z), 1e-5);
    }
    check_grads(&h, 1e-2);
    done(&h);
}

/* Transformer ops (nn/ops/tfm.c): forwards against their kernels' own tests
 * (test_kernels_tfm.c), here the graph wiring: shapes, parameters and backward
 * through each op and the tied classifier, by finite differences. */
TEST(graph_op_transformer)
{
    hx h;
    begin(&h, 2);
    int x = source(&h, (nn_shape){5, 1, 8, 0});
    int y = nn_gelu(&h.g, nn_conv1d_hf(&h.g, "fc", nn_layernorm(&h.g, "ln", x), 12, 0.3f));
    CHECK_EQ(h.g.nodes[y].out.c, 5);
    CHECK_EQ(h.g.nodes[y].out.w, 12);
    int y2 = nn_attention(&h.g, y, 2, 1); /* the stored version, beside */
    y = nn_attention(&h.g, y, 2, 0); /* 12 = 3 x 2 heads x 2 */
    y = nn_add2(&h.g, y, y2);
    CHECK_EQ(h.g.nodes[y].out.w, 4);
    finish(&h, y);
    CHECK(!strcmp(h.g.p[0].name, "ln.weight") && h.g.p[0].no_decay);
    CHECK(!strcmp(h.g.p[2].name, "fc.weight") && h.g.p[2].shape[0] == 8 && h.g.p[2].shape[1] == 12);
    check_grads_eps(&h, 2e-2, 1e-2f);
    done(&h);

    /* the tied classifier: wte's gradient is the classifier's plus the embedding's */
    begin(&h, 3);
    h.g.lm = 1;
    int tok = source(&h, (nn_shape){1, 1, 6, 1}); /* T = 5, ids in [0, 7) */
    int e = nn_tok_pos_embed(&h.g, "transformer", tok, 7, 8, 9);
    y = nn_lm_loss(&h.g, "lm_head", nn_layernorm(&h.g, "ln_f", e), e);
    CHECK_EQ(h.g.nodes[e].ia[3], 1);
    finish(&h, y);
    for (int s = 0; s < 3; s++) h.ry[s] = 0.7f; /* lm_loss scales uniformly */
    h.g.lm_scale = 0.7f;
    check_grads_eps(&h, 2e-2, 1e-2f);
    done(&h);
}

TEST(graph_every_op_is_covered_and_bad_graphs_fail_clearly)
{
    /* The tests above cover each op kind in nn_ops; a new op must be added here. */
    static const char *const covered[] = {"input", "conv2d", "linear", "batchnorm2d", "relu", "maxpool2d",
                                          "avgpool1x1", "add", "flatten", "dropout", "embedding", "max_time",
                                          "concat", "log_softmax", "tok_pos_embed", "layernorm", "conv1d_hf",
                                          "gelu", "attention", "lm_loss"};
    int n = 0;
    for (; nn_ops[n]; n++) {
        int found = 0;
        for (size_t k = 0; k < sizeof covered / sizeof covered[0]; k++) found |= !strcmp(covered[k], nn_ops[n]->kind);
        CHECKF(found, "op %s has no test in test_graph.c", nn_ops[n]->kind);
    }
    CHECK_EQ(n, (int)(sizeof covered / sizeof covered[0]));
    hx h;
    char err[256] = "";
    rt_arena plan;
    begin(&h, 2);
    int a = source(&h, (nn_shape){3, 4, 4, 0}), b = source(&h, (nn_shape){3, 2, 2, 0});
    nn_add2(&h.g, a, b);
    rt_arena_plan(&plan, "p");
    CHECK(nn_graph_finish(&h.g, &plan, 2, err, sizeof err) == -1);
    CHECKF(strstr(err, "node 3 (add)") && strstr(err, "shapes differ: 3x4x4 and 3x2x2"), "%s", err);
    begin(&h, 2);
    a = source(&h, (nn_shape){3, 4, 4, 0});
    nn_linear(&h.g, "fc", a, 5);
    CHECK(nn_graph_finish(&h.g, &plan, 2, err, sizeof err) == -1);
    CHECKF(strstr(err, "node 2 (linear fc)") && strstr(err, "flatten first"), "%s", err);
    begin(&h, 2);
    a = source(&h, (nn_shape){3, 4, 4, 0});
    nn_conv2d(&h.g, "c", a, 4, 7, 1, 1, 0);
    CHECK(nn_graph_finish(&h.g, &plan, 2, err, sizeof err) == -1);
    CHECKF(strstr(err, "larger than the padded input"), "%s", err);
}
