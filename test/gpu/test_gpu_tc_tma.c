/* wt_gemm, the sm_90 GEMM fed by TMA (kernels/cuda/k_cuda_tc_tma.cuh), through
 * k_cuda_tc_gemm_sm90 with DDPRT_TMA=1: against the CPU at the bf16 / f16 bound
 * (test_gpu_tc.c's: (k + 2) 2^-23 sum |a b|), and bit for bit against wg_gemm (the same
 * k16 steps in the same order), on shapes that are not multiples of the 128 tile or the
 * 64-deep stage, K under one stage, and K over the ring of stages more than once. On the
 * executor the TMA copies are counted: the path was taken, two boxes a stage and tile. */
#include "test/gpu/g.h"
#include "rt/half.h"
#include <limits.h>
#include <math.h>
#include <string.h>

int k_cuda_tma_fill(void);               /* kernels/cuda/k_cuda_tc_tma.cuh */
int k_cuda_tma_set_fill(int tiles);

/* wgmma on, TMA as asked (DDPRT_TMA=1 or 0): the decision must follow. */
static void tma_set(int on)
{
    char why[300];
    setenv("DDPRT_WGMMA", "1", 1);
    setenv("DDPRT_TMA", on ? "1" : "0", 1);
    CHECKF(k_cuda_wgmma_setup(why, sizeof why) == 1 && k_cuda_tma_on() == on, "%s", why);
}

static void tma_reset(void)
{
    unsetenv("DDPRT_TMA");
    g_wgmma_off();
}


/* C = A B of A (m x k) and B (k x n), each k-contiguous (akf / bkf: [m][k], [n][k]) or
 * M/N-contiguous ([k][m], [k][n]), rows rounded up to 8 elements, pad more, on wt_gemm
 * (its 128 x bn tile: 256 forced; 128, or 64 where n <= 64, wt_tile_n's own choice) and
 * on wg_gemm: both at the bound, and the same bits. */
static void tma_case2(int type, int m, int n, int k, int pad, int bias, int relu, int bn, int akf, int bkf)
{
    if (bn != 256) bn = n <= 64 ? 64 : 128;
    int fill = k_cuda_tma_set_fill(bn == 256 ? 1 : INT_MAX);
    /* rows 16-byte aligned: TMA's (and wg_gemm's) constraint */
    int lda = ((akf ? k : m) + 7) / 8 * 8 + pad, ldb = ((bkf ? k : n) + 7) / 8 * 8 + pad;
    size_t na = (size_t)(akf ? m : k) * lda, nb = (size_t)(bkf ? n : k) * ldb, nc = (size_t)m * n;
    uint16_t *ha = malloc(na * 2), *hb = malloc(nb * 2);
    float *fa = g_rand(na, 21), *fb = g_rand(nb, 22), *hbias = g_rand(n, 23), *ref = malloc(nc * 4);
    double *mag = malloc(nc * sizeof(double));
    for (size_t i = 0; i < na; i++) ha[i] = g_to16(type, fa[i]);
    for (size_t i = 0; i < nb; i++) hb[i] = g_to16(type, fb[i]);
    g_ref_gemm16(type, ha, lda, akf, hb, ldb, bkf, m, n, k, bias ? hbias : NULL, relu, ref, mag);
    uint16_t *ga = g_up(ha, na * 2), *gb = g_up(hb, nb * 2);
    float *gbias = bias ? g_up(hbias, n * 4) : NULL, *gc = g_dev(nc * 4), *c[2];
    k_tc_gemm g = {.type = type, .m = m, .n = n, .k = k, .a = ga, .b = gb, .lda = lda, .ldb = ldb, .a_kfast = akf,
                   .b_kfast = bkf, .c = gc, .ldc = n, .relu = relu, .bias = gbias};
    for (int on = 1; on >= 0; on--) {
        tma_set(on);
#if DDPRT_SIMT
        unsigned long long t0 = g_tma_count();
#endif
        g_need(k_cuda_tc_gemm(&g, NULL) == 0 && port_dev_sync("tc gemm") == 0, "tc gemm");
#if DDPRT_SIMT
        /* the path taken: a box a stage and tile for a k-contiguous operand, one per 64 of its
         * rows for an M/N-contiguous one; none on wg_gemm */
        unsigned long long per = (akf ? 1 : 2) + (bkf ? 1 : bn / 64);
        unsigned long long want = on ? per * ((m + 127) / 128) * ((n + bn - 1) / bn) * ((k + 63) / 64) : 0;
        CHECKF(g_tma_count() - t0 == want, "m=%d n=%d k=%d tile %d TMA %d: %llu TMA copies, expected %llu", m, n, k, bn,
               on, g_tma_count() - t0, want);
#endif
        c[on] = g_result(gc, nc);
    }
    size_t bad = 0, first = 0, differ = 0, firstd = 0;
    for (size_t i = 0; i < nc; i++) {
        double e = fabs((double)c[1][i] - ref[i]), tol = (k + 2) * 0x1p-23 * mag[i] + 1e-30;
        if (!(e <= tol) && !bad++) first = i;
        if (memcmp(&c[1][i], &c[0][i], 4) && !differ++) firstd = i;
    }
    const char *ty = type == K_CUDA_MM_BF16 ? "bf16" : "f16";
    k_cuda_tma_set_fill(fill);
    CHECKF(!bad, "%s m=%d n=%d k=%d pad %d tile %d A %c B %c: wt_gemm %zu of %zu outside the bound, first [%zu][%zu] = %.9g, reference "
           "%.9g", ty, m, n, k, pad, bn, akf ? 'K' : 'M', bkf ? 'K' : 'N', bad, nc, first / n, first % n, c[1][first], ref[first]);
    CHECKF(!differ, "%s m=%d n=%d k=%d pad %d tile %d A %c B %c: wt_gemm and wg_gemm differ in %zu of %zu, first "
           "[%zu][%zu]: %.9g vs %.9g", ty, m, n, k, pad, bn, akf ? 'K' : 'M', bkf ? 'K' : 'N', differ, nc, firstd / n, firstd % n, c[1][firstd], c[0][firstd]);
    port_dev_free(ga), port_dev_free(gb), port_dev_free(gc);
    if (gbias) port_dev_free(gbias);
    free(ha), free(hb), free(fa), free(fb), free(hbias), free(ref), free(mag), free(c[0]), free(c[1]);
}

