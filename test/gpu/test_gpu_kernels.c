/* Every CUDA kernel, forward and backward, against the CPU kernels: LeNet's shapes,
 * ResNet-like 3x3 convolutions (64-256 channels, 56x56 down to 7x7) and random odd
 * shapes. Elementwise kernels, the RNG and conversions must match bit for bit; GEMM-
 * based ones to rounding (a different summation order). */
#include "test/gpu/g.h"
#include "kernels/k_optim.h"
#include "transport/tp_reduce.h"
#include <math.h>

#define CONV_TOL 2e-4 /* relative to the largest reference value */

/* An r x s kernel; bias 0: no bias (ResNet's convs): b and db NULL. */
static void conv_case_rs(int n, int c, int h, int w, int k, int r, int s, int st, int pad, int bias)
{
    g_init();
    k_conv_shape sh = {.n = n, .c = c, .h = h, .w = w, .k = k, .r = r, .s = s, .stride = st, .pad = pad};
    k_conv_shape_init(&sh);
    size_t nx = (size_t)n * c * h * w, nw = (size_t)k * c * r * s, ny = (size_t)n * k * sh.p * sh.q;
    float *x = g_rand(nx, 1), *wt = g_rand(nw, 2), *b = g_rand(k, 3), *dy = g_rand(ny, 4);
    float *y = malloc(ny * 4), *dx = malloc(nx * 4), *dw = malloc(nw * 4), *db = malloc(k * 4);
    void *ws = aligned_alloc(64, (k_conv2d_workspace(&sh) + 64) / 64 * 64);
    if (!bias) b = db = NULL;
    k_conv2d_fwd(&sh, x, wt, b, y, ws);
    k_conv2d_bwd(&sh, x, wt, dy, dx, dw, db, ws);

    float *gx = g_up(x, nx * 4), *gw = g_up(wt, nw * 4), *gb = bias ? g_up(b, k * 4) : NULL, *gdy = g_up(dy, ny * 4);
    float *gy = g_dev(ny * 4), *gdx = g_dev(nx * 4), *gdw = g_dev(nw * 4), *gdb = bias ? g_dev(k * 4) : NULL;
    void *gws = g_dev(k_cuda_conv2d_workspace(&sh) + 64);
    g_need(k_cuda_conv2d_fwd(&sh, gx, gw, gb, gy, gws, NULL) == 0, "conv fwd");
    g_need(k_cuda_conv2d_bwd(&sh, gx, gw, gdy, gdx, gdw, gdb, gws, NULL) == 0, "conv bwd");
    g_need(port_dev_sync("conv") == 0, "conv");
    float *ry = g_result(gy, ny), *rdx = g_result(gdx, nx), *rdw = g_result(gdw, nw);
    double ey = g_relerr(ry, y, ny), ex = g_relerr(rdx, dx, nx), ew = g_relerr(rdw, dw, nw);
    double eb = bias ? g_relerr(g_result(gdb, k), db, k) : 0;
    CHECKF(ey < CONV_TOL && ex < CONV_TOL && ew < 10 * CONV_TOL && eb < 10 * CONV_TOL,
           "conv n=%d c=%d %dx%d k=%d r=%d s=%d st=%d pad=%d: rel err y %.2g dx %.2g dw %.2g db %.2g", n, c, h, w, k,
           r, s, st, pad, ey, ex, ew, eb);
    /* Deterministic: a second run gives the same bits. */
    g_need(k_cuda_conv2d_bwd(&sh, gx, gw, gdy, gdx, gdw, gdb, gws, NULL) == 0, "conv bwd");
    float *rdw2 = g_result(gdw, nw);
    CHECK(g_ndiff(rdw, rdw2, nw, 4) == 0);
}

static void conv_case(int n, int c, int h, int w, int k, int r, int st, int pad, int bias)
{
    conv_case_rs(n, c, h, w, k, r, r, st, pad, bias);
}

