/* 16-bit activations on the device (--amp-activations 16, nn/plan.c's pass_half): every
 * kernel that reads or writes one (conv, linear and GPT's Conv1D through K_CUDA_MM_X16 /
 * _Y16, BN, ReLU, add, max pool, average pool, GELU, LayerNorm's output) against the same kernel on fp32 arrays holding the
 * same values. A 16-bit input widens exactly, so an fp32 result must be the fp32
 * kernel's on the rounded input bit for bit, and a 16-bit output that result rounded to
 * nearest even (rt/half.h) bit for bit: any wrong index, type or element size fails. */
#include "test/gpu/g.h"
#include "rt/half.h"

static uint16_t to16(int t, float f) { return t == K_CUDA_MM_BF16 ? rt_f32_to_bf16(f) : rt_f32_to_f16(f); }
static float from16(int t, uint16_t h) { return t == K_CUDA_MM_BF16 ? rt_bf16_to_f32(h) : rt_f16_to_f32(h); }
static const char *tname(int t) { return t == K_CUDA_MM_BF16 ? "bf16" : "f16"; }

/* n random values (scaled), their 16-bit copy on the device and the widened fp32 copy. */
typedef struct { float *f; uint16_t *h; void *g16; float *g32; } act;
static act act_make(int t, size_t n, unsigned seed, float scale)
{
    act a = {g_rand(n, seed), malloc(n * 2), NULL, NULL};
    for (size_t i = 0; i < n; i++) {
        a.h[i] = to16(t, a.f[i] * scale);
        a.f[i] = from16(t, a.h[i]);
    }
    a.g16 = g_up(a.h, n * 2), a.g32 = g_up(a.f, n * 4);
    return a;
}

/* The device's 16-bit result g16 is the fp32 result g32 rounded: 0 mismatches. */
static size_t rounded_diff(int t, const void *g16, const float *g32, size_t n)
{
    uint16_t *h = malloc(n * 2);
    float *f = g_result(g32, n);
    g_down(h, g16, n * 2);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += h[i] != to16(t, f[i]);
    return bad;
}

