/* The tensor-core kernels (mma.sync, ldmatrix, cp.async) against a reference computed
 * here from the same 16-bit operands.
 *
 * The bound: both sides see the same bf16 (f16) operands, whose products are exact in
 * fp32; only the accumulation differs (the tensor cores add in fp32 in an order of their
 * own, the reference in double). So every element must satisfy
 *     |c - ref| <= (k + 2) * 2^-23 * sum_k |a * b|  (+ the bias, added once in fp32),
 * fp32 rounding per addition, which no wrong fragment, tile or pipeline stage passes
 * (those give errors of the order of the values themselves). */
#include "test/gpu/g.h"
#include "rt/half.h"
#include <math.h>


/* One product: A m x k and B k x n in the layouts asked, lda/ldb padded by `pad`
 * elements (a pad that is not a multiple of 8 takes the kernel's unaligned path). */
static int sm90; /* tc_case: the wgmma entry (k_cuda_tc_gemm_sm90) */

static void tc_case(int type, int m, int n, int k, int ak, int bk, int pad, int bias, int relu)
{
    g_init();
    int lda = (ak ? k : m) + pad, ldb = (bk ? k : n) + pad;
    size_t na = (size_t)(ak ? m : k) * lda, nb = (size_t)(bk ? n : k) * ldb, nc = (size_t)m * n;
    uint16_t *ha = malloc(na * 2), *hb = malloc(nb * 2);
    float *fa = g_rand(na, 11), *fb = g_rand(nb, 12), *hbias = g_rand(n, 13), *ref = malloc(nc * 4);
    double *mag = malloc(nc * sizeof(double));
    for (size_t i = 0; i < na; i++) ha[i] = g_to16(type, fa[i]);
    for (size_t i = 0; i < nb; i++) hb[i] = g_to16(type, fb[i]);
    g_ref_gemm16(type, ha, lda, ak, hb, ldb, bk, m, n, k, bias ? hbias : NULL, relu, ref, mag);
    uint16_t *ga = g_up(ha, na * 2), *gb = g_up(hb, nb * 2);
    float *gbias = bias ? g_up(hbias, n * 4) : NULL, *gc = g_dev(nc * 4);
    k_tc_gemm g = {.type = type, .m = m, .n = n, .k = k, .a = ga, .b = gb, .lda = lda, .ldb = ldb, .a_kfast = ak,
                   .b_kfast = bk, .c = gc, .ldc = n, .relu = relu, .bias = gbias};
    g_need((sm90 ? k_cuda_tc_gemm_sm90(&g, NULL) : k_cuda_tc_gemm(&g, NULL)) == 0 && port_dev_sync("tc gemm") == 0,
           "tc gemm");
    float *c = g_result(gc, nc);
    size_t bad = 0, first = 0;
    double worst = 0;
    for (size_t i = 0; i < nc; i++) {
        double e = fabs((double)c[i] - ref[i]), tol = (k + 2) * 0x1p-23 * mag[i] + 1e-30;
        if (!(e <= tol)) {
            if (!bad++) first = i;
        }
        if (e / (mag[i] + 1e-30) > worst) worst = e / (mag[i] + 1e-30);
    }
    CHECKF(!bad, "%s m=%d n=%d k=%d a %s b %s pad %d bias %d relu %d: %zu of %zu outside the bound, first [%zu][%zu] "
           "= %.9g, reference %.9g", type == K_CUDA_MM_BF16 ? "bf16" : "f16", m, n, k, ak ? "k-fast" : "m-fast",
           bk ? "k-fast" : "n-fast", pad, bias, relu, bad, nc, first / n, first % n, c[first], ref[first]);
    (void)worst;
    port_dev_free(ga), port_dev_free(gb), port_dev_free(gc);
    if (gbias) port_dev_free(gbias);
    free(ha), free(hb), free(fa), free(fb), free(hbias), free(ref), free(mag), free(c);
}

/* Every layout pair (linear's forward is k/k, its input gradient k/n, its weight
 * gradient m/n), both types, shapes that are not multiples of the 64x64 or 128x128
 * tile nor of the 32-deep slice, aligned (cp.async) and unaligned rows. */