TEST(gpu_conv1d_textcnn_shapes)
{
    /* conv1d over [n, embed, len] as a 1 x width conv2d: widths 3, 4, 5, 100 filters. */
    for (int wd = 3; wd <= 5; wd++) conv_case_rs(G_BIG(64, 4), 128, 1, 64, 100, 1, wd, 1, 0, 1);
    conv_case_rs(7, 33, 1, 50, 20, 1, 4, 1, 0, 1);
}

TEST(gpu_conv_lenet_shapes)
{
    conv_case(64, 1, 28, 28, 10, 5, 1, 0, 1);
    conv_case(64, 10, 12, 12, 20, 5, 1, 0, 1);
    conv_case(1, 1, 28, 28, 10, 5, 1, 0, 1);
    conv_case(G_BIG(1000, 32), 10, 12, 12, 20, 5, 1, 0, 1);
}

/* Channels and planes a quarter on the executor (its index maths is the same). */
#define R(x) G_BIG(x, (x) / 4 >= 7 ? (x) / 4 : (x))
TEST(gpu_conv_resnet_shapes)
{
    conv_case(G_BIG(32, 1), R(64), R(56), R(56), R(64), 3, 1, 1, 1);
    conv_case(G_BIG(32, 1), R(64), R(56), R(56), R(128), 3, 2, 1, 1);
    conv_case(G_BIG(32, 1), R(128), R(28), R(28), R(128), 3, 1, 1, 1);
    conv_case(G_BIG(32, 1), R(256), 14, 14, R(256), 3, 1, 1, 1);
    conv_case(G_BIG(32, 1), R(256), 7, 7, R(256), 3, 1, 1, 1);
    conv_case(G_BIG(32, 1), R(64), R(56), R(56), R(256), 1, 1, 0, 1);
    /* The stem (7x7 s2 p3), strided 3x3 and the 1x1 s2 projection shortcuts, no bias. */
    conv_case(G_BIG(8, 1), 3, R(224), R(224), R(64), 7, 2, 3, 0);
    conv_case(G_BIG(32, 1), R(128), R(28), R(28), R(256), 3, 2, 1, 0);
    conv_case(G_BIG(32, 1), R(64), R(56), R(56), R(128), 1, 2, 0, 0);
    conv_case(G_BIG(32, 1), R(256), 14, 14, R(512), 1, 2, 0, 0);
    conv_case(G_BIG(128, 2), 16, 28, 28, 32, 1, 2, 0, 0); /* resnet20 on 28x28 */
}

TEST(gpu_conv_random_odd_shapes)
{
    for (int i = 0; i < 12; i++) {
        uint64_t s = 77 + i;
#define RN(lo, hi, j) ((lo) + (int)(k_rand_uniform(s, j) * ((hi) - (lo) + 1)))
        int r = RN(1, 5, 0), st = RN(1, 3, 1), pad = RN(0, r / 2 + 1, 2);
        int h = RN(r, 20, 3), w = RN(r, 20, 4);
        conv_case(RN(1, 9, 5), RN(1, 17, 6), h, w, RN(1, 33, 7), r, st, pad, 1);
    }
}

