/* conv's 16-bit weight block (k_cuda_conv2d_w16_prep: the device graph makes it once an
 * update): its layouts element by element, and the products that take it (K_CUDA_MM_W16P)
 * bitwise equal to the same products permuting w themselves. Where the block serves
 * every product that reads w, w is NaN: a product that still read it would show. */
#include "test/gpu/g.h"
#include "ports/cuda/port_cuda.h"
#include <math.h>

/* The block as the kernels document it: K x RSC where C % 8 == 0 (else K x CRS), then
 * C x RSK where K % 8 == 0. */
static size_t block_bad(int t, const k_conv_shape *sh, const float *w, const uint16_t *blk)
{
    int C = sh->c, K = sh->k, RS = sh->r * sh->s;
    size_t n = (size_t)K * C * RS, bad = 0;
    for (int k = 0; k < K; k++)
        for (int c = 0; c < C; c++)
            for (int rs = 0; rs < RS; rs++) {
                uint16_t v = g_to16(t, w[((size_t)k * C + c) * RS + rs]);
                size_t a = C % 8 == 0 ? ((size_t)k * RS + rs) * C + c : ((size_t)k * C + c) * RS + rs;
                bad += blk[a] != v;
                if (K % 8 == 0) bad += blk[n + ((size_t)c * RS + rs) * K + k] != v;
            }
    return bad;
}

