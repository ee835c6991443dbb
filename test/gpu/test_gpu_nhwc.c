/* Channels-last BN and pools (k_cuda_nhwc.h) against the NCHW kernels on the same tensors
 * permuted: the pools, the global average and BN's elementwise parts (the NCHW kernels
 * with hw = 1) bit for bit, BN's sums (another fixed order) to rounding. Rows n*h*w odd
 * and over several strips, channels in 8s but not in the blocks' 32s. */
#include "test/gpu/g.h"
#include "kernels/cuda/k_cuda_nhwc.h"
#include "ports/cuda/port_cuda.h"

/* dst[(i * B + b) * A + a] = src[(i * A + a) * B + b] for i < n (elements of es bytes). */
static void perm(int n, int A, int B, size_t es, const void *src, void *dst)
{
    for (int i = 0; i < n; i++)
        for (int a = 0; a < A; a++)
            for (int b = 0; b < B; b++)
                memcpy((char *)dst + (((size_t)i * B + b) * A + a) * es, (const char *)src + (((size_t)i * A + a) * B + b) * es,
                       es);
}

/* The device array d (n x A x B of es bytes) permuted, against the device array e. */
static size_t perm_diff(int n, int A, int B, size_t es, const void *d, const void *e)
{
    size_t nb = (size_t)n * A * B * es;
    char *a = malloc(nb), *b = malloc(nb), *c = malloc(nb);
    g_down(a, d, nb), g_down(c, e, nb);
    perm(n, A, B, es, a, b);
    size_t k = g_ndiff(b, c, (size_t)n * A * B, es);
    free(a), free(b), free(c);
    return k;
}

/* x of type t (fp32 or 16-bit) in both layouts, from the same values. */
static void act_pair(int t, int n, int c, int hw, unsigned seed, void **nchw, void **nhwc)
{
    size_t ne = (size_t)n * c * hw, es = t == K_CUDA_ACT_F32 ? 4 : 2;
    float *f = g_rand(ne, seed);
    void *h = malloc(ne * es), *p = malloc(ne * es);
    if (es == 2)
        for (size_t i = 0; i < ne; i++) ((uint16_t *)h)[i] = g_to16(t, f[i]);
    else memcpy(h, f, ne * 4);
    perm(n, c, hw, es, h, p);
    *nchw = g_up(h, ne * es), *nhwc = g_up(p, ne * es);
    free(f), free(h), free(p);
}