static void elementwise_case(int t, int n, int c, int hw)
{
    g_init();
    size_t nx = (size_t)n * c * hw;
    act x = act_make(t, nx, 31, 3.0f), b = act_make(t, nx, 32, 1.0f);
    float *dy = g_up(g_rand(nx, 33), nx * 4), *y32 = g_dev(nx * 4), *dx32 = g_dev(nx * 4), *dx16 = g_dev(nx * 4);
    void *y16 = g_dev(nx * 2);
    /* ReLU: 16 -> 16 and its backward from the 16-bit output */
    g_need(k_cuda_relu_fwd(nx, x.g32, y32, NULL) == 0 && k_cuda_relu_fwd_t(nx, x.g16, t, y16, t, NULL) == 0, "relu fwd");
    CHECKF(rounded_diff(t, y16, y32, nx) == 0, "%s relu fwd n=%zu", tname(t), nx);
    g_need(k_cuda_relu_bwd(nx, y32, dy, dx32, NULL) == 0 && k_cuda_relu_bwd_t(nx, y16, t, dy, dx16, NULL) == 0,
           "relu bwd");
    CHECKF(g_ndiff(g_result(dx16, nx), g_result(dx32, nx), nx, 4) == 0, "%s relu bwd n=%zu", tname(t), nx);
    /* add: 16 + fp32 -> 16, 16 + 16 -> fp32 */
    g_need(k_cuda_add(nx, x.g32, b.g32, y32, NULL) == 0 && k_cuda_add_t(nx, x.g16, t, b.g32, 0, y16, t, NULL) == 0,
           "add");
    CHECKF(rounded_diff(t, y16, y32, nx) == 0, "%s add 16 + 32 -> 16", tname(t));
    g_need(k_cuda_add_t(nx, x.g16, t, b.g16, t, dx16, 0, NULL) == 0, "add");
    CHECKF(g_ndiff(g_result(dx16, nx), g_result(y32, nx), nx, 4) == 0, "%s add 16 + 16 -> 32", tname(t));
    /* BatchNorm: statistics, forward (16 -> 16), backward sums and dx from the 16-bit x */
    float *m32 = g_dev(c * 4), *v32 = g_dev(c * 4), *m16 = g_dev(c * 4), *v16 = g_dev(c * 4), *is = g_dev(c * 4);
    float *gam = g_up(g_rand(c, 34), c * 4), *bet = g_up(g_rand(c, 35), c * 4);
    g_need(k_cuda_bn_stats(n, c, hw, x.g32, m32, v32, NULL) == 0 && k_cuda_bn_stats_t(n, c, hw, x.g16, t, m16, v16, NULL) == 0,
           "bn stats");
    CHECKF(g_ndiff(g_result(m16, c), g_result(m32, c), c, 4) == 0 &&
           g_ndiff(g_result(v16, c), g_result(v32, c), c, 4) == 0, "%s bn stats", tname(t));
    g_need(k_cuda_bn_finish(c, m32, v32, 1e-5f, 0.1f, (double)n * hw, is, NULL, NULL, NULL) == 0, "bn finish");
    g_need(k_cuda_bn_fwd(n, c, hw, x.g32, m32, is, gam, bet, y32, NULL) == 0 &&
           k_cuda_bn_fwd_t(n, c, hw, x.g16, t, m32, is, gam, bet, y16, t, NULL) == 0, "bn fwd");
    CHECKF(rounded_diff(t, y16, y32, nx) == 0, "%s bn fwd", tname(t));
    float *dg32 = g_dev(c * 4), *db32 = g_dev(c * 4);
    g_need(k_cuda_bn_bwd_sums(n, c, hw, x.g32, m32, is, dy, dg32, db32, NULL) == 0 &&
           k_cuda_bn_bwd_sums_t(n, c, hw, x.g16, t, m32, is, dy, m16, v16, NULL) == 0, "bn bwd sums");
    CHECKF(g_ndiff(g_result(m16, c), g_result(dg32, c), c, 4) == 0 &&
           g_ndiff(g_result(v16, c), g_result(db32, c), c, 4) == 0, "%s bn bwd sums", tname(t));
    g_need(k_cuda_bn_bwd_dx(n, c, hw, x.g32, m32, is, gam, dg32, db32, (double)n * hw, dy, dx32, NULL) == 0 &&
           k_cuda_bn_bwd_dx_t(n, c, hw, x.g16, t, m32, is, gam, dg32, db32, (double)n * hw, dy, dx16, NULL) == 0,
           "bn bwd dx");
    CHECKF(g_ndiff(g_result(dx16, nx), g_result(dx32, nx), nx, 4) == 0, "%s bn bwd dx", tname(t));
}

static void pool_case(int t, int n, int c, int h, int w)
{
    g_init();
    size_t nx = (size_t)n * c * h * w;
    int p = (h + 2 - 3) / 2 + 1, q = (w + 2 - 3) / 2 + 1;
    size_t ny = (size_t)n * c * p * q;
    act x = act_make(t, nx, 41, 2.0f);
    float *y32 = g_dev(ny * 4), *a32 = g_dev((size_t)n * c * 4), *a16 = g_dev((size_t)n * c * 4);
    void *y16 = g_dev(ny * 2);
    int32_t *i32 = g_dev(ny * 4), *i16 = g_dev(ny * 4), *hi32 = malloc(ny * 4), *hi16 = malloc(ny * 4);
    g_need(k_cuda_maxpool2d_pad_fwd(n, c, h, w, 3, 2, 1, x.g32, y32, i32, NULL) == 0 &&
           k_cuda_maxpool2d_pad_fwd_t(n, c, h, w, 3, 2, 1, x.g16, t, y16, t, i16, NULL) == 0, "maxpool");
    g_down(hi32, i32, ny * 4), g_down(hi16, i16, ny * 4);
    CHECKF(rounded_diff(t, y16, y32, ny) == 0 && g_ndiff(hi16, hi32, ny, 4) == 0, "%s maxpool %dx%d", tname(t), h, w);
    g_need(k_cuda_global_avgpool_fwd(n, c, h * w, x.g32, a32, NULL) == 0 &&
           k_cuda_global_avgpool_fwd_t(n, c, h * w, x.g16, t, a16, NULL) == 0, "avgpool");
    CHECKF(g_ndiff(g_result(a16, (size_t)n * c), g_result(a32, (size_t)n * c), (size_t)n * c, 4) == 0,
           "%s avgpool", tname(t));
}