/* d[9] = n c h w k r s stride pad */
static void wblock_case(int t, const int *d)
{
    k_conv_shape sh = {.n = d[0], .c = d[1], .h = d[2], .w = d[3], .k = d[4], .r = d[5], .s = d[6], .stride = d[7],
                       .pad = d[8]};
    k_conv_shape_init(&sh);
    size_t nx = (size_t)sh.n * sh.c * sh.h * sh.w, nw = (size_t)sh.k * sh.c * sh.r * sh.s;
    size_t ny = (size_t)sh.n * sh.k * sh.p * sh.q, nb = (size_t)sh.k;
    size_t ne = k_cuda_conv2d_w16_elems(t, &sh);
    CHECKF(ne == nw * (sh.k % 8 == 0 ? 2 : 1), "%zu elements planned for %zu weights", ne, nw);
    CHECK(k_cuda_conv2d_w16_elems(K_CUDA_MM_FP32, &sh) == 0 && k_cuda_conv2d_w16_elems(K_CUDA_MM_TF32, &sh) == 0);
    float *hx = g_rand(nx, 91), *hw = g_rand(nw, 92), *hb = g_rand(nb, 93), *hdy = g_rand(ny, 94);
    float *nan = malloc(nw * 4);
    for (size_t i = 0; i < nw; i++) nan[i] = NAN;
    float *x = g_up(hx, nx * 4), *w = g_up(hw, nw * 4), *wn = g_up(nan, nw * 4), *b = g_up(hb, nb * 4),
          *dy = g_up(hdy, ny * 4);
    uint16_t *blk = g_dev(ne * 2 + 16), *hblk = malloc(ne * 2);
    g_need(k_cuda_conv2d_w16_prep(t, &sh, w, blk, NULL) == 0 && port_stream_sync(NULL, "prep") == 0, "prep");
    g_down(hblk, blk, ne * 2);
    size_t bad = block_bad(t, &sh, hw, hblk);
    CHECKF(bad == 0, "%d-type block c=%d k=%d %dx%d: %zu elements not where documented", t, sh.c, sh.k, sh.r, sh.s,
           bad);
    /* w read by nothing where the block serves every product on w: the forward on the NHWC
     * copies (C % 8), the input grad on them (K % 8) or as w^T's rows (1x1) */
    int all = sh.c % 8 == 0 && (sh.k % 8 == 0 || sh.r * sh.s == 1);
    void *ws = g_dev(k_cuda_conv2d_workspace(&sh) + 64);
    /* With the block the workspace holds no copy of w: sized exactly, so a layout that
     * still reserved it writes past the allocation (the executor's canary) */
    size_t wsb = k_cuda_conv2d_workspace_mm(t | K_CUDA_MM_W16P, &sh), whb = (nw * 2 + 15) & ~(size_t)15;
    CHECKF(wsb + (sh.c % 8 == 0 || sh.k % 8 == 0 ? whb : 0) == k_cuda_conv2d_workspace_mm(t, &sh),
           "c=%d k=%d: %zu workspace bytes with the block", sh.c, sh.k, wsb);
    void *wsp = g_dev(wsb);
    float *o[2][4];
    size_t n[4] = {ny, nx, nw, nb};
    for (int v = 0; v < 2; v++) {
        for (int i = 0; i < 4; i++) o[v][i] = g_dev(n[i] * 4);
        int mm = t | (v ? K_CUDA_MM_W16P : 0);
        const float *wv = v && all ? wn : w;
        void *wv_ws = v ? wsp : ws;
        g_need(k_cuda_conv2d_fwd_mm(mm, &sh, x, wv, v ? blk : NULL, b, o[v][0], wv_ws, NULL) == 0 &&
                   k_cuda_conv2d_bwd_mm(mm, &sh, x, wv, v ? blk : NULL, dy, o[v][1], o[v][2], o[v][3], wv_ws, NULL) == 0,
               "conv");
    }
    static const char *const nm[] = {"y", "dx", "dw", "db"};
    for (int i = 0; i < 4; i++) {
        float *p = g_result(o[1][i], n[i]), *q = g_result(o[0][i], n[i]);
        CHECKF(g_ndiff(p, q, n[i], 4) == 0, "%d-type conv c=%d k=%d %dx%d st=%d (w %s): %s with the block differs", t,
               sh.c, sh.k, sh.r, sh.s, sh.stride, all ? "NaN" : "kept", nm[i]);
        free(p), free(q);
    }
    CHECK(k_cuda_conv2d_w16_prep(K_CUDA_MM_FP32, &sh, w, blk, NULL) == -1);
    /* W16P without the block, on a workspace with no room for w's copy: refused */
    CHECK(k_cuda_conv2d_fwd_mm(t | K_CUDA_MM_W16P, &sh, x, w, NULL, b, o[1][0], wsp, NULL) == -1);
    CHECK(k_cuda_conv2d_bwd_mm(t | K_CUDA_MM_W16P, &sh, x, w, NULL, dy, o[1][1], o[1][2], NULL, wsp, NULL) == -1);
    port_cuda_clear_error();
    port_dev_free(wsp);
    for (int v = 0; v < 2; v++)
        for (int i = 0; i < 4; i++) port_dev_free(o[v][i]);
    port_dev_free(x), port_dev_free(w), port_dev_free(wn), port_dev_free(b), port_dev_free(dy), port_dev_free(blk);
    port_dev_free(ws);
    free(hx), free(hw), free(hb), free(hdy), free(nan), free(hblk);
}

/* 3x3 with both channel counts in 8s (w never read), a 1x1 stride-2 downsample, 1x1 with
 * k = 70 (the input grad takes the block's first part as w^T's rows), c = 5 (the forward
 * takes the block's K x CRS part by cp.async where its rows allow, else gathers w). */
TEST(gpu_tc_conv_weight_block_bitwise_equal)
{
    g_init();
    static const int convs[][9] = {{2, 16, 9, 9, 24, 3, 3, 1, 1}, {3, 24, 7, 7, 40, 1, 1, 2, 0},
                                   {2, 8, 11, 11, 70, 1, 1, 1, 0}, {2, 5, 8, 8, 16, 3, 3, 2, 1}};
    for (int t = K_CUDA_MM_BF16; t <= K_CUDA_MM_F16; t++)
        for (size_t i = 0; i < sizeof convs / sizeof convs[0]; i++) wblock_case(t, convs[i]);
}