/* bias 0: no bias (b and db NULL). */
static void linear_case_b(int n, int in, int out, int bias)
{
    g_init();
    float *x = g_rand((size_t)n * in, 5), *w = g_rand((size_t)out * in, 6), *b = g_rand(out, 7);
    float *dy = g_rand((size_t)n * out, 8);
    float *y = malloc((size_t)n * out * 4), *dx = malloc((size_t)n * in * 4), *dw = malloc((size_t)out * in * 4),
          *db = malloc(out * 4);
    k_linear_fwd(n, in, out, x, w, bias ? b : NULL, y);
    k_linear_bwd(n, in, out, x, w, dy, dx, dw, bias ? db : NULL);
    float *gx = g_up(x, (size_t)n * in * 4), *gw = g_up(w, (size_t)out * in * 4), *gb = bias ? g_up(b, out * 4) : NULL;
    float *gdy = g_up(dy, (size_t)n * out * 4), *gy = g_dev((size_t)n * out * 4), *gdx = g_dev((size_t)n * in * 4);
    float *gdw = g_dev((size_t)out * in * 4), *gdb = bias ? g_dev(out * 4) : NULL;
    void *ws = g_dev(k_cuda_linear_workspace(n, in, out) + 64);
    g_need(k_cuda_linear_fwd(n, in, out, gx, gw, gb, gy, ws, NULL) == 0, "linear fwd");
    g_need(k_cuda_linear_bwd(n, in, out, gx, gw, gdy, gdx, gdw, gdb, ws, NULL) == 0, "linear bwd");
    double ey = g_relerr(g_result(gy, (size_t)n * out), y, (size_t)n * out);
    double ex = g_relerr(g_result(gdx, (size_t)n * in), dx, (size_t)n * in);
    double ew = g_relerr(g_result(gdw, (size_t)out * in), dw, (size_t)out * in);
    double eb = bias ? g_relerr(g_result(gdb, out), db, out) : 0;
    CHECKF(ey < CONV_TOL && ex < CONV_TOL && ew < CONV_TOL && eb < 1e-5, "linear n=%d in=%d out=%d: y %.2g dx %.2g dw %.2g db %.2g",
           n, in, out, ey, ex, ew, eb);
}

static void linear_case(int n, int in, int out) { linear_case_b(n, in, out, 1); }

TEST(gpu_linear_shapes)
{
    linear_case(64, 320, 50);
    linear_case(64, 50, 10);
    linear_case(1, 320, 50);
    linear_case(1000, 320, 50); /* dw: 7 split-K slices, the last one shorter */
    linear_case(G_BIG(256, 32), 2048, 1000);
    linear_case(7, 33, 65);
    linear_case_b(7, 33, 65, 0);
    linear_case(129, 1, 3);
}

/* What the tiled GEMM's guards, split-K slices and tails see: M and N not multiples of
 * the 64x64 tile, K not of the 16-deep slice, split-K with a last, shorter slice
 * (LeNet's conv2 at batch 7: K = 448 in slices of 160, 160, 128), 1x1 and non-square
 * kernels, strides and padding over odd planes, and random shapes. */
TEST(gpu_conv_guards_split_k_tails)
{
    static const int convs[][9] = {
        {64, 1, 28, 28, 10, 5, 5, 1, 0}, {7, 10, 12, 12, 20, 5, 5, 1, 0}, {1, 1, 28, 28, 10, 5, 5, 1, 0},
        {2, 16, 14, 14, 32, 3, 3, 1, 1}, {2, 16, 15, 15, 24, 3, 3, 2, 1}, {3, 5, 9, 11, 7, 3, 2, 3, 2},
        {2, 8, 7, 7, 8, 1, 1, 1, 0},     {1, 3, 5, 5, 4, 5, 5, 1, 2},     {4, 6, 10, 8, 5, 4, 3, 2, 0},
        {1, 3, 64, 64, 16, 7, 7, 2, 3},  {2, 4, 20, 21, 8, 7, 7, 2, 3},   {2, 16, 14, 14, 32, 1, 1, 2, 0},
        {2, 8, 15, 15, 16, 1, 1, 2, 0},  {2, 32, 8, 8, 64, 3, 3, 2, 1},
        /* the 128x128 tile with tails: forward and dW (130 rows), dx (130 channels) */
        {2, 16, 9, 9, 130, 3, 3, 1, 1},  {1, 130, 12, 12, 16, 3, 3, 1, 1},
    };
    k_conv_shape sh = {.n = 7, .c = 10, .h = 12, .w = 12, .k = 20, .r = 5, .s = 5, .stride = 1, .pad = 0};
    k_conv_shape_init(&sh);
    CHECK(k_cuda_conv2d_workspace(&sh) > 0); /* split-K is engaged */
    for (size_t i = 0; i < sizeof convs / sizeof convs[0]; i++) {
        const int *v = convs[i];
        conv_case_rs(v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], 1);
        if (i >= 9) conv_case_rs(v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], 0);
    }
    for (int i = 0; i < 20; i++) {
        uint64_t s = 900 + i;
        int r = RN(1, 5, 0), q = RN(1, 5, 1), st = RN(1, 3, 2), pad = RN(0, 2, 3);
        conv_case_rs(RN(1, 4, 4), RN(1, 9, 5), RN(r, 16, 6), RN(q, 16, 7), RN(1, 17, 8), r, q, st, pad, i % 2);
    }
}

