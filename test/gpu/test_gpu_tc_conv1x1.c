/* 1x1, stride-1, unpadded convs on the NHWC copies (ResNet-50's bottlenecks) as plain
 * 16-bit products (k_cuda_conv.cu's plain_1x1): y, dx, dw, db bitwise equal to the
 * geometry loaders' (k_cuda_conv2d_set_1x1(0)), on mma.sync, wg_gemm and TMA's wt_gemm,
 * x 16-bit channels last with the weight block (the device graph's --amp) and fp32 NCHW
 * x (the call's own copies). On the executor the TMA copies are counted: the plain
 * products took wt_gemm, the geometry ones and other convs did not. And the device
 * graph: ResNet-50's bottlenecks train to the same losses, bit for bit, either way. */
#include "test/gpu/g.h"
#include "nn/graph_cuda.h"
#include "nn/models/models.h"
#include "ports/cuda/port_cuda.h"
#include "test/gpu/gpu_models.h"
#include "test/t_data.h"
#include <limits.h>
#include <math.h>

#include "kernels/cuda/k_cuda_probe.h"
int k_cuda_conv2d_set_im2col(int on); /* kernels/cuda/k_cuda_conv.cu */
int k_cuda_tma_set_fill(int tiles); /* kernels/cuda/k_cuda_tc_tma.cuh */

/* wgmma 0 (mma.sync), 1 (wg_gemm) or 2 (TMA's wt_gemm). */
static void path_set(int p)
{
    char why[300];
    if (!p) {
        g_wgmma_off();
        return;
    }
    setenv("DDPRT_WGMMA", "1", 1);
    setenv("DDPRT_TMA", p == 2 ? "1" : "0", 1);
    CHECKF(k_cuda_wgmma_setup(why, sizeof why) == 1 && k_cuda_tma_on() == (p == 2), "%s", why);
}

/* wt_gemm's tile N: 128, or 256 (its wide tile, forced by k_cuda_tma_set_fill(1)). */
static int c1_bn = 128;

#if DDPRT_SIMT
/* TMA boxes of an M x N x K product on 128 x c1_bn tiles (64 tiles: none, mma.sync's
 * kernel): a box a 64-deep stage and tile per k-contiguous operand (pa, pb 1), one per
 * 64 of its rows for an M/N-contiguous one; split-K slices are whole stages, so the
 * same count, on 128 x 128 tiles (wt_launch). */
static unsigned long long tma_boxes(int pa, int pb, unsigned long long M, unsigned long long N, unsigned long long K)
{
    /* split over k as k_cuda_gemm_splits does (the conv's workspace): then 128 x 128 tiles */
    long long tiles = (long long)((M + 127) / 128 * ((N + 127) / 128)), sp = 264 / tiles, maxk = (long long)K / 128;
    sp = sp < maxk ? sp : maxk;
    unsigned long long kchunk = sp > 1 ? ((K + sp - 1) / sp + 63) / 64 * 64 : K;
    unsigned long long bn = kchunk < K ? 128 : (unsigned long long)c1_bn;
    if (bn == 128) pb = pb > 1 ? 2 : 1;
    return M < 128 || N < 128 ? 0 : (pa + pb) * ((M + 127) / 128) * ((N + bn - 1) / bn) * ((K + 63) / 64);
}

/* The three products': y = w x (K- and K-contiguous), dx = w^T dy (both K-contiguous),
 * dw = dy^T x (both M/N-contiguous). */
static unsigned long long tma_want(const k_conv_shape *sh)
{
    unsigned long long r = (unsigned long long)sh->n * sh->h * sh->w;
    return tma_boxes(1, 1, sh->k, r, sh->c) + tma_boxes(1, 1, sh->c, r, sh->k) +
           tma_boxes(2, c1_bn / 64, sh->k, sh->c, r);
}
#endif

typedef struct {
    k_conv_shape sh;
    int mm;
    const void *x;
    const float *w, *b, *dy;
    const uint16_t *blk;
    void *ws;
    float *o[4]; /* y dx dw db */
} c1_run;

static void c1_go(c1_run *r)
{
    g_need(k_cuda_conv2d_fwd_mm(r->mm, &r->sh, r->x, r->w, r->blk, r->b, r->o[0], r->ws, NULL) == 0 &&
               k_cuda_conv2d_bwd_mm(r->mm, &r->sh, r->x, r->w, r->blk, r->dy, r->o[1], r->o[2], r->o[3], r->ws, NULL) ==
                   0 &&
               port_dev_sync("conv 1x1") == 0,
           "conv");
}

/* d: n c h w k stride pad; nhwc: x 16-bit channels last with the block (else fp32 NCHW);
 * paths: which of mma.sync / wg_gemm / wt_gemm to run (bits 0..2). */
