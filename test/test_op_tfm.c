/* The transformer ops (nn/ops/{tok_pos_embed,layernorm,conv1d_hf,gelu,attention,
 * lm_loss}.c) through the per-op harness: each forward against a naive double
 * reference written here, each backward against central finite differences, the
 * attributes by name. The kernels' own tests (ISA paths, threads, tiles) are in
 * test_kernels_tfm.c. */
#include "test/t.h"
#include "test/t_op.h"
#include "rt/half.h"
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

TEST(op_layernorm)
{
    t_op h;
    t_op_begin(&h, 2);
    int x = t_op_source(&h, (nn_shape){5, 1, 8, 0});
    nn_kv kv = {"eps", NULL, 1e-3};
    int y = nn_node_add(&h.g, "layernorm", "ln", &x, 1, &kv, 1);
    t_op_finish(&h, y);
    t_op_objective(&h);
    const float *w = nn_pw(&h.g, &h.g.nodes[y], 0), *b = nn_pw(&h.g, &h.g.nodes[y], 1);
    for (int r = 0; r < 10; r++) {
        const float *xr = h.g.nodes[x].y + r * 8;
        double m = 0, v = 0;
        for (int k = 0; k < 8; k++) m += xr[k] / 8.0;
        for (int k = 0; k < 8; k++) v += (xr[k] - m) * (xr[k] - m) / 8.0;
        for (int k = 0; k < 8; k++)
            CHECK_NEAR(h.g.nodes[y].y[r * 8 + k], (xr[k] - m) / sqrt(v + 1e-3) * w[k] + b[k], 1e-5);
    }
    CHECK(!strcmp(h.g.p[0].name, "ln.weight") && h.g.p[0].no_decay && h.g.p[1].no_decay);
    char d[128];
    nn_node_describe(&h.g, y, d, sizeof d);
    CHECKF(!strcmp(d, "layernorm ln <- 1 eps=0.001 -> 5x1x8"), "%s", d);
    t_op_check_grads_eps(&h, 2e-2, 1e-2f);
    t_op_done(&h);
}

TEST(op_conv1d_hf)
{
    t_op h;
    t_op_begin(&h, 2);
    int x = t_op_source(&h, (nn_shape){3, 1, 6, 0});
    int y = nn_conv1d_hf(&h.g, "fc", x, 5, 0.3f);
    t_op_finish(&h, y);
    t_op_objective(&h);
    const nn_node *Y = &h.g.nodes[y];
    const float *w = nn_pw(&h.g, Y, 0), *b = nn_pw(&h.g, Y, 1);
    CHECK(h.g.p[0].shape[0] == 6 && h.g.p[0].shape[1] == 5 && !h.g.p[0].no_decay && h.g.p[1].no_decay);
    for (int r = 0; r < 6; r++)
        for (int o = 0; o < 5; o++) {
            double s = b[o];
            for (int i = 0; i < 6; i++) s += (double)h.g.nodes[x].y[r * 6 + i] * w[i * 5 + o];
            CHECK_NEAR(Y->y[r * 5 + o], s, 1e-5);
        }
    t_op_check_grads(&h, 1e-2);
    t_op_done(&h);
    /* --amp bf16: x and w rounded to bf16, products summed in fp32 */
    t_op_begin(&h, 2);
    x = t_op_source(&h, (nn_shape){3, 1, 6, 0});
    y = nn_conv1d_hf(&h.g, "fc", x, 5, 0.3f);
    h.g.amp = NN_AMP_BF16;
    t_op_finish(&h, y);
    t_op_objective(&h);
    Y = &h.g.nodes[y];
    w = nn_pw(&h.g, Y, 0), b = nn_pw(&h.g, Y, 1);
    double far = 0;
    for (int r = 0; r < 6; r++)
        for (int o = 0; o < 5; o++) {
            double s = b[o], f = b[o];
            for (int i = 0; i < 6; i++) {
                float xv = h.g.nodes[x].y[r * 6 + i];
                s += (double)rt_bf16_to_f32(rt_f32_to_bf16(xv)) * rt_bf16_to_f32(rt_f32_to_bf16(w[i * 5 + o]));
                f += (double)xv * w[i * 5 + o];
            }
            CHECK_NEAR(Y->y[r * 5 + o], s, 1e-5);
            far = fmax(far, fabs(Y->y[r * 5 + o] - f));
        }
    CHECKF(far > 1e-5, "bf16 products should differ from fp32 ones (%g)", far);
    /* backward: dx = bf16(dy) bf16(w)^T, dW = bf16(x)^T bf16(dy) (finite differences
     * of a bf16 forward are too coarse) */
    memcpy(Y->dy, h.ry, sizeof(float) * 2 * 3 * 5);
    nn_backward_from(&h.g, y, 2);
    const float *gw = nn_pg(&h.g, Y, 0);
#define BF(v) ((double)rt_bf16_to_f32(rt_f32_to_bf16(v)))
    for (int r = 0; r < 6; r++)
        for (int i = 0; i < 6; i++) {
            double s = 0;
            for (int o = 0; o < 5; o++) s += BF(h.ry[r * 5 + o]) * BF(w[i * 5 + o]);
            CHECK_NEAR(h.g.nodes[x].dy[r * 6 + i], s, 1e-5);
        }
    for (int i = 0; i < 6; i++)
        for (int o = 0; o < 5; o++) {
            double s = 0;
            for (int r = 0; r < 6; r++) s += BF(h.g.nodes[x].y[r * 6 + i]) * BF(h.ry[r * 5 + o]);
            CHECK_NEAR(gw[i * 5 + o], s, 1e-5);
        }
#undef BF
    t_op_done(&h);
    /* out= is required, init_std must be positive: one error naming the key */
    t_op_begin(&h, 1);
    x = t_op_source(&h, (nn_shape){3, 1, 6, 0});
    nn_node_add(&h.g, "conv1d_hf", "fc", &x, 1, NULL, 0);
    CHECKF(strstr(h.g.err, "needs out="), "%s", h.g.err);
}

