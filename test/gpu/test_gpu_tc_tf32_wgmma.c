/* TF32 products (--matmul-precision high) on sm_90a's wgmma: wgtf_gemm
 * (kernels/cuda/k_cuda_tc_wgtf.cuh, m64n128k8.tf32) takes the 128-tile products where
 * wgmma is on, mma.sync's tf_gemm the rest. The same tf32 operands (cvt.rna's bits) and
 * the same k8 steps in the same order, split-K's included: linear forward / dX / dW and
 * fp32 NCHW 3x3 convs forward and backward bitwise equal to wgmma off on the executor
 * (g_ndiff_tc's bound on a GPU), odd M, N, K, a split weight gradient; the executor counts
 * the tf32 wgmma ops (the products really ran there, the 64-tile ones not). The start-up
 * probe agrees and leaves the path on. With TMA on, linear's forward (two k-contiguous
 * fp32 arrays) runs on wt_gemm<TF32> (k_cuda_tc_tma.cuh): bitwise tf_gemm's on tf32-exact
 * inputs, truncating the low 13 bits of others as wgmma does. */
#include "test/gpu/g.h"
#include "kernels/cuda/k_cuda_probe.h"
#include <limits.h>

#if G_SIMT
unsigned long long simt_wgmma_tf32_count(void); /* test/simt/simt_tc.cc */
#endif
/* tf32 wgmma ops so far, once the launches have run (0 on a GPU: not counted there) */
static unsigned long long tf_ops(void)
{
#if G_SIMT
    g_need(port_stream_sync(NULL, "tf32 wgmma count") == 0, "sync");
    return simt_wgmma_tf32_count();
#else
    return 0;
#endif
}

/* Products ran on wgmma (ops counted) iff want: one of them M x N with both at least the
 * 128 tile. */
static void ran(unsigned long long ops, int want, const char *what)
{
    CHECKF(!G_SIMT || (ops > 0) == want, "%s: %llu tf32 wgmma ops, want %s", what, ops, want ? "some" : "none");
}
static int big(int M, int N) { return M >= 128 && N >= 128; }

/* n x in -> out at TF32, forward then backward, wgmma off (tf_gemm) then on. */
static void linear_case(int n, int in, int out)
{
    size_t nx = (size_t)n * in, nw = (size_t)in * out, ny = (size_t)n * out, cnt[4] = {ny, nx, nw, (size_t)out};
    float *hx = g_rand(nx, 301), *hw = g_rand(nw, 302), *hb = g_rand(out, 303), *hdy = g_rand(ny, 304);
    float *x = g_up(hx, nx * 4), *w = g_up(hw, nw * 4), *b = g_up(hb, out * 4), *dy = g_up(hdy, ny * 4);
    void *ws = g_dev(k_cuda_linear_workspace_mm(K_CUDA_MM_TF32, n, in, out) + 16);
    float *o[2][4];
    static const char *const nm[] = {"y", "dx", "dw", "db"};
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < 4; i++) o[pass][i] = g_dev(cnt[i] * 4);
        if (pass) g_wgmma_on();
        unsigned long long t0 = tf_ops();
        g_need(k_cuda_linear_fwd_mm(K_CUDA_MM_TF32, n, in, out, x, w, NULL, b, o[pass][0], ws, NULL) == 0, "fwd");
        unsigned long long t1 = tf_ops();
        g_need(k_cuda_linear_bwd_mm(K_CUDA_MM_TF32, n, in, out, x, w, NULL, dy, o[pass][1], o[pass][2], o[pass][3],
                                    ws, NULL) == 0, "bwd");
        unsigned long long t2 = tf_ops();
        if (pass) {
            ran(t1 - t0, big(n, out), "linear forward");
            ran(t2 - t1, big(n, in) || big(out, in), "linear backward (dx n x in, dw out x in)");
            g_wgmma_off();
        } else {
            CHECKF(t2 == t0, "wgmma off: %llu tf32 wgmma ops", t2 - t0);
        }
    }
    for (int i = 0; i < 4; i++) {
        float *a = g_result(o[1][i], cnt[i]), *r = g_result(o[0][i], cnt[i]);
        size_t d = g_ndiff_tc(a, r, cnt[i]);
        CHECKF(d == 0, "linear %d x %d -> %d: %s: %zu of %zu values differ from mma.sync's", n, in, out, nm[i], d,
               cnt[i]);
        free(a), free(r);
        port_dev_free(o[0][i]), port_dev_free(o[1][i]);
    }
    port_dev_free(x), port_dev_free(w), port_dev_free(b), port_dev_free(dy), port_dev_free(ws);
    free(hx), free(hw), free(hb), free(hdy);
}