TEST(gpu_tc_gemm_layouts_odd_shapes)
{
    static const int shapes[][3] = {{1, 1, 1}, {17, 9, 23}, {64, 64, 32}, {70, 130, 45}, {33, 100, 200}};
    for (int type = K_CUDA_MM_BF16; type <= K_CUDA_MM_F16; type++)
        for (int ak = 0; ak < 2; ak++)
            for (int bk = 0; bk < 2; bk++)
                for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
                    const int *d = shapes[s];
                    tc_case(type, d[0], d[1], d[2], ak, bk, 0, 0, 0);
                    if (s == 3) tc_case(type, d[0], d[1], d[2], ak, bk, 8, 1, 1); /* aligned padded rows, epilogue */
                }
}

/* The sm_90 wgmma kernel (k-contiguous, aligned rows): odd m and n, k tails, many slices
 * through its 3 stages. Runs on the executor, and on a GPU only where it is an sm_90. */
TEST(gpu_tc_gemm_wgmma)
{
    if (!g_sm90()) return;
    static const int shapes[][4] = {{1, 1, 8, 0}, {64, 128, 32, 0}, {130, 200, 96, 0}, {70, 33, 45, 3}, {256, 136, 200, 0}};
    sm90 = 1;
    for (int type = K_CUDA_MM_BF16; type <= K_CUDA_MM_F16; type++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            tc_case(type, shapes[s][0], shapes[s][1], shapes[s][2], 1, 1, shapes[s][3], s == 2, s == 2);
    sm90 = 0;
}

#if DDPRT_SIMT
unsigned long long simt_wgmma_count(int ta, int tb); /* test/simt/simt_tc.cc */
#endif

/* The wgmma products through the raw entry (k_cuda_tc_gemm, wgmma on): every A / B pair of
 * k- and m/n-contiguous operands, m and n over 128 (the 128 tile) and off it, k tails;
 * aligned rows on wg_gemm, unaligned ones on the register kernel (wgg_gemm), both with
 * the m/n-contiguous ones in M/N-major tiles (imm-trans 1). Against the CPU with the bound above; on the
 * executor the wgmma ops are counted by their transpose flags: every one of the product's
 * (2 warpgroups x 2 k16 steps a 32-deep slice, every block) where it should be. */
TEST(gpu_tc_gemm_wgmma_mn_major)
{
    if (!g_sm90()) return;
    g_wgmma_on();
    static const int shapes[][4] = {{136, 200, 96, 0}, {130, 250, 50, 6}, {129, 131, 45, 3}};
    for (int type = K_CUDA_MM_BF16; type <= K_CUDA_MM_F16; type++)
        for (int ak = 0; ak < 2; ak++)
            for (int bk = 0; bk < 2; bk++)
                for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
                    const int *d = shapes[i];
#if DDPRT_SIMT
                    unsigned long long c0[4], c1[4];
                    for (int f = 0; f < 4; f++) c0[f] = simt_wgmma_count(f >> 1, f & 1);
#endif
                    tc_case(type, d[0], d[1], d[2], ak, bk, d[3], i == 1, i == 1);
#if DDPRT_SIMT
                    g_need(port_dev_sync("wgmma count") == 0, "sync");
                    unsigned long long ops = 4ull * ((d[0] + 127) / 128) * ((d[1] + 127) / 128) * ((d[2] + 31) / 32);
                    int want = (!ak) << 1 | !bk; /* both kernels: m/n-contiguous in M/N-major tiles */
                    for (int f = 0; f < 4; f++) {
                        c1[f] = simt_wgmma_count(f >> 1, f & 1);
                        CHECKF(c1[f] - c0[f] == (f == want ? ops : 0), "m=%d n=%d k=%d pad %d a %s b %s: %llu wgmma ops "
                               "with imm-trans-a %d imm-trans-b %d, expected %llu", d[0], d[1], d[2], d[3],
                               ak ? "k-fast" : "m-fast", bk ? "k-fast" : "n-fast", c1[f] - c0[f], f >> 1, f & 1,
                               f == want ? ops : 0);
                    }
#endif
                }
    g_wgmma_off();
}

/* The 128x128 tile (64 or more output tiles), the 3-stage pipeline over many slices. */
TEST(gpu_tc_gemm_big_tile_pipeline)
{
    tc_case(K_CUDA_MM_BF16, 1030, G_BIG(1100, 1030), 70, 1, 1, 0, 1, 0);
    tc_case(K_CUDA_MM_F16, 1024, 1024, G_BIG(512, 96), 0, 0, 0, 0, 1);
}