TEST(op_gelu)
{
    t_op h;
    t_op_begin(&h, 2);
    int x = t_op_source(&h, (nn_shape){4, 1, 7, 0});
    int y = nn_gelu(&h.g, x);
    t_op_finish(&h, y);
    t_op_objective(&h);
    for (int k = 0; k < 56; k++) {
        double v = h.g.nodes[x].y[k];
        CHECK_NEAR(h.g.nodes[y].y[k], 0.5 * v * (1 + tanh(sqrt(2 / M_PI) * (v + 0.044715 * v * v * v))), 1e-6);
    }
    t_op_check_grads(&h, 1e-2);
    t_op_done(&h);
}

/* Both modes against naive causal softmax attention, and their gradients. */
TEST(op_attention)
{
    for (int mode = 0; mode < 2; mode++) {
        enum { T = 5, H = 2, HD = 3, C = H * HD };
        t_op h;
        t_op_begin(&h, 2);
        int x = t_op_source(&h, (nn_shape){T, 1, 3 * C, 0});
        nn_kv kv[2] = {{"heads", NULL, H}, {"attention", mode ? "stored" : "flash", 0}};
        int y = nn_node_add(&h.g, "attention", NULL, &x, 1, kv, 2);
        t_op_finish(&h, y);
        CHECK(!h.g.err[0]);
        CHECK_EQ(h.g.nodes[y].out.w, C);
        t_op_objective(&h);
        for (int b = 0; b < 2; b++)
            for (int hh = 0; hh < H; hh++)
                for (int i = 0; i < T; i++) {
                    const float *q = h.g.nodes[x].y + ((size_t)b * T + i) * 3 * C + hh * HD;
                    double s[T], mx = -1e300, z = 0;
                    for (int j = 0; j <= i; j++) {
                        const float *k = h.g.nodes[x].y + ((size_t)b * T + j) * 3 * C + C + hh * HD;
                        s[j] = 0;
                        for (int d = 0; d < HD; d++) s[j] += (double)q[d] * k[d] / sqrt(HD);
                        mx = fmax(mx, s[j]);
                    }
                    for (int j = 0; j <= i; j++) z += exp(s[j] - mx);
                    for (int d = 0; d < HD; d++) {
                        double o = 0;
                        for (int j = 0; j <= i; j++)
                            o += exp(s[j] - mx) / z * h.g.nodes[x].y[((size_t)b * T + j) * 3 * C + 2 * C + hh * HD + d];
                        CHECK_NEAR(h.g.nodes[y].y[((size_t)b * T + i) * C + hh * HD + d], o, 1e-5);
                    }
                }
        char d[128];
        nn_node_describe(&h.g, y, d, sizeof d);
        CHECKF(strstr(d, mode ? "heads=2 attention=stored" : "heads=2 attention=flash"), "%s", d);
        t_op_check_grads_eps(&h, 2e-2, 1e-2f);
        t_op_done(&h);
    }
    t_op h;
    t_op_begin(&h, 1);
    int x = t_op_source(&h, (nn_shape){4, 1, 12, 0});
    nn_kv kv[2] = {{"heads", NULL, 3}, {"attention", "sparse", 0}};
    nn_node_add(&h.g, "attention", NULL, &x, 1, kv, 2);
    CHECKF(strstr(h.g.err, "attention=sparse"), "%s", h.g.err);
    t_op_begin(&h, 1);
    x = t_op_source(&h, (nn_shape){4, 1, 12, 0});
    nn_attention(&h.g, x, 5, 0);
    CHECKF(strstr(h.g.err, "not 3 x heads (5)"), "%s", h.g.err);
}

