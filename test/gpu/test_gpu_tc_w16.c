/* The tensor-core products with the weight's 16-bit copy (w16, k_cuda.h: the device
 * graph's --amp weights) and with 16-bit inputs taken by cp.async, against the same
 * products without them: bitwise equal. The copy holds the bits the gathering loader
 * rounds w to (round to nearest even, k_cuda_f32_to_bf16 / _f16), and every pipeline
 * (3 cp.async stages, the mixed 2-stage one, registers only; wgmma's two kernels) adds
 * the same products in the same k order, so not one bit may differ. Shapes: M, N, K off
 * the tiles, rows 16-byte aligned where the copy is taken (and not, where it is not). */
#include "test/gpu/g.h"

#if DDPRT_SIMT
unsigned long long simt_wgmma_count(int ta, int tb);
#endif

/* conv d[9] = n c h w k r s stride pad: y, dx, dw, db with w16 (and with a 16-bit x)
 * against without. */
static void conv_w16_case(int t, const int *d)
{
    k_conv_shape sh = {.n = d[0], .c = d[1], .h = d[2], .w = d[3], .k = d[4], .r = d[5], .s = d[6], .stride = d[7],
                       .pad = d[8]};
    k_conv_shape_init(&sh);
    size_t nx = (size_t)sh.n * sh.c * sh.h * sh.w, nw = (size_t)sh.k * sh.c * sh.r * sh.s;
    size_t ny = (size_t)sh.n * sh.k * sh.p * sh.q, nb = (size_t)sh.k;
    float *hx = g_rand(nx, 61), *hw = g_rand(nw, 62), *hb = g_rand(nb, 63), *hdy = g_rand(ny, 64);
    float *x = g_up(hx, nx * 4), *w = g_up(hw, nw * 4), *b = g_up(hb, nb * 4), *dy = g_up(hdy, ny * 4);
    uint16_t *w16 = g_dev16(t, w, nw), *x16 = g_dev16(t, x, nx);
    void *ws = g_dev(k_cuda_conv2d_workspace(&sh) + 64);
    /* 4 bytes off 16-byte alignment: the NHWC copies (k_cuda_conv.cu) refuse it, so these
     * products stay the gathers and w16's cp.async (split over k as before) */
    void *wsu = (char *)ws + 4;
    float *o[2][5];
    size_t n[5] = {ny, nx, nw, nb, ny};
    for (int v = 0; v < 2; v++) {
        for (int i = 0; i < 5; i++) o[v][i] = g_dev(n[i] * 4);
        const uint16_t *wv = v ? w16 : NULL;
        g_need(k_cuda_conv2d_fwd_mm(t, &sh, x, w, wv, b, o[v][0], wsu, NULL) == 0 &&
               k_cuda_conv2d_bwd_mm(t, &sh, x, w, wv, dy, o[v][1], o[v][2], o[v][3], wsu, NULL) == 0 &&
               k_cuda_conv2d_fwd_mm(t | K_CUDA_MM_X16, &sh, (const float *)x16, w, wv, b, o[v][4], wsu, NULL) == 0,
               "conv");
    }
    static const char *const nm[] = {"y", "dx", "dw", "db", "y (16-bit x)"};
    for (int i = 0; i < 5; i++)
        CHECKF(g_ndiff_dev(o[1][i], o[0][i], n[i]) == 0 && g_ndiff_dev(o[1][i], o[0][i == 4 ? 0 : i], n[i]) == 0,
               "%s conv n=%d c=%d %dx%d k=%d %dx%d st=%d pad=%d: %s with w16 differs", g_tn(t), d[0], d[1], d[2], d[3],
               d[4], d[5], d[6], d[7], d[8], nm[i]);
    for (int v = 0; v < 2; v++)
        for (int i = 0; i < 5; i++) port_dev_free(o[v][i]);
    port_dev_free(x), port_dev_free(w), port_dev_free(b), port_dev_free(dy), port_dev_free(w16), port_dev_free(x16);
    port_dev_free(ws);
    free(hx), free(hw), free(hb), free(hdy);
}