/* conv and linear: X16 / Y16 against the same precision on the widened input. */
static void conv_case(int t, int n, int c, int h, int k, int r, int st, int pad)
{
    g_init();
    k_conv_shape sh = {.n = n, .c = c, .h = h, .w = h, .k = k, .r = r, .s = r, .stride = st, .pad = pad};
    k_conv_shape_init(&sh);
    size_t nx = (size_t)n * c * h * h, ny = (size_t)n * k * sh.p * sh.q, nw = (size_t)k * c * r * r;
    act x = act_make(t, nx, 51, 1.0f);
    float *w = g_up(g_rand(nw, 52), nw * 4), *b = g_up(g_rand(k, 53), k * 4), *dy = g_up(g_rand(ny, 54), ny * 4);
    float *y32 = g_dev(ny * 4), *dw32 = g_dev(nw * 4), *dw16 = g_dev(nw * 4), *dx32 = g_dev(nx * 4), *dx16 = g_dev(nx * 4);
    void *y16 = g_dev(ny * 2), *ws = g_dev(k_cuda_conv2d_workspace(&sh) + 16);
    g_need(k_cuda_conv2d_fwd_mm(t, &sh, x.g32, w, NULL, b, y32, ws, NULL) == 0 &&
           k_cuda_conv2d_fwd_mm(t | K_CUDA_MM_X16 | K_CUDA_MM_Y16, &sh, x.g16, w, NULL, b, y16, ws, NULL) == 0, "conv fwd");
    CHECKF(rounded_diff(t, y16, y32, ny) == 0, "%s conv fwd n=%d c=%d h=%d k=%d r=%d", tname(t), n, c, h, k, r);
    g_need(k_cuda_conv2d_bwd_mm(t, &sh, x.g32, w, NULL, dy, dx32, dw32, NULL, ws, NULL) == 0 &&
           k_cuda_conv2d_bwd_mm(t | K_CUDA_MM_X16, &sh, x.g16, w, NULL, dy, dx16, dw16, NULL, ws, NULL) == 0, "conv bwd");
    CHECKF(g_ndiff(g_result(dw16, nw), g_result(dw32, nw), nw, 4) == 0 &&
           g_ndiff(g_result(dx16, nx), g_result(dx32, nx), nx, 4) == 0, "%s conv bwd", tname(t));

    int in = c * h, out = k; /* linear: x [n, in] */
    size_t nl = (size_t)n * in, nwl = (size_t)out * in, no = (size_t)n * out;
    act xl = act_make(t, nl, 55, 1.0f);
    float *wl = g_up(g_rand(nwl, 56), nwl * 4), *dyl = g_up(g_rand(no, 57), no * 4);
    float *yl = g_dev(no * 4), *dwl32 = g_dev(nwl * 4), *dwl16 = g_dev(nwl * 4);
    void *yl16 = g_dev(no * 2), *wsl = g_dev(k_cuda_linear_workspace(n, in, out) + 16);
    g_need(k_cuda_linear_fwd_mm(t, n, in, out, xl.g32, wl, NULL, b, yl, wsl, NULL) == 0 &&
           k_cuda_linear_fwd_mm(t | K_CUDA_MM_X16 | K_CUDA_MM_Y16, n, in, out, xl.g16, wl, NULL, b, yl16, wsl, NULL) == 0,
           "linear fwd");
    CHECKF(rounded_diff(t, yl16, yl, no) == 0, "%s linear fwd n=%d in=%d out=%d", tname(t), n, in, out);
    g_need(k_cuda_linear_bwd_mm(t, n, in, out, xl.g32, wl, NULL, dyl, NULL, dwl32, NULL, wsl, NULL) == 0 &&
           k_cuda_linear_bwd_mm(t | K_CUDA_MM_X16, n, in, out, xl.g16, wl, NULL, dyl, NULL, dwl16, NULL, wsl, NULL) == 0,
           "linear bwd");
    CHECKF(g_ndiff(g_result(dwl16, nwl), g_result(dwl32, nwl), nwl, 4) == 0, "%s linear bwd", tname(t));
}

/* GPT's: GELU (16 -> 16, backward from the 16-bit x), LayerNorm's 16-bit output and
 * the Conv1D (X16 / Y16). */