TEST(op_tok_pos_embed)
{
    t_op h;
    t_op_begin(&h, 3);
    int tok = t_op_source(&h, (nn_shape){1, 1, 5, 1}); /* ids in [0, 7) */
    int y = nn_tok_pos_embed(&h.g, "transformer", tok, 7, 4, 9);
    int z = nn_layernorm(&h.g, "ln", y); /* something with a gradient to check through */
    t_op_finish(&h, z);
    t_op_objective(&h);
    const nn_node *Y = &h.g.nodes[y];
    const int32_t *ids = (const int32_t *)(const void *)h.g.nodes[tok].y;
    for (int b = 0; b < 3; b++)
        for (int t = 0; t < 5; t++)
            for (int c = 0; c < 4; c++)
                CHECK(Y->y[(b * 5 + t) * 4 + c] ==
                      nn_pw(&h.g, Y, 0)[ids[b * 5 + t] * 4 + c] + nn_pw(&h.g, Y, 1)[t * 4 + c]);
    CHECK(!strcmp(h.g.p[0].name, "transformer.wte.weight") && !strcmp(h.g.p[1].name, "transformer.wpe.weight"));
    t_op_check_grads_eps(&h, 2e-2, 1e-2f);
    /* wpe rows past T have no gradient (written as zeros) */
    for (int k = 5 * 4; k < 9 * 4; k++) CHECK(nn_pg(&h.g, Y, 1)[k] == 0.0f);
    t_op_done(&h);
    /* a sequence longer than the context is refused with --seq-len named */
    t_op_begin(&h, 1);
    tok = t_op_source(&h, (nn_shape){1, 1, 12, 1});
    nn_tok_pos_embed(&h.g, "transformer", tok, 7, 4, 9);
    CHECKF(strstr(h.g.err, "context is 9 (--seq-len)"), "%s", h.g.err);
}

/* The tied classifier: mean token loss per sample against a naive softmax, and wte's
 * gradient the classifier's plus the embedding's. */
TEST(op_lm_loss)
{
    t_op h;
    t_op_begin(&h, 3);
    h.g.lm = 1;
    int tok = t_op_source(&h, (nn_shape){1, 1, 6, 1}); /* T = 5, ids in [0, 7) */
    int e = nn_tok_pos_embed(&h.g, "transformer", tok, 7, 8, 9);
    int ln = nn_layernorm(&h.g, "ln_f", e);
    int y = nn_lm_loss(&h.g, "lm_head", ln, e);
    CHECK_EQ(nn_lm_loss_embedding(&h.g.nodes[y]), e);
    t_op_finish(&h, y);
    t_op_objective(&h);
    const int32_t *ids = (const int32_t *)(const void *)h.g.nodes[tok].y;
    const float *wte = nn_pw(&h.g, &h.g.nodes[e], 0);
    for (int b = 0; b < 3; b++) {
        double sum = 0;
        for (int t = 0; t < 5; t++) {
            const float *xr = h.g.nodes[ln].y + (b * 5 + t) * 8;
            double lg[7], mx = -1e300, z = 0;
            for (int v = 0; v < 7; v++) {
                lg[v] = 0;
                for (int c = 0; c < 8; c++) lg[v] += (double)xr[c] * wte[v * 8 + c];
                mx = fmax(mx, lg[v]);
            }
            for (int v = 0; v < 7; v++) z += exp(lg[v] - mx);
            sum += mx + log(z) - lg[ids[b * 6 + t + 1]];
        }
        CHECK_NEAR(h.g.nodes[y].y[b], sum / 5, 1e-5);
    }
    for (int s = 0; s < 3; s++) h.ry[s] = 0.7f; /* lm_loss scales uniformly by lm_scale */
    h.g.lm_scale = 0.7f;
    t_op_check_grads_eps(&h, 2e-2, 1e-2f);
    t_op_done(&h);
    /* the embedding found by default (embedding=-1: the nearest before it) */
    t_op_begin(&h, 1);
    h.g.lm = 1;
    tok = t_op_source(&h, (nn_shape){1, 1, 6, 1});
    e = nn_tok_pos_embed(&h.g, "transformer", tok, 7, 8, 9);
    int in[2] = {e, tok};
    y = nn_node_add(&h.g, "lm_loss", NULL, in, 2, NULL, 0);
    CHECK(!h.g.err[0]);
    CHECK_EQ(nn_lm_loss_embedding(&h.g.nodes[y]), e);
    /* without an embedding: refused by name */
    t_op_begin(&h, 1);
    h.g.lm = 1;
    tok = t_op_source(&h, (nn_shape){1, 1, 6, 1});
    int f = t_op_source(&h, (nn_shape){5, 1, 8, 0});
    int in2[2] = {f, tok};
    nn_node_add(&h.g, "lm_loss", NULL, in2, 2, NULL, 0);
    CHECKF(strstr(h.g.err, "no tok_pos_embed node"), "%s", h.g.err);
}