/* linear (conv1d_hf when hf: w [in x out]): y, dx, dw, db for every way in: fp32 or
 * 16-bit x, with or without w16; all four must give the fp32-x, no-w16 bits. */
static void lin_w16_case(int t, int hf, int n, int in, int out)
{
    size_t nx = (size_t)n * in, nw = (size_t)in * out, ny = (size_t)n * out;
    float *hx = g_rand(nx, 71), *hw = g_rand(nw, 72), *hb = g_rand(out, 73), *hdy = g_rand(ny, 74);
    float *x = g_up(hx, nx * 4), *w = g_up(hw, nw * 4), *b = g_up(hb, out * 4), *dy = g_up(hdy, ny * 4);
    uint16_t *w16 = g_dev16(t, w, nw), *x16 = g_dev16(t, x, nx);
    void *ws = g_dev((hf ? k_cuda_conv1d_hf_workspace(n, in, out) : k_cuda_linear_workspace(n, in, out)) + 64);
    size_t cnt[4] = {ny, nx, nw, (size_t)out};
    float *o[4][4];
    for (int v = 0; v < 4; v++) {
        for (int i = 0; i < 4; i++) o[v][i] = g_dev(cnt[i] * 4);
        int mm = t | (v & 2 ? K_CUDA_MM_X16 : 0);
        const float *xv = v & 2 ? (const float *)x16 : x;
        const uint16_t *wv = v & 1 ? w16 : NULL;
        int rc = hf ? k_cuda_conv1d_hf_fwd_mm(mm, n, in, out, xv, w, wv, b, o[v][0], ws, NULL) ||
                          k_cuda_conv1d_hf_bwd_mm(mm, n, in, out, xv, w, wv, dy, o[v][1], o[v][2], o[v][3], ws, NULL)
                    : k_cuda_linear_fwd_mm(mm, n, in, out, xv, w, wv, b, o[v][0], ws, NULL) ||
                          k_cuda_linear_bwd_mm(mm, n, in, out, xv, w, wv, dy, o[v][1], o[v][2], o[v][3], ws, NULL);
        g_need(rc == 0, hf ? "conv1d_hf" : "linear");
    }
    static const char *const nm[] = {"y", "dx", "dw", "db"};
    for (int v = 1; v < 4; v++)
        for (int i = 0; i < 4; i++)
            CHECKF(g_ndiff_dev(o[v][i], o[0][i], cnt[i]) == 0, "%s %s n=%d in=%d out=%d (%s x, %s): %s differs",
                   g_tn(t), hf ? "conv1d_hf" : "linear", n, in, out, v & 2 ? "16-bit" : "fp32",
                   v & 1 ? "w16" : "no w16", nm[i]);
    for (int v = 0; v < 4; v++)
        for (int i = 0; i < 4; i++) port_dev_free(o[v][i]);
    port_dev_free(x), port_dev_free(w), port_dev_free(b), port_dev_free(dy), port_dev_free(w16), port_dev_free(x16);
    port_dev_free(ws);
    free(hx), free(hw), free(hb), free(hdy);
}

/* Odd shapes: LeNet-like and ResNet-like convs (3x3, a 1x1 stride-2 downsample whose
 * input gradient takes w16 too, channels not multiples of 8: no copy); linear and Conv1D
 * with rows of 8k elements (the copy) and not, split-K weight gradients (n = 300). */
TEST(gpu_tc_w16_bitwise_equal_without)
{
    g_init();
    static const int convs[][9] = {{2, 16, 9, 9, 20, 3, 3, 1, 1}, {3, 24, 7, 7, 40, 1, 1, 2, 0},
                                   {2, 8, 11, 11, 70, 1, 1, 1, 0}, {2, 5, 8, 8, 12, 3, 3, 2, 1}};
    static const int lins[][3] = {{7, 40, 65}, {300, 48, 24}, {5, 33, 17}, {66, 72, 136}};
    for (int t = K_CUDA_MM_BF16; t <= K_CUDA_MM_F16; t++) {
        for (size_t i = 0; i < sizeof convs / sizeof convs[0]; i++) conv_w16_case(t, convs[i]);
        for (size_t i = 0; i < sizeof lins / sizeof lins[0]; i++)
            for (int hf = 0; hf < 2; hf++) lin_w16_case(t, hf, lins[i][0], lins[i][1], lins[i][2]);
    }
}

