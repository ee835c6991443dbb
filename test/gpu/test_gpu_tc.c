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

static uint16_t to16(int type, float f) { return type == K_TC_BF16 ? rt_f32_to_bf16(f) : rt_f32_to_f16(f); }
static float from16(int type, uint16_t h) { return type == K_TC_BF16 ? rt_bf16_to_f32(h) : rt_f16_to_f32(h); }

/* One product: A m x k and B k x n in the layouts asked, lda/ldb padded by `pad`
 * elements (a pad that is not a multiple of 8 takes the kernel's unaligned path). */
static void tc_case(int type, int m, int n, int k, int ak, int bk, int pad, int bias, int relu)
{
    g_init();
    int lda = (ak ? k : m) + pad, ldb = (bk ? k : n) + pad;
    size_t na = (size_t)(ak ? m : k) * lda, nb = (size_t)(bk ? n : k) * ldb, nc = (size_t)m * n;
    uint16_t *ha = malloc(na * 2), *hb = malloc(nb * 2);
    float *fa = g_rand(na, 11), *fb = g_rand(nb, 12), *hbias = g_rand(n, 13), *ref = malloc(nc * 4);
    double *mag = malloc(nc * sizeof(double));
    for (size_t i = 0; i < na; i++) ha[i] = to16(type, fa[i]);
    for (size_t i = 0; i < nb; i++) hb[i] = to16(type, fb[i]);
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double s = 0, s_abs = 0;
            for (int q = 0; q < k; q++) {
                double p = (double)from16(type, ha[ak ? (size_t)i * lda + q : (size_t)q * lda + i]) *
                           from16(type, hb[bk ? (size_t)j * ldb + q : (size_t)q * ldb + j]);
                s += p, s_abs += fabs(p);
            }
            float v = (float)s + (bias ? hbias[j] : 0.0f);
            ref[(size_t)i * n + j] = relu && v < 0 ? 0.0f : v;
            mag[(size_t)i * n + j] = s_abs + (bias ? fabs(hbias[j]) : 0);
        }
    uint16_t *ga = g_up(ha, na * 2), *gb = g_up(hb, nb * 2);
    float *gbias = bias ? g_up(hbias, n * 4) : NULL, *gc = g_dev(nc * 4);
    k_tc_gemm g = {.type = type, .m = m, .n = n, .k = k, .a = ga, .b = gb, .lda = lda, .ldb = ldb, .a_kfast = ak,
                   .b_kfast = bk, .c = gc, .ldc = n, .relu = relu, .bias = gbias};
    g_need(k_cuda_tc_gemm(&g, NULL) == 0 && port_dev_sync("tc gemm") == 0, "tc gemm");
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
           "= %.9g, reference %.9g", type == K_TC_BF16 ? "bf16" : "f16", m, n, k, ak ? "k-fast" : "m-fast",
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
    for (int type = K_TC_BF16; type <= K_TC_F16; type++)
        for (int ak = 0; ak < 2; ak++)
            for (int bk = 0; bk < 2; bk++)
                for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
                    const int *d = shapes[s];
                    tc_case(type, d[0], d[1], d[2], ak, bk, 0, 0, 0);
                    if (s == 3) tc_case(type, d[0], d[1], d[2], ak, bk, 8, 1, 1); /* aligned padded rows, epilogue */
                }
}

/* The 128x128 tile (64 or more output tiles), the 3-stage pipeline over many slices. */
TEST(gpu_tc_gemm_big_tile_pipeline)
{
    tc_case(K_TC_BF16, 1030, G_BIG(1100, 1030), 70, 1, 1, 0, 1, 0);
    tc_case(K_TC_F16, 1024, 1024, G_BIG(512, 96), 0, 0, 0, 0, 1);
}