TEST(gpu_rng_init_dropout_bit_exact)
{
    g_init();
    size_t n = 1000003;
    float *cpu = malloc(n * 4);
    float *d = g_dev(n * 4);
    for (size_t i = 0; i < n; i++) cpu[i] = k_rand_uniform(12345, 999 + i);
    g_need(k_cuda_rand_uniform(n, 12345, 999, d, NULL) == 0, "rng");
    CHECK(g_ndiff(g_result(d, n), cpu, n, 4) == 0);
    k_init_uniform(n, 0.137f, 7, 5, cpu);
    g_need(k_cuda_init_uniform(n, 0.137f, 7, 5, d, NULL) == 0, "init");
    CHECK(g_ndiff(g_result(d, n), cpu, n, 4) == 0);

    float *x = g_rand(n, 9), *y = malloc(n * 4), *dx = malloc(n * 4);
    uint8_t *m = malloc(n), *gm_h = malloc(n);
    float *gx = g_up(x, n * 4), *gy = g_dev(n * 4);
    uint8_t *gm = g_dev(n);
    k_dropout_fwd(n, 0.3f, 42, 1000, x, y, m);
    g_need(k_cuda_dropout_fwd(n, 0.3f, 42, 1000, gx, gy, gm, NULL) == 0, "dropout");
    g_down(gm_h, gm, n);
    CHECK(g_ndiff(g_result(gy, n), y, n, 4) == 0 && g_ndiff(gm_h, m, n, 1) == 0);
    k_dropout_bwd(n, 0.3f, m, x, dx);
    g_need(k_cuda_dropout_bwd(n, 0.3f, gm, gx, gy, NULL) == 0, "dropout bwd");
    CHECK(g_ndiff(g_result(gy, n), dx, n, 4) == 0);
    /* dropout2d: 64 x 20 planes of 64 */
    int N = 64, C = 20, HW = 64;
    k_dropout2d_fwd(N, C, HW, 0.5f, 3, 77, x, y, m);
    g_need(k_cuda_dropout2d_fwd(N, C, HW, 0.5f, 3, 77, gx, gy, gm, NULL) == 0, "dropout2d");
    g_down(gm_h, gm, (size_t)N * C);
    CHECK(g_ndiff(g_result(gy, (size_t)N * C * HW), y, (size_t)N * C * HW, 4) == 0);
    CHECK(g_ndiff(gm_h, m, (size_t)N * C, 1) == 0);
    k_dropout2d_bwd(N, C, HW, 0.5f, m, x, dx);
    g_need(k_cuda_dropout2d_bwd(N, C, HW, 0.5f, gm, gx, gy, NULL) == 0, "dropout2d bwd");
    CHECK(g_ndiff(g_result(gy, (size_t)N * C * HW), dx, (size_t)N * C * HW, 4) == 0);
}