/* The same on wgmma (the 128-tile products: mixed ones on the register kernel with the
 * 16-bit operand as it is, two k-contiguous 16-bit arrays on the cp.async one). */
TEST(gpu_tc_w16_bitwise_equal_on_wgmma)
{
    if (!g_sm90()) return;
    g_wgmma_on();
    static const int conv[9] = {1, 8, 12, 12, 136, 3, 3, 1, 1};
    conv_w16_case(K_CUDA_MM_BF16, conv);
    lin_w16_case(K_CUDA_MM_BF16, 0, 130, 72, 136);
    lin_w16_case(K_CUDA_MM_F16, 1, 136, 40, 128);
    g_wgmma_off();
}

/* conv's weight gradient on wgmma: on the NHWC copies (a workspace) it is wg_gemm on two
 * M/N-contiguous operands (dy's copy [K x NPQ], x's patches), in M/N-major tiles with
 * imm-trans 1; without a workspace the gathering loaders (k-contiguous) on the register
 * kernel (K-major tiles). The same rounded operands, the same k order (no split: n*p*q
 * under 256): not one bit may differ. k = 130: dy's copy element by element (rows not
 * 16-byte aligned). On the executor the M/N-major ops are counted: every one of the
 * product's on the copies (2 warpgroups x 2 k16 steps a 32-deep slice, every 128
 * tile), none without. */
TEST(gpu_tc_conv_dw_mn_major_on_wgmma)
{
    if (!g_sm90()) return;
    g_wgmma_on();
    static const int convs[][9] = {{1, 16, 12, 12, 128, 3, 3, 1, 1}, {1, 24, 13, 13, 130, 3, 3, 1, 1},
                                   {2, 136, 5, 5, 144, 1, 1, 1, 0}};
    for (size_t i = 0; i < sizeof convs / sizeof convs[0]; i++) {
        const int *d = convs[i];
        int t = i == 1 ? K_CUDA_MM_F16 : K_CUDA_MM_BF16;
        k_conv_shape sh = {.n = d[0], .c = d[1], .h = d[2], .w = d[3], .k = d[4], .r = d[5], .s = d[6],
                           .stride = d[7], .pad = d[8]};
        k_conv_shape_init(&sh);
        size_t nx = (size_t)sh.n * sh.c * sh.h * sh.w, nw = (size_t)sh.k * sh.c * sh.r * sh.s;
        size_t ny = (size_t)sh.n * sh.k * sh.p * sh.q;
        float *hx = g_rand(nx, 91), *hdy = g_rand(ny, 92), *x = g_up(hx, nx * 4), *dy = g_up(hdy, ny * 4);
        float *w = g_dev(nw * 4), *dw0 = g_dev(nw * 4), *dw1 = g_dev(nw * 4);
        void *ws = g_dev(k_cuda_conv2d_workspace(&sh) + 64);
#if DDPRT_SIMT
        unsigned long long c0 = simt_wgmma_count(1, 1);
#endif
        g_need(k_cuda_conv2d_bwd_mm(t, &sh, x, w, NULL, dy, NULL, dw0, NULL, NULL, NULL) == 0, "conv dw (gathered)");
#if DDPRT_SIMT
        g_need(port_stream_sync(NULL, "wgmma count") == 0, "sync");
        unsigned long long c1 = simt_wgmma_count(1, 1);
#endif
        g_need(k_cuda_conv2d_bwd_mm(t, &sh, x, w, NULL, dy, NULL, dw1, NULL, ws, NULL) == 0, "conv dw (copies)");
#if DDPRT_SIMT
        g_need(port_stream_sync(NULL, "wgmma count") == 0, "sync");
        unsigned long long c2 = simt_wgmma_count(1, 1);
        int M = sh.k, N = sh.c * sh.r * sh.s, K = sh.n * sh.p * sh.q;
        unsigned long long ops = 4ull * ((M + 127) / 128) * ((N + 127) / 128) * ((K + 31) / 32);
        CHECKF(c1 - c0 == 0 && c2 - c1 == ops, "%s conv c=%d k=%d: %llu / %llu m/n-major wgmma ops (gathered / "
               "copies), expected 0 / %llu", g_tn(t), sh.c, sh.k, c1 - c0, c2 - c1, ops);
#endif
        CHECKF(g_ndiff_dev(dw1, dw0, nw) == 0, "%s conv n=%d c=%d %dx%d k=%d %dx%d: the weight grad on the copies "
               "(m/n-major wgmma) differs from the gathered one", g_tn(t), d[0], d[1], d[2], d[3], d[4], d[5], d[6]);
        port_dev_free(x), port_dev_free(dy), port_dev_free(w), port_dev_free(dw0), port_dev_free(dw1);
        port_dev_free(ws);
        free(hx), free(hdy);
    }
    g_wgmma_off();
}