static void gpt_case(int t, int rows, int c, int out)
{
    g_init();
    size_t nx = (size_t)rows * c, ny = (size_t)rows * out, nw = (size_t)c * out;
    act x = act_make(t, nx, 61, 2.0f);
    float *dy = g_up(g_rand(nx, 62), nx * 4), *y32 = g_dev(nx * 4), *dx32 = g_dev(nx * 4), *dx16 = g_dev(nx * 4);
    void *y16 = g_dev(nx * 2);
    g_need(k_cuda_gelu_fwd(nx, x.g32, y32, NULL) == 0 && k_cuda_gelu_fwd_t(nx, x.g16, t, y16, t, NULL) == 0, "gelu fwd");
    CHECKF(rounded_diff(t, y16, y32, nx) == 0, "%s gelu fwd", tname(t));
    g_need(k_cuda_gelu_bwd(nx, x.g32, dy, dx32, NULL) == 0 && k_cuda_gelu_bwd_t(nx, x.g16, t, dy, dx16, NULL) == 0,
           "gelu bwd");
    CHECKF(g_ndiff(g_result(dx16, nx), g_result(dx32, nx), nx, 4) == 0, "%s gelu bwd", tname(t));
    float *w = g_up(g_rand(c, 63), c * 4), *b = g_up(g_rand(c, 64), c * 4), *st = g_dev(2 * rows * 4);
    g_need(k_cuda_layernorm_fwd(rows, c, x.g32, w, b, 1e-5f, y32, st, st + rows, NULL) == 0 &&
           k_cuda_layernorm_fwd_t(rows, c, x.g32, w, b, 1e-5f, y16, t, st, st + rows, NULL) == 0, "layernorm fwd");
    CHECKF(rounded_diff(t, y16, y32, nx) == 0, "%s layernorm fwd", tname(t));
    float *cw = g_up(g_rand(nw, 65), nw * 4), *cb = g_up(g_rand(out, 66), out * 4), *cdy = g_up(g_rand(ny, 67), ny * 4);
    float *cy = g_dev(ny * 4), *dw32 = g_dev(nw * 4), *dw16 = g_dev(nw * 4);
    void *cy16 = g_dev(ny * 2), *ws = g_dev(k_cuda_conv1d_hf_workspace(rows, c, out) + 16);
    g_need(k_cuda_conv1d_hf_fwd_mm(t, rows, c, out, x.g32, cw, NULL, cb, cy, ws, NULL) == 0 &&
           k_cuda_conv1d_hf_fwd_mm(t | K_CUDA_MM_X16 | K_CUDA_MM_Y16, rows, c, out, x.g16, cw, NULL, cb, cy16, ws, NULL) == 0,
           "conv1d_hf fwd");
    CHECKF(rounded_diff(t, cy16, cy, ny) == 0, "%s conv1d_hf fwd", tname(t));
    g_need(k_cuda_conv1d_hf_bwd_mm(t, rows, c, out, x.g32, cw, NULL, cdy, NULL, dw32, NULL, ws, NULL) == 0 &&
           k_cuda_conv1d_hf_bwd_mm(t | K_CUDA_MM_X16, rows, c, out, x.g16, cw, NULL, cdy, NULL, dw16, NULL, ws, NULL) == 0,
           "conv1d_hf bwd");
    CHECKF(g_ndiff(g_result(dw16, nw), g_result(dw32, nw), nw, 4) == 0, "%s conv1d_hf bwd", tname(t));
}

TEST(gpu_act16_kernels_match_fp32_on_rounded_values)
{
    for (int t = K_CUDA_MM_BF16; t <= K_CUDA_MM_F16; t++) {
        elementwise_case(t, 3, 5, 37);
        pool_case(t, 2, 3, 9, 7);
        conv_case(t, 2, 3, 9, 5, 3, 1, 1);
        conv_case(t, 3, 4, 8, 6, 3, 2, 1);
        gpt_case(t, 13, 24, 40);
    }
}

/* 16-bit activations need 16-bit products: fp32 / TF32 with the flags is refused. */
TEST(gpu_act16_refused_without_16_bit_products)
{
    g_init();
    k_conv_shape sh = {.n = 1, .c = 1, .h = 3, .w = 3, .k = 1, .r = 1, .s = 1, .stride = 1, .pad = 0};
    k_conv_shape_init(&sh);
    float *x = g_dev(64), *w = g_dev(64), *y = g_dev(64);
    CHECK(k_cuda_conv2d_fwd_mm(K_CUDA_MM_FP32 | K_CUDA_MM_X16, &sh, x, w, NULL, NULL, y, NULL, NULL) == -1);
    CHECKF(strstr(port_cuda_errmsg(), "16-bit activations need bf16 or f16 products"), "%s", port_cuda_errmsg());
    CHECK(k_cuda_linear_fwd_mm(K_CUDA_MM_TF32 | K_CUDA_MM_Y16, 1, 3, 3, x, w, NULL, NULL, y, NULL, NULL) == -1);
}

