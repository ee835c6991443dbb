/* The transformer kernels on the device (kernels/cuda/k_cuda_tfm.cu) against the CPU
 * ones (kernels/k_tfm.h): GELU and the embedding forward bit for bit; LayerNorm,
 * Conv1D, attention (T across the CPU's 64-row tiles, head sizes not multiples of
 * anything) and the fused classifier (several row blocks, ignored targets, dW added)
 * to rounding; each device result repeats bit for bit. */
#include "test/gpu/g.h"
#include "kernels/k_tfm.h"
#include <math.h>

#define REL(a, b, n, tol, ...) CHECKF(g_relerr(a, b, n) <= (tol), __VA_ARGS__)

TEST(gpu_tfm_gelu_bit_exact_and_layernorm)
{
    g_init();
    size_t n = 100003;
    float *x = g_rand(n, 1), *dy = g_rand(n, 2), *y = malloc(n * 4), *dx = malloc(n * 4);
    for (size_t i = 0; i < n; i++) x[i] *= 12.0f; /* the tails too */
    x[5] = -90.0f, x[6] = 95.0f, x[7] = 0.0f, x[8] = -0.0f;
    k_gelu_fwd(n, x, y);
    k_gelu_bwd(n, x, dy, dx);
    float *gx = g_up(x, n * 4), *gdy = g_up(dy, n * 4), *gy = g_dev(n * 4);
    g_need(k_cuda_gelu_fwd(n, gx, gy, NULL) == 0, "gelu fwd");
    CHECKF(g_ndiff(g_result(gy, n), y, n, 4) == 0, "gelu fwd: %zu values differ", g_ndiff(g_result(gy, n), y, n, 4));
    g_need(k_cuda_gelu_bwd(n, gx, gdy, gdy, NULL) == 0, "gelu bwd"); /* dx over dy */
    CHECKF(g_ndiff(g_result(gdy, n), dx, n, 4) == 0, "gelu bwd");

    static const int shapes[][2] = {{7, 1}, {33, 384}, {5, 769}, {300, 64}};
    for (int k = 0; k < 4; k++) {
        int r = shapes[k][0], c = shapes[k][1];
        size_t m = (size_t)r * c;
        float *lx = g_rand(m, 10 + k), *w = g_rand(c, 20 + k), *b = g_rand(c, 30 + k), *ld = g_rand(m, 40 + k);
        for (size_t i = 0; i < m; i++) lx[i] = lx[i] * 3 + 1.5f;
        float *ly = malloc(m * 4), *mu = malloc(r * 4), *rs = malloc(r * 4), *ldx = malloc(m * 4);
        float *dw = malloc(c * 4), *db = malloc(c * 4);
        k_layernorm_fwd(r, c, lx, w, b, 1e-5f, ly, mu, rs);
        k_layernorm_bwd(r, c, lx, w, mu, rs, ld, ldx, dw, db);
        float *g_x = g_up(lx, m * 4), *g_w = g_up(w, c * 4), *g_b = g_up(b, c * 4), *g_y = g_dev(m * 4);
        float *g_mu = g_dev(r * 4), *g_rs = g_dev(r * 4), *g_d = g_up(ld, m * 4), *g_dw = g_dev(c * 4),
              *g_db = g_dev(c * 4);
        g_need(k_cuda_layernorm_fwd(r, c, g_x, g_w, g_b, 1e-5f, g_y, g_mu, g_rs, NULL) == 0, "layernorm fwd");
        float *y1 = g_result(g_y, m);
        REL(y1, ly, m, 1e-5, "layernorm fwd %dx%d", r, c);
        REL(g_result(g_rs, r), rs, r, 1e-5, "layernorm rstd %dx%d", r, c);
        g_need(k_cuda_layernorm_fwd(r, c, g_x, g_w, g_b, 1e-5f, g_y, g_mu, g_rs, NULL) == 0, "layernorm fwd");
        CHECK(g_ndiff(g_result(g_y, m), y1, m, 4) == 0); /* repeats */
        g_need(k_cuda_layernorm_bwd(r, c, g_x, g_w, g_mu, g_rs, g_d, g_d, g_dw, g_db, NULL) == 0, "layernorm bwd");
        REL(g_result(g_d, m), ldx, m, 1e-4, "layernorm dx %dx%d", r, c);
        REL(g_result(g_dw, c), dw, c, 1e-4, "layernorm dw %dx%d", r, c);
        REL(g_result(g_db, c), db, c, 1e-4, "layernorm db %dx%d", r, c);
    }
}