static void tma_case(int type, int m, int n, int k, int pad, int bias, int relu, int bn)
{
    tma_case2(type, m, n, k, pad, bias, relu, bn, 1, 1);
}

TEST(gpu_tc_tma_gemm_odd_shapes)
{
    if (!g_sm90()) return;
    /* one element; K under one stage; edges in m, n, k; K = 4 stages exactly; K past the
     * ring of 4 stages twice (10 slices) */
    static const int shapes[][3] = {{1, 1, 1}, {17, 9, 23}, {70, 130, 45}, {130, 200, 256}, {129, 136, 600}};
    for (int type = K_CUDA_MM_BF16; type <= K_CUDA_MM_F16; type++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            const int *d = shapes[s];
            if (type == K_CUDA_MM_F16 && s == 4) continue; /* (the long ring once is enough) */
            tma_case(type, d[0], d[1], d[2], 0, 0, 0, 128);
        }
    tma_case(K_CUDA_MM_BF16, 70, 130, 45, 8, 1, 1, 128); /* padded rows, the bias + ReLU epilogue */
    tma_reset();
}

/* The 128 x 256 tile (producer warpgroup, setmaxnreg, m64n256k16; forced here: products
 * this small take 128 x 128): N under one tile, N past one 256 tile with an edge tile,
 * K past the ring of stages, both types, the epilogue. */
TEST(gpu_tc_tma_gemm_wide_tile)
{
    if (!g_sm90()) return;
    static const int shapes[][3] = {{17, 9, 23}, {130, 300, 136}, {70, 520, 330}};
    for (int type = K_CUDA_MM_BF16; type <= K_CUDA_MM_F16; type++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            const int *d = shapes[s];
            if (type == K_CUDA_MM_F16 && s == 2) continue;
            tma_case(type, d[0], d[1], d[2], 0, 0, 0, 256);
        }
    tma_case(K_CUDA_MM_F16, 200, 264, 72, 8, 1, 1, 256);
    /* the rule: wide where the wide tiles still fill the GPU */
    int fill = k_cuda_tma_set_fill(0);
    CHECK(k_cuda_tma_fill() == 132);
    k_cuda_tma_set_fill(fill);
    tma_reset();
}

/* The 128 x 64 tile (m64n64k16; n <= 64: ResNet's 64-channel convs, a classifier's few
 * columns): n exactly one tile, n under it with the K ring passed, both types, the
 * padded rows and the bias + ReLU epilogue. */