/* conv and linear on the tensor cores against the CPU at the same precision: bf16 the
 * CPU's --amp bf16 kernels; f16 and tf32 the fp32 kernels on rounded x, w, dy (the same
 * operands). Both sides hold the same rounded operands and accumulate in fp32, in
 * different orders: the bound is the fp32 GEMMs' (relative to the largest value). */
#define MM_TOL 2e-4

/* tf32 as the kernels round it (k_cuda_tc.cuh's k_tf32: to nearest, ties away). */
static float tf32(float f)
{
    uint32_t u = rt_f32_bits(f);
    return (u & 0x7f800000u) == 0x7f800000u ? f : rt_bits_f32((u + 0x1000u) & 0xffffe000u);
}

static float *round_copy(int mm, const float *x, size_t n)
{
    float *y = malloc(n * 4 + 4);
    for (size_t i = 0; i < n; i++)
        y[i] = mm == K_CUDA_MM_F16 ? rt_f16_to_f32(rt_f32_to_f16(x[i])) : mm == K_CUDA_MM_TF32 ? tf32(x[i]) : x[i];
    return y;
}

static void mm_check(const char *what, int mm, float *const *gpu, float *const *cpu, const size_t *n, int k)
{
    static const char *names[] = {"y", "dx", "dw", "db"};
    for (int i = 0; i < k; i++) {
        if (!cpu[i]) continue;
        double e = g_relerr(g_result(gpu[i], n[i]), cpu[i], n[i]);
        CHECKF(e < MM_TOL, "%s %s: %s rel err %.3g", mm == K_CUDA_MM_BF16 ? "bf16" : mm == K_CUDA_MM_F16 ? "f16" : "tf32",
               what, names[i], e);
    }
}

static void linear_mm_case(int mm, int n, int in, int out)
{
    g_init();
    size_t nx = (size_t)n * in, nw = (size_t)out * in, ny = (size_t)n * out;
    float *x0 = g_rand(nx, 5), *w0 = g_rand(nw, 6), *b = g_rand(out, 7), *dy0 = g_rand(ny, 8);
    float *x = round_copy(mm, x0, nx), *w = round_copy(mm, w0, nw), *dy = round_copy(mm, dy0, ny);
    float *y = malloc(ny * 4), *dx = malloc(nx * 4), *dw = malloc(nw * 4), *db = malloc(out * 4);
    if (mm == K_CUDA_MM_BF16) {
        void *ws = malloc(k_linear_bf16_workspace(n, in, out) + 64);
        k_linear_fwd_bf16(n, in, out, x, w, b, y, ws);
        k_linear_bwd_bf16(n, in, out, x, w, dy, dx, dw, db, ws);
        free(ws);
    } else {
        k_linear_fwd(n, in, out, x, w, b, y);
        k_linear_bwd(n, in, out, x, w, dy, dx, dw, db);
        float *t = malloc(nw * 4);
        k_linear_bwd(n, in, out, x, w, dy0, NULL, t, db); /* the bias gradient: of dy as it is */
        free(t);
    }
    float *gx = g_up(x0, nx * 4), *gw = g_up(w0, nw * 4), *gb = g_up(b, out * 4), *gdy = g_up(dy0, ny * 4);
    float *gy = g_dev(ny * 4), *gdx = g_dev(nx * 4), *gdw = g_dev(nw * 4), *gdb = g_dev(out * 4);
    void *ws = g_dev(k_cuda_linear_workspace(n, in, out) + 64);
    g_need(k_cuda_linear_fwd_mm(mm, n, in, out, gx, gw, NULL, gb, gy, ws, NULL) == 0, "linear fwd");
    g_need(k_cuda_linear_bwd_mm(mm, n, in, out, gx, gw, NULL, gdy, gdx, gdw, gdb, ws, NULL) == 0, "linear bwd");
    char what[64];
    snprintf(what, sizeof what, "linear n=%d in=%d out=%d", n, in, out);
    float *gpu[] = {gy, gdx, gdw, gdb}, *cpu[] = {y, dx, dw, db};
    size_t cnt[] = {ny, nx, nw, (size_t)out};
    mm_check(what, mm, gpu, cpu, cnt, 4);
    port_dev_free(gx), port_dev_free(gw), port_dev_free(gb), port_dev_free(gdy), port_dev_free(gy);
    port_dev_free(gdx), port_dev_free(gdw), port_dev_free(gdb), port_dev_free(ws);
    free(x0), free(w0), free(b), free(dy0), free(x), free(w), free(dy), free(y), free(dx), free(dw), free(db);
}

