/* SiLU's CUDA kernels (kernels/cuda/k_cuda_act.cu) against the CPU ones, bit for bit (a
 * NaN's payload excepted), on sizes around the grid's edges and exp's clamps: both run
 * kernels/k_math.h's k_silu, so this holds on a GPU as on the SIMT executor. */
#include "test/gpu/g.h"
#include "kernels/k_tfm.h"
#include <math.h>

TEST(gpu_silu_bit_exact)
{
    g_init();
    static const size_t sizes[] = {1, 255, 256, 257, 100003};
    static const float edge[] = {0.0f, -0.0f, NAN, 86.9f, -86.9f, 87.5f, -87.5f, 88.5f, -88.5f, INFINITY, -INFINITY, 1e-7f};
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        size_t n = sizes[si];
        float *x = g_rand(n, 51), *dy = g_rand(n, 52);
        for (size_t i = 0; i < n; i++) x[i] *= 20.0f; /* into exp's tails */
        for (size_t i = 0; i < n && i < sizeof edge / sizeof edge[0]; i++) x[i] = edge[i];
        float *y = malloc(n * 4), *dx = malloc(n * 4);
        k_silu_fwd(n, x, y);
        k_silu_bwd(n, x, dy, dx);
        float *gx = g_up(x, n * 4), *gdy = g_up(dy, n * 4), *gy = g_dev(n * 4);
        g_need(k_cuda_silu_fwd(n, gx, gy, NULL) == 0, "silu fwd");
        CHECKF(g_ndiff_nan(g_result(gy, n), y, n, 'f') == 0, "fwd n=%zu", n);
        g_need(k_cuda_silu_bwd(n, gx, gdy, gdy, NULL) == 0, "silu bwd"); /* dx over dy */
        CHECKF(g_ndiff_nan(g_result(gdy, n), dx, n, 'f') == 0, "bwd n=%zu", n);
        free(x), free(dy), free(y), free(dx);
    }
}