TEST(gpu_relu_pool_bit_exact)
{
    g_init();
    static const int shapes[][6] = {{64, 10, 24, 24, 2, 2}, {64, 20, 8, 8, 2, 2}, {3, 5, 13, 11, 3, 2},
                                    {2, 4, 9, 9, 3, 1}, {G_BIG(32, 2), 64, 56, 56, 3, 2}};
    for (size_t t = 0; t < sizeof shapes / sizeof shapes[0]; t++) {
        int n = shapes[t][0], c = shapes[t][1], h = shapes[t][2], w = shapes[t][3], ks = shapes[t][4], st = shapes[t][5];
        int p = (h - ks) / st + 1, q = (w - ks) / st + 1;
        size_t nx = (size_t)n * c * h * w, ny = (size_t)n * c * p * q;
        float *x = g_rand(nx, 11 + t), *dy = g_rand(ny, 12), *y = malloc(ny * 4), *dx = malloc(nx * 4);
        x[3] = x[4]; /* a tie */
        int32_t *idx = malloc(ny * 4), *gidx_h = malloc(ny * 4);
        k_maxpool2d_fwd(n, c, h, w, ks, st, x, y, idx);
        k_maxpool2d_bwd(n, c, h, w, ks, st, dy, idx, dx);
        float *gx = g_up(x, nx * 4), *gy = g_dev(ny * 4), *gdy = g_up(dy, ny * 4), *gdx = g_dev(nx * 4);
        int32_t *gidx = g_dev(ny * 4);
        g_need(k_cuda_maxpool2d_fwd(n, c, h, w, ks, st, gx, gy, gidx, NULL) == 0, "pool");
        g_need(k_cuda_maxpool2d_bwd(n, c, h, w, ks, st, gdy, gidx, gdx, NULL) == 0, "pool bwd");
        g_down(gidx_h, gidx, ny * 4);
        CHECKF(g_ndiff(g_result(gy, ny), y, ny, 4) == 0 && g_ndiff(gidx_h, idx, ny, 4) == 0, "pool fwd shape %zu", t);
        /* Overlapping windows add in a different order than the CPU's scatter. */
        double e = g_relerr(g_result(gdx, nx), dx, nx);
        CHECKF(st >= ks ? e == 0 : e < 1e-6, "pool bwd shape %zu: %.2g", t, e);

        k_relu_fwd(nx, x, dx);
        g_need(k_cuda_relu_fwd(nx, gx, gdx, NULL) == 0, "relu");
        CHECK(g_ndiff(g_result(gdx, nx), dx, nx, 4) == 0);
        float *rb = malloc(nx * 4);
        k_relu_bwd(nx, dx, x, rb);
        g_need(k_cuda_relu_bwd(nx, gdx, gx, gdx, NULL) == 0, "relu bwd");
        CHECK(g_ndiff(g_result(gdx, nx), rb, nx, 4) == 0);
    }
}

TEST(gpu_log_softmax_nll)
{
    g_init();
    for (int classes = 10; classes <= 1000; classes *= 10) {
        int n = 257;
        float *x = g_rand((size_t)n * classes, 21), *y = malloc((size_t)n * classes * 4), *dx = malloc((size_t)n * classes * 4);
        for (int i = 0; i < n * classes; i += 7) x[i] *= 80.0f; /* large logits: the max shift matters */
        int32_t *lab = malloc(n * 4);
        for (int i = 0; i < n; i++) lab[i] = i == 5 ? -100 : (i * 7) % classes;
        k_log_softmax_fwd(n, classes, x, y);
        long correct;
        double loss = k_nll_loss_sum(n, classes, y, lab, &correct);
        k_log_softmax_nll_bwd(n, classes, y, lab, 1.0f / n, dx);
        float *gx = g_up(x, (size_t)n * classes * 4), *gy = g_dev((size_t)n * classes * 4);
        int32_t *glab = g_up(lab, n * 4);
        double *gs = g_dev(16), hs[2];
        g_need(k_cuda_log_softmax_fwd(n, classes, gx, gy, NULL) == 0, "log_softmax");
        g_need(k_cuda_nll_loss_sum(n, classes, gy, glab, gs, NULL) == 0, "nll");
        g_down(hs, gs, 16);
        CHECKF(g_relerr(g_result(gy, (size_t)n * classes), y, (size_t)n * classes) < 1e-6, "log_softmax %d", classes);
        CHECK_NEAR(hs[0], loss, 1e-6);
        CHECK_EQ((long)hs[1], correct);
        g_need(k_cuda_log_softmax_nll_bwd(n, classes, gy, glab, 1.0f / n, gx, NULL) == 0, "nll bwd");
        CHECKF(g_relerr(g_result(gx, (size_t)n * classes), dx, (size_t)n * classes) < 1e-5, "nll bwd %d", classes);
    }
}