/* BN -> ReLU, BN -> add -> ReLU and add -> ReLU in one pass (nn/plan.c's fusion on the
 * device) against the ops apart, bit for bit, on fp32 and 16-bit activations; the fused
 * backward (BN's sums and dx with the ReLU's dy masked) against ReLU's backward then BN's. */
static void fused_case(int t, int n, int c, int hw)
{
    g_init();
    size_t nx = (size_t)n * c * hw;
    act x = act_make(t, nx, 71, 3.0f), s = act_make(t, nx, 72, 1.0f);
    float *mean = g_dev(c * 4), *var = g_dev(c * 4), *is = g_dev(c * 4);
    float *gam = g_up(g_rand(c, 73), c * 4), *bet = g_up(g_rand(c, 74), c * 4), *dy = g_up(g_rand(nx, 75), nx * 4);
    g_need(k_cuda_bn_stats(n, c, hw, x.g32, mean, var, NULL) == 0 &&
           k_cuda_bn_finish(c, mean, var, 1e-5f, 0.1f, (double)n * hw, is, NULL, NULL, NULL) == 0, "bn stats");
    for (int ty = 0; ty < 2; ty++) { /* fp32 activations, then 16-bit ones */
        int at = ty ? t : 0;
        const void *xa = ty ? x.g16 : (void *)x.g32, *sa = ty ? s.g16 : (void *)s.g32;
        size_t esz = ty ? 2 : 4;
        void *y1 = g_dev(nx * 4), *y2 = g_dev(nx * 4), *tmp = g_dev(nx * 4);
        /* BN -> ReLU */
        g_need(k_cuda_bn_fwd_t(n, c, hw, xa, at, mean, is, gam, bet, tmp, at, NULL) == 0 &&
               k_cuda_relu_fwd_t(nx, tmp, at, y1, at, NULL) == 0 &&
               k_cuda_bn_relu_fwd_t(n, c, hw, xa, at, mean, is, gam, bet, NULL, 0, y2, at, NULL) == 0, "bn relu");
        void *h1 = malloc(nx * esz), *h2 = malloc(nx * esz);
        g_down(h1, y1, nx * esz), g_down(h2, y2, nx * esz);
        CHECKF(g_ndiff(h1, h2, nx, esz) == 0, "bn -> relu, type %d", at);
        /* backward: ReLU's mask on dy, then BN's, against the fused sums and dx */
        float *dr = g_dev(nx * 4), *dg1 = g_dev(c * 4), *db1 = g_dev(c * 4), *dg2 = g_dev(c * 4), *db2 = g_dev(c * 4);
        float *dx1 = g_dev(nx * 4), *dx2 = g_dev(nx * 4);
        g_need(k_cuda_relu_bwd_t(nx, y1, at, dy, dr, NULL) == 0 &&
               k_cuda_bn_bwd_sums_t(n, c, hw, xa, at, mean, is, dr, dg1, db1, NULL) == 0 &&
               k_cuda_bn_bwd_dx_t(n, c, hw, xa, at, mean, is, gam, dg1, db1, (double)n * hw, dr, dx1, NULL) == 0 &&
               k_cuda_bn_relu_bwd_sums_t(n, c, hw, xa, at, mean, is, gam, bet, dy, dg2, db2, NULL) == 0 &&
               k_cuda_bn_relu_bwd_dx_t(n, c, hw, xa, at, mean, is, gam, bet, dg2, db2, (double)n * hw, dy, dx2, NULL) == 0,
               "bn relu bwd");
        CHECKF(g_ndiff(g_result(dg1, c), g_result(dg2, c), c, 4) == 0 && g_ndiff(g_result(db1, c), g_result(db2, c), c, 4) == 0 &&
               g_ndiff(g_result(dx1, nx), g_result(dx2, nx), nx, 4) == 0, "bn -> relu backward, type %d", at);
        /* BN -> add -> ReLU: apart, BN's output in fp32 (the fused pass keeps it so) */
        g_need(k_cuda_bn_fwd_t(n, c, hw, xa, at, mean, is, gam, bet, tmp, 0, NULL) == 0 &&
               k_cuda_add_t(nx, tmp, 0, sa, at, tmp, 0, NULL) == 0 && k_cuda_relu_fwd_t(nx, tmp, 0, y1, at, NULL) == 0 &&
               k_cuda_bn_relu_fwd_t(n, c, hw, xa, at, mean, is, gam, bet, sa, at, y2, at, NULL) == 0, "bn add relu");
        g_down(h1, y1, nx * esz), g_down(h2, y2, nx * esz);
        CHECKF(g_ndiff(h1, h2, nx, esz) == 0, "bn -> add -> relu, type %d", at);
        /* add -> ReLU */
        g_need(k_cuda_add_t(nx, xa, at, sa, at, tmp, at, NULL) == 0 && k_cuda_relu_fwd_t(nx, tmp, at, y1, at, NULL) == 0 &&
               k_cuda_add_relu_t(nx, xa, at, sa, at, y2, at, NULL) == 0, "add relu");
        g_down(h1, y1, nx * esz), g_down(h2, y2, nx * esz);
        CHECKF(g_ndiff(h1, h2, nx, esz) == 0, "add -> relu, type %d", at);
        free(h1), free(h2);
    }
}