/* Odd M, N, K (edge tiles, k not a slice's multiple), and n 300: dW split over k in 2. */
TEST(gpu_tc_tf32_wgmma_linear_bitwise)
{
    if (!g_sm90()) return;
    linear_case(137, 131, 129);
    linear_case(300, 129, 130);
    linear_case(40, 136, 130); /* y, dx on the 64 tile (tf_gemm); dw on wgmma */
}

/* fp32 NCHW 3x3 / padding 1 convs, wgmma off then on: y (M = k, N = pixels, K = 9c), dx
 * (M = c, N = pixels, K = 9k), dw (M = k, N = 9c, K = pixels, the im2col gathers). */
static void conv_case(int n, int c, int k, int h, int wd, int stride)
{
    k_conv_shape sh;
    memset(&sh, 0, sizeof sh);
    sh.n = n, sh.c = c, sh.h = h, sh.w = wd, sh.k = k, sh.r = 3, sh.s = 3, sh.stride = stride, sh.pad = 1;
    k_conv_shape_init(&sh);
    size_t nx = (size_t)n * c * h * wd, nw = (size_t)k * c * 9, ny = (size_t)n * k * sh.p * sh.q;
    size_t cnt[4] = {ny, nx, nw, (size_t)k};
    float *hx = g_rand(nx, 311), *hw = g_rand(nw, 312), *hb = g_rand(k, 313), *hdy = g_rand(ny, 314);
    float *x = g_up(hx, nx * 4), *w = g_up(hw, nw * 4), *b = g_up(hb, k * 4), *dy = g_up(hdy, ny * 4);
    void *ws = g_dev(k_cuda_conv2d_workspace_mm(K_CUDA_MM_TF32, &sh) + 16);
    float *o[2][4];
    static const char *const nm[] = {"y", "dx", "dw", "db"};
    const int px = n * sh.p * sh.q;
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < 4; i++) o[pass][i] = g_dev(cnt[i] * 4);
        if (pass) g_wgmma_on();
        unsigned long long t0 = tf_ops();
        g_need(k_cuda_conv2d_fwd_mm(K_CUDA_MM_TF32, &sh, x, w, NULL, b, o[pass][0], ws, NULL) == 0, "conv fwd");
        unsigned long long t1 = tf_ops();
        g_need(k_cuda_conv2d_bwd_mm(K_CUDA_MM_TF32, &sh, x, w, NULL, dy, o[pass][1], o[pass][2], o[pass][3], ws,
                                    NULL) == 0, "conv bwd");
        unsigned long long t2 = tf_ops();
        if (pass) {
            ran(t1 - t0, big(k, px), "conv forward (k x pixels)");
            ran(t2 - t1, big(c, px) || big(k, 9 * c), "conv backward (dx c x pixels, dw k x 9c)");
            g_wgmma_off();
        }
    }
    for (int i = 0; i < 4; i++) {
        float *a = g_result(o[1][i], cnt[i]), *r = g_result(o[0][i], cnt[i]);
        size_t d = g_ndiff_tc(a, r, cnt[i]);
        CHECKF(d == 0, "conv n %d, %d -> %d, %dx%d/%d: %s: %zu of %zu values differ from mma.sync's", n, c, k, h, wd,
               stride, nm[i], d, cnt[i]);
        free(a), free(r);
        port_dev_free(o[0][i]), port_dev_free(o[1][i]);
    }
    port_dev_free(x), port_dev_free(w), port_dev_free(b), port_dev_free(dy), port_dev_free(ws);
    free(hx), free(hw), free(hb), free(hdy);
}

TEST(gpu_tc_tf32_wgmma_conv_bitwise)
{
    if (!g_sm90()) return;
    conv_case(2, 24, 130, 8, 9, 1); /* y and dw on wgmma, dx (24 rows) on tf_gemm */
    conv_case(1, 130, 20, 12, 11, 1); /* dx on wgmma (130 channels x 132 pixels), y and dw (k 20) on tf_gemm */
}

int k_cuda_tma_set_fill(int tiles);      /* kernels/cuda/k_cuda_tc_tma.cuh */
int k_cuda_tma_fill(void);

/* wgmma and TMA on (DDPRT_TMA=1), or both off. */
static void tma(int on)
{
    char why[300];
    if (!on) {
        g_wgmma_off();
        unsetenv("DDPRT_TMA");
        return;
    }
    setenv("DDPRT_WGMMA", "1", 1);
    setenv("DDPRT_TMA", "1", 1);
    CHECKF(k_cuda_wgmma_setup(why, sizeof why) == 1 && k_cuda_tma_on(), "%s", why);
}