TEST(gpu_sgd_bit_exact)
{
    g_init();
    size_t n = 100001;
    k_sgd_cfg cfgs[] = {{0.01f, 0.5f, 0, 0, 0}, {0.1f, 0.9f, 0.1f, 1e-4f, 1}, {0.05f, 0, 0, 0.01f, 0}};
    for (size_t c = 0; c < 3; c++)
        for (int first = 0; first <= 1; first++) {
            float *p = g_rand(n, 31), *g = g_rand(n, 32), *v = g_rand(n, 33);
            float *gp = g_up(p, n * 4), *gg = g_up(g, n * 4), *gv = g_up(v, n * 4);
            k_sgd_step(n, &cfgs[c], first, p, g, v);
            g_need(k_cuda_sgd_step(n, &cfgs[c], first, gp, gg, gv, NULL) == 0, "sgd");
            CHECKF(g_ndiff(g_result(gp, n), p, n, 4) == 0 && g_ndiff(g_result(gv, n), v, n, 4) == 0,
                   "sgd cfg %zu first %d", c, first);
        }
}

/* Adam and AdamW (with and without weight decay), three steps on the same state: the
 * CPU's bits (k_adam_step: every ISA path gives the reference's). v starts >= 0. */
TEST(gpu_adam_bit_exact)
{
    g_init();
    size_t n = 100001;
    for (int c = 0; c < 3; c++) {
        float *p = g_rand(n, 41), *g = g_rand(n, 42), *m = g_rand(n, 43), *v = g_rand(n, 44);
        for (size_t i = 0; i < n; i++) v[i] = v[i] * v[i];
        float *gp = g_up(p, n * 4), *gg = g_up(g, n * 4), *gm = g_up(m, n * 4), *gv = g_up(v, n * 4);
        for (int t = 1; t <= 3; t++) {
            double lr = 1e-3 * t, wd = c == 0 ? 0.0 : 0.1;
            k_adam_cfg a = {.beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = (float)wd,
                            .decoupled = c == 2, .step_size = (float)(lr / (1 - pow(0.9, t))),
                            .bc2_sqrt = (float)sqrt(1 - pow(0.999, t)), .decay_mul = c == 2 ? (float)(1 - lr * wd) : 1};
            k_adam_step(n, &a, p, g, m, v);
            g_need(k_cuda_adam_step(n, &a, gp, gg, gm, gv, NULL) == 0, "adam");
        }
        CHECKF(g_ndiff(g_result(gp, n), p, n, 4) == 0 && g_ndiff(g_result(gm, n), m, n, 4) == 0 &&
                   g_ndiff(g_result(gv, n), v, n, 4) == 0,
               "%s: %zu parameters differ", c == 0 ? "adam" : c == 1 ? "adam wd" : "adamw",
               g_ndiff(g_result(gp, n), p, n, 4));
    }
}

/* The clipping norm's sum of squares against the CPU's (another order: to 1e-12), and
 * the same bits on a second run; sizes below, at and across the 65536-float chunks. */
TEST(gpu_sumsq_matches_cpu)
{
    g_init();
    static const size_t sizes[] = {1, 1000, 65536, 3 * 65536 + 5};
    for (int k = 0; k < 4; k++) {
        size_t n = sizes[k];
        float *x = g_rand(n, 51 + k);
        double want = k_sumsq(n, x), got[2];
        float *gx = g_up(x, n * 4);
        double *gout = (double *)g_dev(16);
        void *ws = g_dev(k_cuda_sumsq_workspace(n));
        for (int r = 0; r < 2; r++) {
            g_need(k_cuda_sumsq(n, gx, gout, ws, NULL) == 0, "sumsq");
            g_down(&got[r], gout, 8);
        }
        CHECKF(fabs(got[0] - want) <= 1e-12 * want && !memcmp(&got[0], &got[1], 8), "n %zu: %.17g vs %.17g (%.17g)", n,
               got[0], want, got[1]);
    }
}