static void conv_mm_case(int mm, const int *d)
{
    g_init();
    k_conv_shape sh = {.n = d[0], .c = d[1], .h = d[2], .w = d[3], .k = d[4], .r = d[5], .s = d[6], .stride = d[7],
                       .pad = d[8]};
    k_conv_shape_init(&sh);
    size_t nx = (size_t)sh.n * sh.c * sh.h * sh.w, nw = (size_t)sh.k * sh.c * sh.r * sh.s;
    size_t ny = (size_t)sh.n * sh.k * sh.p * sh.q;
    float *x0 = g_rand(nx, 1), *w0 = g_rand(nw, 2), *b = g_rand(sh.k, 3), *dy0 = g_rand(ny, 4);
    float *x = round_copy(mm, x0, nx), *w = round_copy(mm, w0, nw), *dy = round_copy(mm, dy0, ny);
    float *y = malloc(ny * 4), *dx = malloc(nx * 4), *dw = malloc(nw * 4), *db = malloc(sh.k * 4);
    if (mm == K_CUDA_MM_BF16) {
        void *ws = aligned_alloc(64, (k_conv2d_bf16_workspace(&sh) + 64) / 64 * 64);
        k_conv2d_fwd_bf16(&sh, x, w, b, y, ws);
        k_conv2d_bwd_bf16(&sh, x, w, dy, dx, dw, db, ws);
        free(ws);
    } else {
        void *ws = aligned_alloc(64, (k_conv2d_workspace(&sh) + 64) / 64 * 64);
        k_conv2d_fwd(&sh, x, w, b, y, ws);
        k_conv2d_bwd(&sh, x, w, dy, dx, dw, db, ws);
        float *t = malloc(nw * 4);
        k_conv2d_bwd(&sh, x, w, dy0, NULL, t, db, ws); /* the bias gradient: of dy as it is */
        free(t), free(ws);
    }
    float *gx = g_up(x0, nx * 4), *gw = g_up(w0, nw * 4), *gb = g_up(b, sh.k * 4), *gdy = g_up(dy0, ny * 4);
    float *gy = g_dev(ny * 4), *gdx = g_dev(nx * 4), *gdw = g_dev(nw * 4), *gdb = g_dev(sh.k * 4);
    void *ws = g_dev(k_cuda_conv2d_workspace(&sh) + 64);
    g_need(k_cuda_conv2d_fwd_mm(mm, &sh, gx, gw, NULL, gb, gy, ws, NULL) == 0, "conv fwd");
    g_need(k_cuda_conv2d_bwd_mm(mm, &sh, gx, gw, NULL, gdy, gdx, gdw, gdb, ws, NULL) == 0, "conv bwd");
    char what[96];
    snprintf(what, sizeof what, "conv n=%d c=%d %dx%d k=%d %dx%d st=%d pad=%d", d[0], d[1], d[2], d[3], d[4], d[5],
             d[6], d[7], d[8]);
    float *gpu[] = {gy, gdx, gdw, gdb}, *cpu[] = {y, dx, dw, db};
    size_t cnt[] = {ny, nx, nw, (size_t)sh.k};
    mm_check(what, mm, gpu, cpu, cnt, 4);
    port_dev_free(gx), port_dev_free(gw), port_dev_free(gb), port_dev_free(gdy), port_dev_free(gy);
    port_dev_free(gdx), port_dev_free(gdw), port_dev_free(gdb), port_dev_free(ws);
    free(x0), free(w0), free(b), free(dy0), free(x), free(w), free(dy), free(y), free(dx), free(dw), free(db);
}

/* Linear: LeNet's and odd shapes, a split-K weight gradient (n = 1000). */
TEST(gpu_tc_linear_matches_cpu_amp)
{
    for (int mm = K_CUDA_MM_BF16; mm <= K_CUDA_MM_TF32; mm++) {
        linear_mm_case(mm, 64, 320, 50);
        linear_mm_case(mm, 7, 33, 65);
        linear_mm_case(mm, 1000, 50, 10);
        linear_mm_case(mm, G_BIG(256, 40), G_BIG(1024, 136), 130);
    }
}