#if DDPRT_SIMT
/* Which products take w16 by cp.async, counted by the executor: without w16 (fp32 x)
 * not one copy; with it, exactly the weight operand's copies. */
TEST(gpu_tc_w16_products_issue_cp_async)
{
    g_init();
    int t = K_CUDA_MM_BF16;
    k_conv_shape sh3 = {.n = 2, .c = 16, .h = 9, .w = 9, .k = 20, .r = 3, .s = 3, .stride = 1, .pad = 1};
    k_conv_shape sh1 = {.n = 2, .c = 24, .h = 7, .w = 7, .k = 40, .r = 1, .s = 1, .stride = 1, .pad = 0};
    k_conv_shape_init(&sh3), k_conv_shape_init(&sh1);
    enum { N = 6, IN = 40, OUT = 24 };
    size_t big = 2 * 24 * 9 * 9 * 40;
    float *h = g_rand(big, 81), *a = g_up(h, big * 4), *b = g_up(h, big * 4), *c = g_dev(big * 4), *e = g_dev(big * 4);
    uint16_t *w16 = g_dev16(t, b, big);
    for (int v = 0; v < 2; v++) {
        const uint16_t *wv = v ? w16 : NULL;
        unsigned long long c0 = g_cp_count();
        g_need(k_cuda_conv2d_fwd_mm(t, &sh3, a, b, wv, NULL, c, NULL, NULL) == 0, "conv fwd");
        unsigned long long c1 = g_cp_count();
        g_need(k_cuda_conv2d_bwd_mm(t, &sh1, a, b, wv, a, c, e, NULL, NULL, NULL) == 0, "conv bwd");
        unsigned long long c2 = g_cp_count();
        g_need(k_cuda_linear_fwd_mm(t, N, IN, OUT, a, b, wv, NULL, c, NULL, NULL) == 0 &&
                   k_cuda_linear_bwd_mm(t, N, IN, OUT, a, b, wv, a, c, e, NULL, NULL, NULL) == 0,
               "linear");
        unsigned long long c3 = g_cp_count();
        g_need(k_cuda_conv1d_hf_fwd_mm(t, N, IN, OUT, a, b, wv, NULL, c, NULL, NULL) == 0 &&
                   k_cuda_conv1d_hf_bwd_mm(t, N, IN, OUT, a, b, wv, a, c, e, NULL, NULL, NULL) == 0,
               "conv1d_hf");
        unsigned long long c4 = g_cp_count();
        unsigned long long conv_f = g_cp_expect(20, 2 * 9 * 9, 16 * 9), conv_dx = g_cp_expect(24, 2 * 7 * 7, 40);
        unsigned long long lin = g_cp_expect(N, OUT, IN) + g_cp_expect(N, IN, OUT); /* forward + input grad */
        CHECKF(c1 - c0 == (v ? conv_f : 0), "conv fwd %s w16: %llu cp.async, expected %llu", v ? "with" : "without",
               c1 - c0, v ? conv_f : 0);
        CHECKF(c2 - c1 == (v ? conv_dx : 0), "conv 1x1 bwd %s w16: %llu cp.async, expected %llu",
               v ? "with" : "without", c2 - c1, v ? conv_dx : 0);
        CHECKF(c3 - c2 == (v ? lin : 0), "linear %s w16: %llu cp.async, expected %llu", v ? "with" : "without", c3 - c2,
               v ? lin : 0);
        CHECKF(c4 - c3 == (v ? lin : 0), "conv1d_hf %s w16: %llu cp.async, expected %llu", v ? "with" : "without",
               c4 - c3, v ? lin : 0);
    }
    port_dev_free(a), port_dev_free(b), port_dev_free(c), port_dev_free(e), port_dev_free(w16);
    free(h);
}