TEST(gpu_f16_bf16_conversions_and_reduce_bit_exact)
{
    g_init();
    size_t n = 1 << 20;
    float *x = malloc(n * 4);
    for (size_t i = 0; i < n; i++) {
        uint32_t u = (uint32_t)(i * 2654435761u) ^ (uint32_t)(i << 7);
        memcpy(&x[i], &u, 4); /* every class of float: NaN, inf, subnormal, ties */
    }
    uint16_t *h = malloc(n * 2), *b = malloc(n * 2), *gh_h = malloc(n * 2);
    for (size_t i = 0; i < n; i++) { h[i] = rt_f32_to_f16(x[i]); b[i] = rt_f32_to_bf16(x[i]); }
    float *gx = g_up(x, n * 4);
    uint16_t *g16 = g_dev(n * 2);
    g_need(k_cuda_f32_to_f16(n, gx, g16, NULL) == 0, "to f16");
    g_down(gh_h, g16, n * 2);
    CHECK(g_ndiff(gh_h, h, n, 2) == 0);
    g_need(k_cuda_f32_to_bf16(n, gx, g16, NULL) == 0, "to bf16");
    g_down(gh_h, g16, n * 2);
    CHECK(g_ndiff(gh_h, b, n, 2) == 0);
    float *back = malloc(n * 4);
    for (size_t i = 0; i < n; i++) back[i] = rt_f16_to_f32(h[i]);
    uint16_t *gh = g_up(h, n * 2);
    g_need(k_cuda_f16_to_f32(n, gh, gx, NULL) == 0, "from f16");
    CHECK(g_ndiff(g_result(gx, n), back, n, 4) == 0);
    /* Every 16-bit value widened on the device as rt/half.h does on the host (NaNs too). */
    for (size_t i = 0; i < 65536; i++) gh_h[i] = (uint16_t)i;
    uint16_t *gall = g_up(gh_h, 65536 * 2);
    for (int k = 0; k < 2; k++) {
        for (size_t i = 0; i < 65536; i++) back[i] = k ? rt_bf16_to_f32(gh_h[i]) : rt_f16_to_f32(gh_h[i]);
        g_need((k ? k_cuda_bf16_to_f32 : k_cuda_f16_to_f32)(65536, gall, gx, NULL) == 0, "widen every value");
        CHECKF(g_ndiff(g_result(gx, 65536), back, 65536, 4) == 0, "%s", k ? "bf16" : "f16");
    }
    /* reduce_sum in each dtype vs the host reduction */
    uint16_t *gb = g_up(b, n * 2), *out = malloc(n * 2);
    for (size_t i = 0; i < n; i++) out[i] = rt_f32_to_bf16(rt_bf16_to_f32(b[i]) + rt_bf16_to_f32(b[n - 1 - i]));
    uint16_t *rev = malloc(n * 2);
    for (size_t i = 0; i < n; i++) rev[i] = b[n - 1 - i];
    uint16_t *grev = g_up(rev, n * 2);
    g_need(k_cuda_reduce_sum(g16, gb, grev, n, RT_BF16, NULL) == 0, "reduce bf16");
    g_down(gh_h, g16, n * 2);
    /* the sums are made in f32: a NaN operand's payload is the float unit's (g_ndiff_nan) */
    CHECK(g_ndiff_nan(gh_h, out, n, 'b') == 0);
    for (size_t i = 0; i < n; i++) out[i] = rt_f32_to_f16(rt_f16_to_f32(h[i]) + rt_f16_to_f32(h[i]));
    g_need(k_cuda_reduce_sum(g16, gh, gh, n, RT_F16, NULL) == 0, "reduce f16");
    g_down(gh_h, g16, n * 2);
    CHECK(g_ndiff_nan(gh_h, out, n, 'h') == 0);
    /* f32 reduce and scale (the staged allreduce's device half), with infinities, signed
     * zeros and subnormals among the values (no NaN: a GPU's NaN payload is its own). */
    float *fa = g_rand(n, 41), *fb = g_rand(n, 42), *fo = malloc(n * 4);
    fa[0] = INFINITY, fb[1] = -INFINITY, fa[2] = -0.0f, fb[2] = -0.0f, fa[3] = 1e-40f, fb[3] = 3e-41f;
    for (size_t i = 0; i < n; i++) fo[i] = fa[i] + fb[i];
    float *gfa = g_up(fa, n * 4), *gfb = g_up(fb, n * 4), *gfo = g_dev(n * 4);
    g_need(k_cuda_reduce_sum(gfo, gfa, gfb, n, RT_F32, NULL) == 0, "reduce f32");
    CHECK(g_ndiff(g_result(gfo, n), fo, n, 4) == 0);
    for (size_t i = 0; i < n; i++) fo[i] = fa[i] * (1.0f / 3.0f);
    g_need(k_cuda_scale(n, 1.0f / 3.0f, gfa, NULL) == 0, "scale f32");
    CHECK(g_ndiff(g_result(gfa, n), fo, n, 4) == 0);
}