static void c1_case(int t, const int *d, int nhwc, int paths)
{
    c1_run r = {.sh = {.n = d[0], .c = d[1], .h = d[2], .w = d[3], .k = d[4], .r = 1, .s = 1, .stride = d[5],
                       .pad = d[6]}};
    k_conv_shape_init(&r.sh);
    const k_conv_shape *sh = &r.sh;
    size_t nx = (size_t)sh->n * sh->c * sh->h * sh->w, nw = (size_t)sh->k * sh->c;
    size_t ny = (size_t)sh->n * sh->k * sh->p * sh->q, n[4] = {ny, nx, nw, (size_t)sh->k};
    float *hx = g_rand(nx, 31), *hw = g_rand(nw, 32), *hb = g_rand(sh->k, 33), *hdy = g_rand(ny, 34);
    float *w = g_up(hw, nw * 4), *b = g_up(hb, (size_t)sh->k * 4), *dy = g_up(hdy, ny * 4);
    void *x;
    uint16_t *blk = NULL;
    r.mm = t;
    if (nhwc) { /* the values as [n, h, w, c] 16-bit: the layout the products read either way */
        uint16_t *h16 = malloc(nx * 2);
        for (size_t i = 0; i < nx; i++) h16[i] = g_to16(t, hx[i]);
        x = g_up(h16, nx * 2);
        free(h16);
        blk = g_dev(k_cuda_conv2d_w16_elems(t, sh) * 2);
        g_need(k_cuda_conv2d_w16_prep(t, sh, w, blk, NULL) == 0, "prep");
        r.mm |= K_CUDA_MM_XNHWC | K_CUDA_MM_YNHWC | K_CUDA_MM_X16 | K_CUDA_MM_W16P;
    } else {
        x = g_up(hx, nx * 4);
    }
    r.x = x, r.w = w, r.b = b, r.dy = dy, r.blk = blk;
    r.ws = g_dev(k_cuda_conv2d_workspace_mm(r.mm, sh));
    float *ref[4];
    int fill = k_cuda_tma_set_fill(c1_bn == 256 ? 1 : INT_MAX); /* the tile tma_want counts */
    for (int i = 0; i < 4; i++) r.o[i] = g_dev(n[i] * 4);
    static const char *const nm[] = {"y", "dx", "dw", "db"}, *const pn[] = {"mma.sync", "wg_gemm", "wt_gemm"};
    for (int p = 0; p < 3; p++) {
        if (!(paths >> p & 1)) continue;
        path_set(p);
        k_cuda_conv2d_set_1x1(0); /* the reference: the geometry loaders on this path */
        unsigned long long t0 = g_tma_count();
        c1_go(&r);
        CHECKF(g_tma_count() == t0, "%s: geometry products took %llu TMA copies", pn[p], g_tma_count() - t0);
        for (int i = 0; i < 4; i++) ref[i] = g_result(r.o[i], n[i]);
        k_cuda_conv2d_set_1x1(1);
        t0 = g_tma_count();
        c1_go(&r);
#if DDPRT_SIMT
        unsigned long long want = p == 2 && sh->stride == 1 && sh->pad == 0 ? tma_want(sh) : 0, got = g_tma_count() - t0;
        CHECKF(got == want, "%s n=%d c=%d %dx%d k=%d st=%d pad=%d on %s: %llu TMA copies, expected %llu", g_tn(t),
               sh->n, sh->c, sh->h, sh->w, sh->k, sh->stride, sh->pad, pn[p], got, want);
#endif
        for (int i = 0; i < 4; i++) {
            float *o = g_result(r.o[i], n[i]);
            size_t bad = g_ndiff(o, ref[i], n[i], 4);
            CHECKF(bad == 0, "%s n=%d c=%d %dx%d k=%d st=%d (x %s) on %s: %s differs from the geometry path's in %zu of %zu",
                   g_tn(t), sh->n, sh->c, sh->h, sh->w, sh->k, sh->stride, nhwc ? "NHWC 16-bit" : "NCHW fp32", pn[p],
                   nm[i], bad, n[i]);
            free(o), free(ref[i]);
        }
    }
    k_cuda_tma_set_fill(fill);
    unsetenv("DDPRT_TMA");
    g_wgmma_off();
    for (int i = 0; i < 4; i++) port_dev_free(r.o[i]);
    port_dev_free(x), port_dev_free(w), port_dev_free(b), port_dev_free(dy), port_dev_free(r.ws);
    if (blk) port_dev_free(blk);
    free(hx), free(hw), free(hb), free(hdy);
}