static void bn_case(int t, int n, int c, int h, int w)
{
    int hw = h * w;
    size_t rows = (size_t)n * hw, ne = rows * c, es = t == K_CUDA_ACT_F32 ? 4 : 2;
    void *x, *xh, *ad, *adh;
    act_pair(t, n, c, hw, 11, &x, &xh);
    act_pair(t, n, c, hw, 12, &ad, &adh);
    /* the conversions at the layout's edges, both ways */
    void *cv = g_dev(ne * es), *back = g_dev(ne * es);
    g_need(k_cuda_nchw_to_nhwc(n, c, hw, x, cv, t, NULL) == 0 && k_cuda_nhwc_to_nchw(n, c, hw, cv, back, t, NULL) == 0,
           "permute");
    CHECKF(perm_diff(n, c, hw, es, x, cv) == 0 && perm_diff(1, 1, (int)(ne * es / 4), 4, back, x) == 0,
           "type %d c=%d: the layout conversions", t, c);
    float *gb = g_rand(2 * (size_t)c, 13);
    for (int i = 0; i < c; i++) gb[i] += 1.5f; /* gamma around 1.5, beta in [-1, 1) */
    float *gamma = g_up(gb, c * 4), *beta = g_up(gb + c, c * 4);
    float *st = g_dev(8 * (size_t)c * 4); /* mean var invstd | mean var invstd (nhwc) | dgamma dbeta */
    float *mean = st, *var = st + c, *inv = st + 2 * c, *mean2 = st + 3 * c, *var2 = st + 4 * c;
    size_t wsb = k_cuda_bn_nhwc_workspace(rows, c);
    void *ws = g_dev(wsb);
    g_need(k_cuda_bn_stats_t(n, c, hw, x, t, mean, var, NULL) == 0 &&
               k_cuda_bn_stats_nhwc(rows, c, xh, t, mean2, var2, ws, NULL) == 0 &&
               k_cuda_bn_finish(c, mean, var, 1e-5f, 0.1f, (double)rows, inv, NULL, NULL, NULL) == 0,
           "bn stats");
    float *hs = g_result(st, 5 * (size_t)c);
    CHECKF(g_relerr(hs + 3 * c, hs, c) < 1e-6 && g_relerr(hs + 4 * c, hs + c, c) < 1e-6,
           "type %d c=%d rows=%zu: NHWC statistics off by %g / %g", t, c, rows, g_relerr(hs + 3 * c, hs, c),
           g_relerr(hs + 4 * c, hs + c, c));
    float *again = g_dev(2 * (size_t)c * 4);
    g_need(k_cuda_bn_stats_nhwc(rows, c, xh, t, again, again + c, ws, NULL) == 0, "bn stats again");
    float *ha = g_result(again, 2 * (size_t)c);
    CHECK(g_ndiff(ha, hs + 3 * c, 2 * (size_t)c, 4) == 0); /* a run repeats bit for bit */
    /* forward, plain and fused with the add and ReLU, on the NCHW statistics: bit for bit */
    void *y = g_dev(ne * es), *yh = g_dev(ne * es);
    for (int fused = 0; fused < 2; fused++) {
        if (fused)
            g_need(k_cuda_bn_relu_fwd_t(n, c, hw, x, t, mean, inv, gamma, beta, ad, t, y, t, NULL) == 0 &&
                       k_cuda_bn_relu_fwd_t((int)rows, c, 1, xh, t, mean, inv, gamma, beta, adh, t, yh, t, NULL) == 0,
                   "bn fwd");
        else
            g_need(k_cuda_bn_fwd_t(n, c, hw, x, t, mean, inv, gamma, beta, y, t, NULL) == 0 &&
                       k_cuda_bn_fwd_t((int)rows, c, 1, xh, t, mean, inv, gamma, beta, yh, t, NULL) == 0,
                   "bn fwd");
        CHECKF(perm_diff(n, c, hw, es, y, yh) == 0, "type %d c=%d: NHWC BN forward (fused %d) differs", t, c, fused);
    }
    /* backward, with and without the fused ReLU's mask: sums to rounding, dx bit for bit */
    float *dyf = g_rand(ne, 14), *dyp = malloc(ne * 4);
    perm(n, c, hw, 4, dyf, dyp);
    float *dy = g_up(dyf, ne * 4), *dyh = g_up(dyp, ne * 4), *dx = g_dev(ne * 4), *dxh = g_dev(ne * 4);
    float *sums = g_dev(4 * (size_t)c * 4), *dg = sums, *db = sums + c, *dg2 = sums + 2 * c, *db2 = sums + 3 * c;
    for (int relu = 0; relu < 2; relu++) {
        g_need((relu ? k_cuda_bn_relu_bwd_sums_t(n, c, hw, x, t, mean, inv, gamma, beta, dy, dg, db, NULL)
                     : k_cuda_bn_bwd_sums_t(n, c, hw, x, t, mean, inv, dy, dg, db, NULL)) == 0 &&
                   k_cuda_bn_bwd_sums_nhwc(rows, c, xh, t, mean, inv, relu ? gamma : NULL, relu ? beta : NULL, relu,
                                           dyh, dg2, db2, ws, NULL) == 0,
               "bn bwd sums");
        float *hb = g_result(sums, 4 * (size_t)c);
        CHECKF(g_relerr(hb + 2 * c, hb, c) < 1e-5 && g_relerr(hb + 3 * c, hb + c, c) < 1e-5,
               "type %d c=%d relu %d: NHWC dgamma / dbeta off by %g / %g", t, c, relu, g_relerr(hb + 2 * c, hb, c),
               g_relerr(hb + 3 * c, hb + c, c));
        free(hb);
        g_need((relu ? k_cuda_bn_relu_bwd_dx_t(n, c, hw, x, t, mean, inv, gamma, beta, dg, db, (double)rows, dy, dx,
                                               NULL) == 0 &&
                           k_cuda_bn_relu_bwd_dx_t((int)rows, c, 1, xh, t, mean, inv, gamma, beta, dg, db, (double)rows,
                                                   dyh, dxh, NULL) == 0
                     : k_cuda_bn_bwd_dx_t(n, c, hw, x, t, mean, inv, gamma, dg, db, (double)rows, dy, dx, NULL) == 0 &&
                           k_cuda_bn_bwd_dx_t((int)rows, c, 1, xh, t, mean, inv, gamma, dg, db, (double)rows, dyh, dxh,
                                              NULL) == 0),
               "bn bwd dx");
        CHECKF(perm_diff(n, c, hw, 4, dx, dxh) == 0, "type %d c=%d relu %d: NHWC BN dx differs", t, c, relu);
    }
    /* a workspace the sums cannot use: refused, named */
    CHECK(k_cuda_bn_stats_nhwc(rows, c, xh, t, mean2, var2, NULL, NULL) == -1 &&
          strstr(port_cuda_errmsg(), "k_cuda_bn_stats_nhwc") != NULL);
    port_cuda_clear_error();
    void *ptrs[] = {x, xh, ad, adh, cv, back, gamma, beta, st, ws, again, y, yh, dy, dyh, dx, dxh, sums};
    for (size_t i = 0; i < sizeof ptrs / sizeof ptrs[0]; i++) port_dev_free(ptrs[i]);
    free(gb), free(hs), free(ha), free(dyf), free(dyp);
}