TEST(gpu_tfm_embedding_and_conv1d_hf)
{
    g_init();
    int B = 3, T = 37, C = 24, V = 50, ctx = 40, ld = T + 1;
    int32_t *ids = malloc(sizeof(int32_t) * B * ld);
    for (int i = 0; i < B * ld; i++) ids[i] = (int32_t)(k_rand_uniform(9, i) * 12) * 4 % V; /* repeats */
    size_t m = (size_t)B * T * C;
    float *wte = g_rand((size_t)V * C, 1), *wpe = g_rand((size_t)ctx * C, 2), *dy = g_rand(m, 3), *y = malloc(m * 4);
    float *dwte = g_rand((size_t)V * C, 4), *dwpe = malloc((size_t)ctx * C * 4);
    k_tok_pos_embed_fwd(B, T, C, ids, ld, wte, wpe, y);
    int32_t *gids = g_up(ids, sizeof(int32_t) * B * ld);
    float *gwte = g_up(wte, (size_t)V * C * 4), *gwpe = g_up(wpe, (size_t)ctx * C * 4), *gy = g_dev(m * 4);
    g_need(k_cuda_tok_pos_embed_fwd(B, T, C, gids, ld, gwte, gwpe, gy, NULL) == 0, "tok_pos_embed fwd");
    CHECK(g_ndiff(g_result(gy, m), y, m, 4) == 0);
    float *gdy = g_up(dy, m * 4);
    for (int acc = 0; acc < 2; acc++) {
        float *gdwte = g_up(dwte, (size_t)V * C * 4), *gdwpe = g_dev((size_t)T * C * 4);
        float *hw = malloc((size_t)V * C * 4);
        memcpy(hw, dwte, (size_t)V * C * 4);
        k_tok_pos_embed_bwd(B, T, C, V, ids, ld, dy, hw, dwpe, acc);
        g_need(k_cuda_tok_pos_embed_bwd(B, T, C, V, gids, ld, gdy, gdwte, gdwpe, acc, NULL) == 0, "tok_pos_embed bwd");
        REL(g_result(gdwte, (size_t)V * C), hw, (size_t)V * C, 1e-6, "dwte acc=%d", acc);
        REL(g_result(gdwpe, (size_t)T * C), dwpe, (size_t)T * C, 1e-6, "dwpe acc=%d", acc);
    }

    static const int sh[][3] = {{7, 5, 3}, {70, 64, 192}, {129, 33, 65}};
    for (int k = 0; k < 3; k++) {
        int n = sh[k][0], in = sh[k][1], out = sh[k][2];
        float *x = g_rand((size_t)n * in, 50 + k), *w = g_rand((size_t)in * out, 60 + k), *b = g_rand(out, 70 + k);
        float *d = g_rand((size_t)n * out, 80 + k), *cy = malloc((size_t)n * out * 4), *cdx = malloc((size_t)n * in * 4);
        float *cdw = malloc((size_t)in * out * 4), *cdb = malloc(out * 4);
        void *ws = malloc(k_conv1d_hf_workspace(in, out));
        k_conv1d_hf_fwd(n, in, out, x, w, b, cy);
        k_conv1d_hf_bwd(n, in, out, x, w, d, cdx, cdw, cdb, ws);
        size_t wsb = k_cuda_conv1d_hf_workspace(n, in, out);
        void *gws = wsb ? g_dev(wsb) : NULL;
        float *g_x = g_up(x, (size_t)n * in * 4), *g_w = g_up(w, (size_t)in * out * 4), *g_b = g_up(b, out * 4);
        float *g_y = g_dev((size_t)n * out * 4), *g_d = g_up(d, (size_t)n * out * 4), *g_dx = g_dev((size_t)n * in * 4);
        float *g_dw = g_dev((size_t)in * out * 4), *g_db = g_dev(out * 4);
        g_need(k_cuda_conv1d_hf_fwd(n, in, out, g_x, g_w, g_b, g_y, gws, NULL) == 0, "conv1d_hf fwd");
        REL(g_result(g_y, (size_t)n * out), cy, (size_t)n * out, 1e-5, "conv1d_hf fwd %d %d %d", n, in, out);
        g_need(k_cuda_conv1d_hf_bwd(n, in, out, g_x, g_w, g_d, g_dx, g_dw, g_db, gws, NULL) == 0, "conv1d_hf bwd");
        REL(g_result(g_dx, (size_t)n * in), cdx, (size_t)n * in, 1e-5, "conv1d_hf dx %d %d %d", n, in, out);
        REL(g_result(g_dw, (size_t)in * out), cdw, (size_t)in * out, 1e-5, "conv1d_hf dw %d %d %d", n, in, out);
        REL(g_result(g_db, out), cdb, out, 1e-5, "conv1d_hf db %d %d %d", n, in, out);
        free(ws);
    }
}