/* fp32 values as tf32 holds them (k_tf32's rounding: cvt.rna) */
static void to_tf32(float *v, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &v[i], 4);
        u = (u + 0x1000u) & 0xffffe000u;
        memcpy(&v[i], &u, 4);
    }
}

/* linear at TF32 with TMA on: the forward's x [n][in] and w [out][in] are both
 * k-contiguous fp32, so wt_gemm<TF32> (k_cuda_tc_tma.cuh) runs it where it takes the 128
 * tile; the input grad's too (dy and w transposed into the workspace) where out % 4 == 0;
 * dw stays on wgtf_gemm. On tf32-exact inputs, y, dx, dw and db the same bits as wgmma
 * off (tf_gemm): the same operands, the same k8 steps in the same order. tile: 256 forced
 * (k_cuda_tma_set_fill(1): one block for all tiles), else the rule's. An unsplit forward
 * copies two boxes a stage (32 k) and tile, counted on the executor. */
static void tma_linear_case(int n, int in, int out, int tile)
{
    size_t nx = (size_t)n * in, nw = (size_t)in * out, ny = (size_t)n * out, cnt[4] = {ny, nx, nw, (size_t)out};
    float *hx = g_rand(nx, 321), *hw = g_rand(nw, 322), *hb = g_rand(out, 323), *hdy = g_rand(ny, 324);
    to_tf32(hx, nx), to_tf32(hw, nw), to_tf32(hdy, ny);
    float *x = g_up(hx, nx * 4), *w = g_up(hw, nw * 4), *b = g_up(hb, out * 4), *dy = g_up(hdy, ny * 4), *o[2][4];
    void *ws = g_dev(k_cuda_linear_workspace_mm(K_CUDA_MM_TF32, n, in, out) + 16);
    int fill = k_cuda_tma_set_fill(tile == 256 ? 1 : INT_MAX), bn = tile == 256 ? 256 : 128;
    int fwd = n >= 128 && out >= 128, dxt = n >= 128 && in >= 128 && out % 4 == 0;
    static const char *const nm[] = {"y", "dx", "dw", "db"};
    for (int on = 1; on >= 0; on--) {
        for (int i = 0; i < 4; i++) o[on][i] = g_dev(cnt[i] * 4);
        tma(on);
        unsigned long long b0 = g_tma_count(), t0 = tf_ops();
        g_need(k_cuda_linear_fwd_mm(K_CUDA_MM_TF32, n, in, out, x, w, NULL, b, o[on][0], ws, NULL) == 0, "fwd");
        unsigned long long b1 = g_tma_count(), ops = tf_ops() - t0;
        g_need(k_cuda_linear_bwd_mm(K_CUDA_MM_TF32, n, in, out, x, w, NULL, dy, o[on][1], o[on][2], o[on][3], ws,
                                    NULL) == 0, "bwd");
        unsigned long long fb = b1 - b0, bb = g_tma_count() - b1;
        if (on) {
            int split = in > 1024; /* the cases below: a split forward where so */
            unsigned long long want = fwd ? 2ull * ((n + 127) / 128) * ((out + bn - 1) / bn) * ((in + 31) / 32) : 0;
            CHECKF(!G_SIMT || ((split ? fb >= want : fb == want) && (ops > 0) == fwd && (bb > 0) == dxt),
                   "linear %d x %d -> %d, tile %d: forward %llu TMA boxes (want %s%llu), %llu tf32 wgmma ops; "
                   "backward %llu boxes (want %s)", n, in, out, bn, fb, split ? ">= " : "", want, ops, bb,
                   dxt ? "some" : "none");
        } else {
            CHECKF(fb == 0 && bb == 0 && ops == 0, "wgmma off: %llu + %llu TMA boxes, %llu tf32 ops", fb, bb, ops);
        }
    }
    k_cuda_tma_set_fill(fill);
    for (int i = 0; i < 4; i++) {
        float *a = g_result(o[1][i], cnt[i]), *r = g_result(o[0][i], cnt[i]);
        size_t d = g_ndiff_tc(a, r, cnt[i]);
        CHECKF(d == 0, "linear %d x %d -> %d tile %d: %s: %zu of %zu values differ from mma.sync's", n, in, out, bn,
               nm[i], d, cnt[i]);
        free(a), free(r);
        port_dev_free(o[0][i]), port_dev_free(o[1][i]);
    }
    free(hx), free(hw), free(hb), free(hdy);
    port_dev_free(x), port_dev_free(w), port_dev_free(b), port_dev_free(dy), port_dev_free(ws);
}