TEST(gpu_nhwc_bn_matches_nchw)
{
    g_init();
    static const int shp[][4] = {{3, 24, 5, 7}, {2, 40, 11, 11}, {1, 8, 13, 9}};
    static const int types[] = {K_CUDA_ACT_F32, K_CUDA_MM_BF16, K_CUDA_MM_F16};
    for (int t = 0; t < 3; t++)
        for (size_t i = 0; i < sizeof shp / sizeof shp[0]; i++)
            bn_case(types[t], shp[i][0], shp[i][1], shp[i][2], shp[i][3]);
}

static void pool_case(int t, int n, int c, int h, int w, int ks, int st, int pad)
{
    int hw = h * w, p = (h + 2 * pad - ks) / st + 1, q = (w + 2 * pad - ks) / st + 1;
    size_t es = t == K_CUDA_ACT_F32 ? 4 : 2, ny = (size_t)n * c * p * q, nx = (size_t)n * c * hw;
    void *x, *xh;
    act_pair(t, n, c, hw, 21, &x, &xh);
    void *y = g_dev(ny * es), *yh = g_dev(ny * es);
    int32_t *ix = g_dev(ny * 4), *ixh = g_dev(ny * 4);
    g_need(k_cuda_maxpool2d_pad_fwd_t(n, c, h, w, ks, st, pad, x, t, y, t, ix, NULL) == 0 &&
               k_cuda_maxpool2d_nhwc_fwd(n, c, h, w, ks, st, pad, xh, t, yh, t, ixh, NULL) == 0,
           "maxpool fwd");
    CHECKF(perm_diff(n, c, p * q, es, y, yh) == 0 && perm_diff(n, c, p * q, 4, ix, ixh) == 0,
           "type %d c=%d %dx%d ks=%d st=%d pad=%d: NHWC max pool forward differs", t, c, h, w, ks, st, pad);
    float *dyf = g_rand(ny, 22), *dyp = malloc(ny * 4);
    perm(n, c, p * q, 4, dyf, dyp);
    float *dy = g_up(dyf, ny * 4), *dyh = g_up(dyp, ny * 4), *dx = g_dev(nx * 4), *dxh = g_dev(nx * 4);
    g_need(k_cuda_maxpool2d_pad_bwd(n, c, h, w, ks, st, pad, dy, ix, dx, NULL) == 0 &&
               k_cuda_maxpool2d_nhwc_bwd(n, c, h, w, ks, st, pad, dyh, ixh, dxh, NULL) == 0,
           "maxpool bwd");
    CHECKF(perm_diff(n, c, hw, 4, dx, dxh) == 0, "type %d c=%d: NHWC max pool backward differs", t, c);
    /* global average: y [n, c] in both, dx permuted */
    float *ya = g_dev((size_t)n * c * 4), *yah = g_dev((size_t)n * c * 4);
    g_need(k_cuda_global_avgpool_fwd_t(n, c, hw, x, t, ya, NULL) == 0 &&
               k_cuda_global_avgpool_nhwc_fwd(n, c, hw, xh, t, yah, NULL) == 0 &&
               k_cuda_global_avgpool_bwd(n, c, hw, dy, dx, NULL) == 0 &&
               k_cuda_global_avgpool_nhwc_bwd(n, c, hw, dy, dxh, NULL) == 0,
           "global avgpool");
    CHECKF(perm_diff(1, 1, n * c, 4, ya, yah) == 0 && perm_diff(n, c, hw, 4, dx, dxh) == 0,
           "type %d c=%d %dx%d: NHWC global average pool differs", t, c, h, w);
    void *ptrs[] = {x, xh, y, yh, ix, ixh, dy, dyh, dx, dxh, ya, yah};
    for (size_t i = 0; i < sizeof ptrs / sizeof ptrs[0]; i++) port_dev_free(ptrs[i]);
    free(dyf), free(dyp);
}