/* Rows n*h*w = 286 (not a multiple of 128: edge tiles), c = 136 and k = 200 (in 8s, not
 * 64s: an edge stage and tile): every product on 128 tiles, dw split over k in two.
 * wt_gemm against the geometry's wg_gemm on both x layouts and types, on its 128 x 128
 * and 128 x 256 tiles; wg_gemm and mma.sync once each. */
TEST(gpu_tc_conv1x1_plain_products_bitwise)
{
    if (!g_sm90()) return;
    static const int d[7] = {2, 136, 11, 13, 200, 1, 0};
    c1_case(K_CUDA_MM_BF16, d, 1, 4);
    c1_case(K_CUDA_MM_F16, d, 1, 4);
    c1_case(K_CUDA_MM_BF16, d, 0, 4);
    c1_case(K_CUDA_MM_F16, d, 1, 2);
    c1_case(K_CUDA_MM_BF16, d, 0, 1);
    c1_bn = 256; /* wt_gemm's 128 x 256 tile (producer warpgroup, setmaxnreg) */
    c1_case(K_CUDA_MM_BF16, d, 1, 4);
    c1_case(K_CUDA_MM_F16, d, 0, 4);
    c1_bn = 128;
}

/* Small: the 64 tiles (mma.sync's two-array kernel) on both types; and convs the plain
 * products must leave alone (stride 2, padding): no TMA, the same bits. */
TEST(gpu_tc_conv1x1_small_and_others)
{
    if (!g_sm90()) return;
    static const int small[7] = {3, 24, 5, 7, 40, 1, 0}, st2[7] = {2, 136, 18, 18, 136, 2, 0},
                     pad[7] = {1, 16, 6, 6, 24, 1, 1};
    c1_case(K_CUDA_MM_BF16, small, 1, 7);
    c1_case(K_CUDA_MM_F16, small, 0, 7);
    c1_case(K_CUDA_MM_BF16, st2, 1, 4);
    c1_case(K_CUDA_MM_BF16, pad, 1, 4);
}

/* ---- the device graph: two ResNet-50 bottlenecks (1x1 -> 3x3 -> 1x1, a 1x1 projection)
 * trained with --amp bf16, 16-bit channels-last activations and the weights' blocks, as
 * the trainer sets them: 1x1 products plain or not, the same losses bit for bit. */
static const char bneck_net[] = "[conv2d] name=conv1 filters=16 size=3 pad=1 bias=0 init=kaiming\n"
                                "[batchnorm] name=bn1\n[relu]\n"
                                "[bottleneck] name=layer1.0 filters=128\n[bottleneck] name=layer1.1 filters=128\n"
                                "[avgpool]\n[flatten]\n[linear] name=fc out=classes\n";


/* Three steps on the device; the losses in l, TMA copies in *tma (executor). */
static void bneck_train(const char *path, int plain, double *l, unsigned long long *tma)
{
    int was = k_cuda_conv2d_set_1x1(plain), wi = k_cuda_conv2d_set_im2col(0); /* the 3x3s' TMA: its own test */
    int k, wg;
    unsigned long long t0 = g_tma_count();
    g_need(gm_train_amp16(path, l, &k, &wg) == 0, "train");
    *tma = g_tma_count() - t0;
    CHECKF(k > 0 && wg, "%d outputs channels last, wgmma %d", k, wg);
    k_cuda_conv2d_set_1x1(was);
    k_cuda_conv2d_set_im2col(wi);
}

TEST(gpu_tc_conv1x1_bottleneck_trains_bitwise)
{
    if (!g_sm90()) return;
    static char path[600];
    const char *dir = t_tmpdir("gpuc1x1");
    t_write_file(dir, "bneck.cfg", bneck_net, sizeof bneck_net - 1, 0);
    snprintf(path, sizeof path, "%s/bneck.cfg", dir);
    setenv("DDPRT_WGMMA", "1", 1);
    setenv("DDPRT_TMA", "1", 1);
    int fill = k_cuda_tma_set_fill(INT_MAX);
    double on[3], off[3];
    unsigned long long ton, toff;
    bneck_train(path, 1, on, &ton);
    bneck_train(path, 0, off, &toff);
    k_cuda_tma_set_fill(fill);
    unsetenv("DDPRT_TMA");
    g_wgmma_off();
    for (int i = 0; i < 3; i++)
        CHECKF(memcmp(&on[i], &off[i], sizeof on[i]) == 0 && isfinite(on[i]),
               "step %d: loss %.17g with the plain 1x1 products, %.17g without", i, on[i], off[i]);
#if DDPRT_SIMT
    /* the 128-wide 1x1 products (the expansions, the projection, the second block's
     * reduction's input grad) on wt_gemm; nothing else of this net is a plain pair */
    CHECKF(ton > 0 && toff == 0, "TMA copies: %llu with the plain 1x1 products, %llu without", ton, toff);
#else
    (void)ton, (void)toff;
#endif
}