/* Sets the spinning kernel's flag from the host: a memset (0x01010101) on another stream on
 * a GPU (no pageable copy to order); on the executor, whose device memory is the host's and
 * which runs one kernel at a time, a store (atomic, as the kernel's read is: make tsan). */
static void release(int *flag, port_stream s)
{
#if DDPRT_SIMT
    (void)s;
    __atomic_store_n(flag, 1, __ATOMIC_RELAXED);
#else
    g_need(port_memset_dev(flag, 1, sizeof(int), s, "release") == 0, "release");
#endif
}

/* Every host wait on the device has a deadline: a kernel that never ends (here one that
 * spins until released) gives one line naming the wait and the limit, leaves the work
 * pending, and the device goes on once the kernel is released. */
TEST(gpu_sync_deadline_names_the_hang)
{
    g_init();
    int *flag = g_dev(sizeof(int));
    port_stream a, b;
    port_event e;
    g_need(!port_stream_create(&a, "a") && !port_stream_create(&b, "b") && !port_event_create(&e, 0, "e"), "streams");
    g_need(port_memset_dev(flag, 0, sizeof(int), b, "flag") == 0 && port_stream_sync(b, "flag") == 0, "flag");
    double keep = port_cuda_set_wait_s(0.5);
    CHECK(keep > 0);
    port_cuda_clear_error();
    CHECK(k_cuda_test_spin(flag, a) == 0 && port_event_record(e, a) == 0);
    CHECK(port_stream_sync(a, "step") == -1 && port_cuda_timed_out());
    const char *m = port_cuda_errmsg();
    CHECKF(strstr(m, "cudaStreamSynchronize(step): the device did not finish within 0.5 s") && !strchr(m, '\n'), "%s",
           m);
    port_cuda_clear_error();
    CHECK(!port_cuda_timed_out());
    CHECK(port_event_sync(e, "batch copy") == -1 && port_cuda_timed_out());
    CHECKF(strstr(port_cuda_errmsg(), "cudaEventSynchronize(batch copy): the device did not finish within 0.5 s"), "%s",
           port_cuda_errmsg());
    CHECK(port_event_query(e) == 0); /* still pending, not failed */
    port_cuda_clear_error();
    release(flag, b);
    port_cuda_set_wait_s(keep);
    CHECK(port_stream_sync(b, "release") == 0 && port_stream_sync(a, "step") == 0 && port_event_sync(e, "e") == 0);
    CHECK(port_event_query(e) == 1 && !port_cuda_timed_out() && !*port_cuda_errmsg());

    /* The legacy stream under port_dev_sync_within's own limit (the start-up probes'). */
    g_need(port_memset_dev(flag, 0, sizeof(int), b, "flag") == 0 && port_stream_sync(b, "flag") == 0, "flag");
    CHECK(k_cuda_test_spin(flag, NULL) == 0);
    CHECK(port_dev_sync_within(0.25, "wgmma probe") == -1 && port_cuda_timed_out());
    CHECKF(strstr(port_cuda_errmsg(), "cudaDeviceSynchronize(wgmma probe): the device did not finish within 0.25 s"),
           "%s", port_cuda_errmsg());
    port_cuda_clear_error();
    release(flag, b);
    CHECK(port_dev_sync("after") == 0 && !*port_cuda_errmsg());
    port_event_destroy(e);
    port_stream_destroy(a);
    port_stream_destroy(b);
}