/* ResNet's stem pool (3x3 stride 2 pad 1: overlapping windows), a plain 2x2, odd planes. */
TEST(gpu_nhwc_pools_match_nchw)
{
    g_init();
    for (int t = 0; t < 2; t++) {
        int ty = t ? K_CUDA_MM_BF16 : K_CUDA_ACT_F32;
        pool_case(ty, 2, 16, 9, 9, 3, 2, 1);
        pool_case(ty, 3, 8, 7, 5, 2, 2, 0);
        pool_case(ty, 1, 24, 5, 5, 3, 1, 1);
    }
}

/* conv with channels-last x / dx (XNHWC) and y / dy (YNHWC) against the same products on
 * NCHW tensors (which permute x and dy into the workspace): the same sums, only where
 * the values are stored, so bit for bit. With the weight block, the NHWC calls permute
 * nothing (k_cuda_conv2d_chan_last_calls). Workspaces sized exactly, with the run's flags
 * (the channels-last one has no room for a 16-bit x's copy; the stem's without dx none for
 * dy's). */
static void conv_case(int t, int n, int c, int h, int k, int r, int st, int pad, int y16, int x16)
{
    k_conv_shape sh = {.n = n, .c = c, .h = h, .w = h + 1, .k = k, .r = r, .s = r, .stride = st, .pad = pad};
    k_conv_shape_init(&sh);
    int hw = sh.h * sh.w, pq = sh.p * sh.q;
    size_t nw = (size_t)k * c * r * r, ny = (size_t)n * k * pq, nx = (size_t)n * c * hw, ye = y16 ? 2 : 4;
    void *x, *xh;
    act_pair(x16 ? t : K_CUDA_ACT_F32, n, c, hw, 31, &x, &xh);
    float *hwt = g_rand(nw, 32), *hb = g_rand((size_t)k, 33), *dyf = g_rand(ny, 34), *dyp = malloc(ny * 4);
    perm(n, k, pq, 4, dyf, dyp);
    float *w = g_up(hwt, nw * 4), *b = g_up(hb, (size_t)k * 4), *dy = g_up(dyf, ny * 4), *dyh = g_up(dyp, ny * 4);
    uint16_t *blk = g_dev(k_cuda_conv2d_w16_elems(t, &sh) * 2);
    g_need(k_cuda_conv2d_w16_prep(t, &sh, w, blk, NULL) == 0, "prep");
    int mm = t | (x16 ? K_CUDA_MM_X16 : 0) | K_CUDA_MM_W16P | (y16 ? K_CUDA_MM_Y16 : 0);
    int xn = c % 8 == 0; /* x channels last where the products can read it (the stem's c = 3: y only) */
    int mn = mm | (xn ? K_CUDA_MM_XNHWC : 0) | K_CUDA_MM_YNHWC; /* the channels-last run's flags */
    size_t wsb = k_cuda_conv2d_workspace_mm(mm, &sh), wsn = k_cuda_conv2d_workspace_mm(mn, &sh);
    /* sized with the run's flags: no room for x's copy where x is 16-bit and channels last */
    CHECKF(wsn + (xn && x16 ? ((size_t)2 * nx + 15) / 16 * 16 : 0) == wsb, "c=%d x16 %d: %zu workspace bytes, %zu NCHW",
           c, x16, wsn, wsb);
    unsigned char *fill = malloc(wsn);
    memset(fill, 0xff, wsn);
    void *ws = g_dev(wsb), *wsh = g_up(fill, wsn);
    free(fill);
    void *o[2][4];
    size_t nb[4] = {ny * ye, nx * 4, nw * 4, (size_t)k * 4};
    unsigned long calls[3];
    for (int v = 0; v < 2; v++) {
        for (int i = 0; i < 4; i++) o[v][i] = g_dev(nb[i]);
        int m = v ? mn : mm;
        calls[v] = k_cuda_conv2d_chan_last_calls();
        void *xv = v && xn ? xh : x, *wv = v ? wsh : ws;
        g_need(k_cuda_conv2d_fwd_mm(m, &sh, xv, w, blk, b, o[v][0], wv, NULL) == 0 &&
                   k_cuda_conv2d_bwd_mm(m, &sh, xv, w, blk, v ? dyh : dy, o[v][1], o[v][2], o[v][3], wv, NULL) == 0,
               "conv");
    }
    calls[2] = k_cuda_conv2d_chan_last_calls();
    /* NCHW: x in the forward and the weight grad (c % 8), dy (the input grad's copy) */
    CHECKF(calls[1] - calls[0] == (unsigned long)(xn ? 3 : 1) && calls[2] == calls[1], "c=%d k=%d: %lu, then %lu permutes (NCHW, NHWC)", c, k,
           calls[1] - calls[0], calls[2] - calls[1]);
    CHECKF(perm_diff(n, k, pq, ye, o[0][0], o[1][0]) == 0, "type %d c=%d k=%d %dx%d st=%d y16 %d: NHWC y differs", t, c,
           k, r, r, st, y16);
    CHECKF(perm_diff(n, xn ? c : 1, xn ? hw : c * hw, 4, o[0][1], o[1][1]) == 0, "type %d c=%d k=%d %dx%d st=%d: NHWC dx differs", t, c, k, r,
           r, st);
    CHECKF(perm_diff(1, 1, (int)nw, 4, o[0][2], o[1][2]) == 0 && perm_diff(1, 1, k, 4, o[0][3], o[1][3]) == 0,
           "type %d c=%d k=%d %dx%d st=%d: dw / db from NHWC differ", t, c, k, r, r, st);
    /* and the least that serves: the backward writes its last bytes (dy's copy ends it) */
    unsigned char tail[16], ff[16];
    memset(ff, 0xff, sizeof ff);
    g_down(tail, (char *)wsh + wsn - 16, 16);
    CHECKF(memcmp(tail, ff, 16) != 0, "c=%d k=%d: the workspace's last 16 bytes unused", c, k);
    if (!xn) { /* the stem on the data: no dx, and (K_CUDA_MM_NODX) no room for dy's copy */
        int md = mn | K_CUDA_MM_NODX;
        size_t wsd = k_cuda_conv2d_workspace_mm(md, &sh);
        CHECKF(wsd + ((size_t)2 * ny + 15) / 16 * 16 <= wsn, "c=%d: %zu workspace bytes without dx, %zu with", c, wsd,
               wsn);
        void *wd = g_dev(wsd), *g2 = g_dev(nw * 4), *gb = g_dev((size_t)k * 4);
        g_need(k_cuda_conv2d_bwd_mm(md, &sh, x, w, blk, dyh, NULL, g2, gb, wd, NULL) == 0, "conv without dx");
        CHECKF(perm_diff(1, 1, (int)nw, 4, o[1][2], g2) == 0 && perm_diff(1, 1, k, 4, o[1][3], gb) == 0,
               "c=%d: dw / db without dx differ", c);
        CHECK(k_cuda_conv2d_bwd_mm(md, &sh, x, w, blk, dyh, o[1][1], g2, gb, wd, NULL) == -1 &&
              strstr(port_cuda_errmsg(), "K_CUDA_MM_NODX") != NULL);
        port_cuda_clear_error();
        port_dev_free(wd), port_dev_free(g2), port_dev_free(gb);
    }
    void *ptrs[] = {x, xh, w, b, dy, dyh, blk, ws, wsh};
    for (size_t i = 0; i < sizeof ptrs / sizeof ptrs[0]; i++) port_dev_free(ptrs[i]);
    for (int v = 0; v < 2; v++)
        for (int i = 0; i < 4; i++) port_dev_free(o[v][i]);
    free(hwt), free(hb), free(dyf), free(dyp);
}