/* Edge tiles in m, n and k (k not a stage's multiple, under one stage), the wide tile
 * with one block for all tiles, a split-K forward (in 2056: four tiles, deep k: 11 chunks
 * of 192) and its input grad by TMA (out 132), an input grad alone by TMA (out 68: the
 * forward on the 64 tile), out 129 (w's transpose unaligned: dx on wgtf_gemm). */
TEST(gpu_tc_tf32_tma_linear_bitwise)
{
    if (!g_sm90()) return;
    tma_linear_case(137, 132, 129, 0);
    tma_linear_case(200, 40, 300, 256);
    tma_linear_case(130, 20, 136, 0);
    tma_linear_case(130, 2056, 132, 0);
    tma_linear_case(150, 136, 68, 0);
}

/* The TMA path hands wgmma the fp32 bits and wgmma reads their top 19 (PTX: .tf32
 * truncates the low 13), where tf_gemm rounds (cvt.rna): x 1 + 3 2^-12 (tf32: 1 + 2^-10
 * rounded, 1 truncated) times w 1 over in = 40 gives exactly 40 a value on the TMA path, 40
 * (1 + 2^-10) on tf_gemm; any other value is an unrounded or misplaced operand. */
TEST(gpu_tc_tf32_tma_truncates_as_wgmma)
{
    if (!g_sm90()) return;
    enum { N = 130, IN = 40, OUT = 132 };
    float *hx = malloc(sizeof(float) * N * IN), *hw = malloc(sizeof(float) * IN * OUT);
    for (int i = 0; i < N * IN; i++) hx[i] = 1.0f + 3 * 0x1p-12f;
    for (int i = 0; i < IN * OUT; i++) hw[i] = 1.0f;
    float *x = g_up(hx, sizeof(float) * N * IN), *w = g_up(hw, sizeof(float) * IN * OUT);
    float *y = g_dev(sizeof(float) * N * OUT);
    void *ws = g_dev(k_cuda_linear_workspace_mm(K_CUDA_MM_TF32, N, IN, OUT) + 16);
    for (int on = 1; on >= 0; on--) {
        tma(on);
        g_need(k_cuda_linear_fwd_mm(K_CUDA_MM_TF32, N, IN, OUT, x, w, NULL, NULL, y, ws, NULL) == 0, "fwd");
        float *h = g_result(y, (size_t)N * OUT), want = on ? (float)IN : (float)IN * (1.0f + 0x1p-10f);
        size_t bad = 0;
        for (int i = 0; i < N * OUT; i++) bad += h[i] != want;
        CHECKF(bad == 0, "%s: %zu of %d values are not %.9g (y[0] %.9g)", on ? "TMA (truncates)" : "tf_gemm (rounds)",
               bad, N * OUT, want, h[0]);
        free(h);
    }
    free(hx), free(hw);
    port_dev_free(x), port_dev_free(w), port_dev_free(y), port_dev_free(ws);
}

/* The start-up probe: agrees with mma.sync, says so, leaves the path on, ran on wgmma. */
TEST(gpu_tc_tf32_wgmma_probe_agrees)
{
    if (!g_sm90()) return;
    char why[300];
    g_wgmma_on();
    unsigned long long t0 = tf_ops();
    int rc = k_cuda_tf32_wgmma_probe(why, sizeof why);
    CHECKF(rc == 1 && strstr(why, "the probe agrees with mma.sync"), "tf32 probe: %d %s", rc, why);
    CHECKF(k_cuda_tf32_set_wgmma(1) == 1, "the tf32 probe left wgmma's tf32 products off");
    CHECKF(!G_SIMT || tf_ops() > t0, "the tf32 probe ran no tf32 wgmma op");
    g_wgmma_off();
    /* with TMA on (as on an H100 after its probe): the forward by TMA, the same answer */
    tma(1);
    unsigned long long b0 = g_tma_count();
    rc = k_cuda_tf32_wgmma_probe(why, sizeof why);
    CHECKF(rc == 1 && strstr(why, "the probe agrees with mma.sync"), "tf32 probe, TMA on: %d %s", rc, why);
    CHECKF(k_cuda_tf32_set_wgmma(1) == 1, "the tf32 probe (TMA on) left wgmma's tf32 products off");
    CHECKF(!G_SIMT || g_tma_count() > b0, "the tf32 probe with TMA on copied no TMA box");
    tma(0);
}