/* conv: LeNet, ResNet-like 3x3 (stride 1 and 2), 1x1 stride 2, odd planes and a 7x7
 * stride-2 stem; the weight gradients split over k. */
TEST(gpu_tc_conv_matches_cpu_amp)
{
    static const int convs[][9] = {{8, 1, 28, 28, 10, 5, 5, 1, 0},  {7, 10, 12, 12, 20, 5, 5, 1, 0},
                                   {2, 16, 14, 14, 32, 3, 3, 1, 1}, {2, 16, 15, 15, 24, 3, 3, 2, 1},
                                   {2, 16, 9, 9, 130, 3, 3, 1, 1},  {2, 8, 15, 15, 16, 1, 1, 2, 0},
                                   {1, 3, 32, 32, 16, 7, 7, 2, 3}};
    for (int mm = K_CUDA_MM_BF16; mm <= K_CUDA_MM_TF32; mm++)
        for (size_t i = 0; i < sizeof convs / sizeof convs[0]; i++) conv_mm_case(mm, convs[i]);
}

/* conv with bf16 / f16 products on the NHWC copies (k_cuda_conv.cu: x, w, dy permuted
 * into the workspace, both operands by cp.async; C % 8 == 0 for the forward and weight
 * grad, K % 8 == 0 for the input grad): 1x1, 3x3 and 5x5, stride 1 and 2, pad 0 and 1,
 * odd planes, n*p*q and k off the tiles; k = 20 (input grad gathered, weight grad's dy
 * element by element) and c = 12 (forward and weight grad gathered) beside the copies. */
TEST(gpu_tc_conv_nhwc_matches_cpu_amp)
{
    static const int convs[][9] = {{2, 8, 11, 9, 16, 3, 3, 1, 1}, {3, 16, 9, 7, 24, 5, 5, 2, 1},
                                   {2, 24, 7, 7, 40, 1, 1, 2, 0}, {1, 8, 13, 13, 72, 3, 3, 2, 0},
                                   {2, 16, 6, 7, 20, 3, 3, 1, 1}, {2, 12, 5, 5, 16, 3, 3, 1, 0}};
    for (int mm = K_CUDA_MM_BF16; mm <= K_CUDA_MM_F16; mm++)
        for (size_t i = 0; i < sizeof convs / sizeof convs[0]; i++) conv_mm_case(mm, convs[i]);
}

/* conv and linear on wgmma (k_cuda_wgmma_on: the 128-tile products, split-K too) against
 * the CPU with the bound above; the start-up probe agrees. Runs on the executor (DDPRT_WGMMA=1)
 * and on an sm_90 GPU. */
TEST(gpu_tc_conv_linear_on_wgmma)
{
    if (!g_sm90()) return;
    char why[200];
    CHECKF(k_cuda_wgmma_probe(why, sizeof why) == 1 && !k_cuda_wgmma_on(), "%s", why);
    setenv("DDPRT_WGMMA", "1", 1);
    CHECKF(k_cuda_wgmma_setup(why, sizeof why) == 1 && k_cuda_wgmma_on(), "%s", why);
    /* the NHWC copies on wg_gemm: a 3x3 input grad (128 channels), a 1x1 forward split
     * over k and its input grad; the weight grads of the first and the last on wg_gemm's
     * M/N-major tiles (both operands m/n-contiguous), and k = 130 (dy's copy element by
     * element into them) */
    static const int convs[][9] = {{2, 16, 16, 16, 128, 3, 3, 1, 1}, {1, 8, 18, 18, 136, 3, 3, 2, 0},
                                   {1, 128, 12, 12, 16, 3, 3, 1, 1}, {1, 256, 12, 12, 128, 1, 1, 1, 0},
                                   {1, 24, 13, 13, 130, 3, 3, 1, 1}};
    for (int mm = K_CUDA_MM_BF16; mm <= K_CUDA_MM_F16; mm++) {
        linear_mm_case(mm, 256, 200, 136);
        linear_mm_case(mm, 1024, 130, 128); /* the weight gradient split over k */
        for (size_t i = 0; i < sizeof convs / sizeof convs[0]; i++) conv_mm_case(mm, convs[i]);
    }
    g_wgmma_off();
}