TEST(gpu_tfm_attention_and_classifier)
{
    g_init();
    /* T across 32-row tiles; heads of 1 to 4 chunks of 64 (K_ATTN_MAX_HD 256), tails too */
    static const int sh[][4] = {{1, 1, 1, 3}, {2, 70, 2, 5}, {1, 130, 3, 16}, {2, 9, 4, 64}, {1, 100, 2, 64},
                                {1, 40, 2, 80}, {1, 37, 1, 130}, {1, 33, 1, 256}};
    for (int k = 0; k < 8; k++) {
        int B = sh[k][0], T = sh[k][1], H = sh[k][2], HD = sh[k][3], C = H * HD;
        size_t nq = (size_t)B * T * 3 * C, ny = (size_t)B * T * C, nl = (size_t)B * H * T;
        float *qkv = g_rand(nq, 100 + k), *dy = g_rand(ny, 110 + k), *y = malloc(ny * 4), *lse = malloc(nl * 4);
        float *dq = malloc(nq * 4);
        for (size_t i = 0; i < nq; i++) qkv[i] *= 2.0f;
        k_attention_fwd(B, T, H, HD, qkv, y, lse);
        k_attention_bwd(B, T, H, HD, qkv, y, lse, dy, dq);
        float *g_q = g_up(qkv, nq * 4), *g_y = g_dev(ny * 4), *g_l = g_dev(nl * 4), *g_d = g_up(dy, ny * 4);
        float *g_dq = g_dev(nq * 4);
        void *ws = g_dev(k_cuda_attention_workspace(B, T, H, HD));
        g_need(k_cuda_attention_fwd(B, T, H, HD, g_q, g_y, g_l, NULL) == 0, "attention fwd");
        float *y1 = g_result(g_y, ny);
        REL(y1, y, ny, 1e-5, "attention fwd b%d t%d h%d hd%d", B, T, H, HD);
        REL(g_result(g_l, nl), lse, nl, 1e-5, "attention lse b%d t%d h%d hd%d", B, T, H, HD);
        g_need(k_cuda_attention_bwd(B, T, H, HD, g_q, g_y, g_l, g_d, g_dq, ws, NULL) == 0, "attention bwd");
        float *d1 = g_result(g_dq, nq);
        REL(d1, dq, nq, 1e-4, "attention bwd b%d t%d h%d hd%d", B, T, H, HD);
        g_need(k_cuda_attention_bwd(B, T, H, HD, g_q, g_y, g_l, g_d, g_dq, ws, NULL) == 0, "attention bwd");
        CHECK(g_ndiff(g_result(g_dq, nq), d1, nq, 4) == 0);
    }
    /* the classifier: 3 row blocks of a 2^21-logit budget at v 50000 would be slow on the
     * executor; v 70000 makes blocks of 48 rows: 100 rows are 3 blocks, 50 are 2 */
    static const int cs[][3] = {{5, 8, 11}, {G_BIG(100, 50), 16, 70000}};
    for (int k = 0; k < 4; k++) {
        int n = cs[k / 2][0], c = cs[k / 2][1], v = cs[k / 2][2], acc = k % 2; /* dW added to, or written */
        float *x = g_rand((size_t)n * c, 200 + k), *w = g_rand((size_t)v * c, 210 + k);
        int32_t *tg = malloc(sizeof(int32_t) * n);
        for (int i = 0; i < n; i++) tg[i] = i == 2 ? -1 : (int32_t)(k_rand_uniform(220 + k, i) * v);
        float *lr = malloc(n * 4), *dx = malloc((size_t)n * c * 4), *dw = g_rand((size_t)v * c, 230 + k);
        float *dw0 = malloc((size_t)v * c * 4);
        memcpy(dw0, dw, (size_t)v * c * 4);
        void *ws = malloc(k_classifier_workspace(n, c, v));
        k_classifier_fwd_bwd(n, c, v, x, w, tg, 0.3f, lr, dx, dw, acc, ws);
        float *g_x = g_up(x, (size_t)n * c * 4), *g_w = g_up(w, (size_t)v * c * 4), *g_lr = g_dev(n * 4);
        int32_t *g_t = g_up(tg, sizeof(int32_t) * n);
        float *g_dx = g_dev((size_t)n * c * 4), *g_dw = g_up(dw0, (size_t)v * c * 4);
        void *gws = g_dev(k_cuda_classifier_workspace(n, c, v));
        g_need(k_cuda_classifier_fwd_bwd(n, c, v, g_x, g_w, g_t, 0.3f, g_lr, g_dx, g_dw, acc, gws, NULL) == 0,
               "classifier");
        REL(g_result(g_lr, n), lr, n, 1e-5, "classifier loss n%d c%d v%d acc %d", n, c, v, acc);
        REL(g_result(g_dx, (size_t)n * c), dx, (size_t)n * c, 1e-4, "classifier dx n%d c%d v%d acc %d", n, c, v, acc);
        REL(g_result(g_dw, (size_t)v * c), dw, (size_t)v * c, 1e-5, "classifier dw n%d c%d v%d acc %d", n, c, v, acc);
        free(ws);
    }
}