TEST(gpu_fused_bn_add_relu_match_the_ops_apart)
{
    fused_case(K_CUDA_MM_BF16, 3, 5, 37);
    fused_case(K_CUDA_MM_F16, 2, 4, 25);
}

/* Attention on the tensor cores with 16-bit qkv and output (K_CUDA_MM_X16 / _Y16): y the
 * fp32-io kernel's rounded, lse and dqkv its own bits on the widened qkv and y. */
static void attn_case(int t, int b, int T, int h, int hd)
{
    g_init();
    int C = h * hd;
    size_t nq = (size_t)b * T * 3 * C, ny = (size_t)b * T * C, nl = (size_t)b * h * T;
    act q = act_make(t, nq, 81, 1.0f);
    float *dy = g_up(g_rand(ny, 82), ny * 4), *y32 = g_dev(ny * 4), *l32 = g_dev(nl * 4), *l16 = g_dev(nl * 4);
    float *d32 = g_dev(nq * 4), *d16 = g_dev(nq * 4), *yw;
    void *y16 = g_dev(ny * 2), *ws = g_dev(k_cuda_attention_workspace(b, T, h, hd) + 16);
    g_need(k_cuda_attention_fwd_mm(t, b, T, h, hd, q.g32, y32, l32, NULL) == 0 &&
           k_cuda_attention_fwd_mm(t | K_CUDA_MM_X16 | K_CUDA_MM_Y16, b, T, h, hd, (const float *)q.g16, y16, l16,
                                   NULL) == 0, "attention fwd");
    CHECKF(rounded_diff(t, y16, y32, ny) == 0 && g_ndiff(g_result(l16, nl), g_result(l32, nl), nl, 4) == 0,
           "%s attention fwd t=%d h=%d hd=%d", tname(t), T, h, hd);
    uint16_t *hy = malloc(ny * 2);
    float *fy = malloc(ny * 4);
    g_down(hy, y16, ny * 2);
    for (size_t i = 0; i < ny; i++) fy[i] = from16(t, hy[i]);
    yw = g_up(fy, ny * 4);
    g_need(k_cuda_attention_bwd_mm(t, b, T, h, hd, q.g32, yw, l32, dy, d32, ws, NULL) == 0 &&
           k_cuda_attention_bwd_mm(t | K_CUDA_MM_X16 | K_CUDA_MM_Y16, b, T, h, hd, (const float *)q.g16, y16, l32, dy,
                                   d16, ws, NULL) == 0, "attention bwd");
    CHECKF(g_ndiff(g_result(d16, nq), g_result(d32, nq), nq, 4) == 0, "%s attention bwd t=%d h=%d hd=%d", tname(t), T,
           h, hd);
    free(hy), free(fy);
}

TEST(gpu_act16_attention_matches_fp32_io)
{
    attn_case(K_CUDA_MM_BF16, 2, 70, 2, 32);
    attn_case(K_CUDA_MM_F16, 1, 17, 3, 64);
    /* wider heads than the tensor-core kernel's keep fp32: 16-bit io refused */
    g_init();
    float *x = g_dev(64);
    CHECK(k_cuda_attention_fwd_mm(K_CUDA_MM_BF16 | K_CUDA_MM_X16, 1, 1, 1, 256, x, x, x, NULL) == -1);
    CHECKF(strstr(port_cuda_errmsg(), "16-bit activations need the tensor-core kernel"), "%s", port_cuda_errmsg());
}