/* ResNet's shapes in small: 3x3 same, 3x3 stride 2, the 1x1 stride-2 downsample, the
 * stem (c = 3, its y only); y fp32 and 16-bit. Where the products cannot read channels-last tensors: refused, named. */
TEST(gpu_nhwc_conv_bitwise_equal_to_nchw_copies)
{
    g_init();
    for (int t = K_CUDA_MM_BF16; t <= K_CUDA_MM_F16; t++)
        for (int y16 = 0; y16 < 2; y16++) {
            conv_case(t, 2, 16, 7, 24, 3, 1, 1, y16, 1);
            conv_case(t, 3, 8, 9, 16, 3, 2, 1, y16, 1);
            conv_case(t, 2, 24, 6, 40, 1, 2, 0, y16, 0); /* fp32 x: rounded into the workspace, unpermuted */
            conv_case(t, 2, 3, 9, 16, 3, 2, 1, y16, 0);  /* the stem: NCHW image in, y channels last */
        }
    k_conv_shape sh = {.n = 1, .c = 5, .h = 6, .w = 6, .k = 8, .r = 3, .s = 3, .stride = 1, .pad = 1};
    k_conv_shape_init(&sh);
    int mm = K_CUDA_MM_BF16 | K_CUDA_MM_X16 | K_CUDA_MM_XNHWC;
    void *x = g_dev(2 * 180), *w = g_dev(4 * 360), *y = g_dev(4 * 288), *ws = g_dev(k_cuda_conv2d_workspace_mm(mm, &sh));
    CHECK(k_cuda_conv2d_fwd_mm(mm, &sh, x, w, NULL, NULL, y, ws, NULL) == -1 &&
          strstr(port_cuda_errmsg(), "channels-last") != NULL);
    port_cuda_clear_error();
    CHECK(k_cuda_conv2d_fwd_mm(K_CUDA_MM_BF16 | K_CUDA_MM_YNHWC, &sh, x, w, NULL, NULL, y, NULL, NULL) == -1);
    port_cuda_clear_error();
    port_dev_free(x), port_dev_free(w), port_dev_free(y), port_dev_free(ws);
}