TEST(gpu_tc_tma_gemm_narrow_tile)
{
    if (!g_sm90()) return;
    tma_case(K_CUDA_MM_BF16, 130, 64, 136, 0, 0, 0, 64);
    tma_case(K_CUDA_MM_F16, 200, 40, 330, 0, 0, 0, 64);
    tma_case(K_CUDA_MM_BF16, 70, 33, 45, 8, 1, 1, 64);
    tma_reset();
}

/* linear's forward on two 16-bit arrays (x and the weights' 16-bit copy) takes wt_gemm
 * when TMA is on: the same bits as wg_gemm's; on the executor, its TMA copies counted. */
TEST(gpu_tc_tma_linear_forward)
{
    if (!g_sm90()) return;
    enum { N = 130, IN = 72, OUT = 136 };
    int t = K_CUDA_MM_BF16;
    float *hx = g_rand((size_t)N * IN, 31), *hw = g_rand((size_t)IN * OUT, 32), *hb = g_rand(OUT, 33);
    float *x = g_up(hx, (size_t)N * IN * 4), *w = g_up(hw, (size_t)IN * OUT * 4), *b = g_up(hb, OUT * 4);
    uint16_t *x16 = g_dev((size_t)N * IN * 2), *w16 = g_dev((size_t)IN * OUT * 2);
    g_need(k_cuda_f32_to_bf16((size_t)N * IN, x, x16, NULL) == 0 && k_cuda_f32_to_bf16((size_t)IN * OUT, w, w16, NULL) == 0,
           "to bf16");
    float *y[2];
    for (int on = 1; on >= 0; on--) {
        tma_set(on);
        float *gy = g_dev((size_t)N * OUT * 4);
#if DDPRT_SIMT
        unsigned long long t0 = g_tma_count();
#endif
        g_need(k_cuda_linear_fwd_mm(t | K_CUDA_MM_X16, N, IN, OUT, (const float *)x16, w, w16, b, gy, NULL, NULL) == 0 &&
                   port_dev_sync("linear") == 0, "linear fwd");
#if DDPRT_SIMT
        CHECKF(on ? g_tma_count() > t0 : g_tma_count() == t0, "TMA %d: %llu TMA copies", on, g_tma_count() - t0);
#endif
        y[on] = g_result(gy, (size_t)N * OUT);
        port_dev_free(gy);
    }
    CHECK(!memcmp(y[0], y[1], (size_t)N * OUT * 4));
    tma_reset();
    port_dev_free(x), port_dev_free(w), port_dev_free(b), port_dev_free(x16), port_dev_free(w16);
    free(hx), free(hw), free(hb), free(y[0]), free(y[1]);
}

/* The probe (DDPRT_TMA=auto's start-up check) agrees on a working kernel. */
TEST(gpu_tc_tma_probe_agrees)
{
    if (!g_sm90()) return;
    char why[300];
    tma_set(0);
    CHECKF(k_cuda_tma_probe(why, sizeof why) == 1, "%s", why);
    CHECK(!k_cuda_tma_on()); /* the probe leaves the decision as it was */
    tma_reset();
}

/* M/N-contiguous operands by TMA (64-row boxes into wgmma's M/N-major tile): all four
 * layout pairs on odd shapes, both tiles, bit for bit against wg_gemm's M/N-major path
 * (k_cuda_tc_gemm takes wgmma for them from M and N 128 on: k_cuda_gemm_tile). */
TEST(gpu_tc_tma_gemm_mn_major)
{
    if (!g_sm90()) return;
    static const int shapes[][3] = {{130, 136, 45}, {130, 300, 136}};
    for (int akf = 0; akf < 2; akf++)
        for (int bkf = 0; bkf < 2; bkf++) {
            if (akf && bkf) continue; /* (the odd-shapes test's) */
            for (size_t s = 0; s < 2; s++)
                for (int bn = 128; bn <= 256; bn += 128)
                    tma_case2(K_CUDA_MM_BF16, shapes[s][0], shapes[s][1], shapes[s][2], 0, 0, 0, bn, akf, bkf);
        }
    tma_case2(K_CUDA_MM_F16, 129, 200, 23, 8, 1, 1, 256, 0, 0); /* f16, padded rows, the epilogue */
    tma_reset();
}