/* The same for a 64-tile product with both operands by cp.async (per operand: 64 rows of
 * 4 chunks a 32-deep slice); a one of 0 takes the other only. */
static unsigned long long cp_expect2(int M, int N, int K, int a, int b)
{
    return (unsigned long long)(a + b) * g_cp_expect(M, N, K);
}

/* conv's NHWC copies (a workspace, bf16 / f16): the forward, input and weight grads copy
 * both operands by cp.async, counted exactly (one 64-tile block row, no split over k);
 * where the channels a product's chunks run over are not multiples of 8 it gathers as
 * before: c = 12 (forward and weight grad: no copy), k = 20 (input grad: none; weight
 * grad: its dy element by element, xh's chunks copied). */
TEST(gpu_tc_conv_nhwc_issues_cp_async)
{
    g_init();
    static const int shp[][3] = {{16, 24, 1}, {12, 16, 1}, {16, 20, 2}}; /* c, k, stride */
    size_t big = 2 * 16 * 9 * 9 * 24;
    float *h = g_rand(big, 82), *a = g_up(h, big * 4), *c = g_dev(big * 4), *e = g_dev(big * 4);
    for (size_t i = 0; i < sizeof shp / sizeof shp[0]; i++) {
        k_conv_shape sh = {.n = 2, .c = shp[i][0], .h = 9, .w = 9, .k = shp[i][1], .r = 3, .s = 3,
                           .stride = shp[i][2], .pad = 1};
        k_conv_shape_init(&sh);
        void *ws = g_dev(k_cuda_conv2d_workspace(&sh));
        int t = i == 1 ? K_CUDA_MM_F16 : K_CUDA_MM_BF16, cx = sh.c % 8 == 0, ck = sh.k % 8 == 0;
        int npq = sh.n * sh.p * sh.q, nhw = sh.n * sh.h * sh.w;
        unsigned long long c0 = g_cp_count();
        g_need(k_cuda_conv2d_fwd_mm(t, &sh, a, a, NULL, NULL, c, ws, NULL) == 0, "conv fwd");
        unsigned long long c1 = g_cp_count();
        g_need(k_cuda_conv2d_bwd_mm(t, &sh, a, a, NULL, a, NULL, e, NULL, ws, NULL) == 0, "conv bwd (dw)");
        unsigned long long c2 = g_cp_count();
        g_need(k_cuda_conv2d_bwd_mm(t, &sh, a, a, NULL, a, c, e, NULL, ws, NULL) == 0, "conv bwd");
        unsigned long long c3 = g_cp_count();
        unsigned long long f = cx ? cp_expect2(sh.k, npq, 9 * sh.c, 1, 1) : 0;
        unsigned long long dw = cx ? cp_expect2(sh.k, 9 * sh.c, npq, ck, 1) : 0;
        unsigned long long dx = ck ? cp_expect2(sh.c, nhw, 9 * sh.k, 1, 1) : 0;
        CHECKF(c1 - c0 == f, "c=%d k=%d fwd: %llu cp.async, expected %llu", sh.c, sh.k, c1 - c0, f);
        CHECKF(c2 - c1 == dw, "c=%d k=%d weight grad: %llu cp.async, expected %llu", sh.c, sh.k, c2 - c1, dw);
        CHECKF(c3 - c2 == dw + dx, "c=%d k=%d input + weight grad: %llu cp.async, expected %llu", sh.c, sh.k, c3 - c2,
               dw + dx);
        CHECKF(f + dw + dx > 0, "c=%d k=%d: no product on the copies", sh.c, sh.k);
        port_dev_free(ws);
    }
    port_dev_free(a), port_dev_free(c), port_dev_free(e);
    free(h);
}
#endif