/* TMA copies of one product on 128 x 128 tiles: a box a stage and tile for a k-contiguous
 * operand, two (64 rows each) for an M/N-contiguous one. Split-K chunks are whole stages
 * but the last, so the count is the unsplit product's. */
#if DDPRT_SIMT
static unsigned long long tma_boxes(int m, int n, int k, int akf, int bkf)
{
    return (unsigned long long)((akf ? 1 : 2) + (bkf ? 1 : 2)) * ((m + 127) / 128) * ((n + 127) / 128) * ((k + 63) / 64);
}
#endif

/* Split-K by TMA: linear's and Conv1D's backward on the 16-bit dy copy, whose dW product
 * (K = the rows, n = 1024 / 600) is split into 64-deep-multiple chunks, each wt_gemm's
 * blockIdx.z to its partial. TMA on and off (wg_gemm's partials) give the same bits in dx,
 * dw and db; with it on, every box of both products is counted. */
TEST(gpu_tc_tma_split_k_bitwise_equal_wg_gemm)
{
    if (!g_sm90()) return;
    static const int cases[][4] = {{K_CUDA_MM_BF16, 0, 1024, 136}, {K_CUDA_MM_F16, 1, 600, 128}};
    int fill = k_cuda_tma_set_fill(INT_MAX); /* 128 x 128 tiles: tma_boxes' count */
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int t = cases[c][0], hf = cases[c][1], n = cases[c][2], in = cases[c][3], out = 136;
        size_t nx = (size_t)n * in, nw = (size_t)in * out, ny = (size_t)n * out, cnt[3] = {nx, nw, (size_t)out};
        float *hx = g_rand(nx, 191), *hw = g_rand(nw, 192), *hdy = g_rand(ny, 193);
        float *x = g_up(hx, nx * 4), *w = g_up(hw, nw * 4), *dy = g_up(hdy, ny * 4), *o[2][3];
        uint16_t *w16 = g_dev16(t, w, nw), *x16 = g_dev16(t, x, nx);
        size_t wsb = hf ? k_cuda_conv1d_hf_workspace_mm(t, n, in, out) : k_cuda_linear_workspace_mm(t, n, in, out);
        void *ws = g_dev(wsb + 64);
        int mm = t | K_CUDA_MM_X16;
        for (int on = 1; on >= 0; on--) {
            tma_set(on);
            for (int i = 0; i < 3; i++) o[on][i] = g_dev(cnt[i] * 4);
#if DDPRT_SIMT
            unsigned long long t0 = g_tma_count();
#endif
            g_need((hf ? k_cuda_conv1d_hf_bwd_mm(mm, n, in, out, (const float *)x16, w, w16, dy, o[on][0], o[on][1],
                                                 o[on][2], ws, NULL)
                       : k_cuda_linear_bwd_mm(mm, n, in, out, (const float *)x16, w, w16, dy, o[on][0], o[on][1],
                                              o[on][2], ws, NULL)) == 0,
                   "bwd");
#if DDPRT_SIMT
            /* dX = dy16 (K-major) x w16 (linear: N-major, Conv1D: K-major); dW: linear's
             * dy16^T x x16 ([out x in]), Conv1D's x16^T x dy16 ([in x out]), all M/N-major */
            unsigned long long want = !on ? 0
                                      : tma_boxes(n, in, out, 1, hf) +
                                            (hf ? tma_boxes(in, out, n, 0, 0) : tma_boxes(out, in, n, 0, 0));
            CHECKF(g_tma_count() - t0 == want, "%s %s n=%d TMA %d: %llu TMA copies, expected %llu", g_tn(t),
                   hf ? "conv1d_hf" : "linear", n, on, g_tma_count() - t0, want);
#endif
        }
        static const char *const nm[] = {"dx", "dw", "db"};
        for (int i = 0; i < 3; i++) {
            CHECKF(g_ndiff_dev(o[0][i], o[1][i], cnt[i]) == 0, "%s %s n=%d: %s on TMA differs from wg_gemm's", g_tn(t),
                   hf ? "conv1d_hf" : "linear", n, nm[i]);
            port_dev_free(o[0][i]), port_dev_free(o[1][i]);
        }
        port_dev_free(x), port_dev_free(w), port_dev_free(dy), port_dev_free(w16), port_dev_free(x16);
        port_dev_free(ws);
        free(hx), free(hw), free(hdy);
    }
    k_cuda_tma_set_fill(fill);
    tma_reset();
}
